"""A saga whose recorded result its own type cannot read back, importable as
``tests.cli.typed_steps`` (``--app``): the model's validator raises what is no
``ValidationError`` (a bug, a service it asks that is down) on the stored value."""

from __future__ import annotations

import pydantic

from saga import Saga, StepContext


class Poisoned(pydantic.BaseModel):
    sku: str

    @pydantic.field_validator("sku")
    @classmethod
    def _check(cls, value: str) -> str:
        if value == "poison":
            raise LookupError("the catalogue service is down")
        return value


POISONED = Saga("cli-poisoned")


@POISONED.step()
def make_poison(ctx: StepContext) -> Poisoned:
    return Poisoned.model_construct(sku="poison")  # stored unvalidated; read back, it raises
