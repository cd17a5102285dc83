"""A typed result reads back as it was written, and one that no longer reads as its type
never stops an unwinding (issue 28, defect 2).

A model with an alias, or with a computed field under ``extra="forbid"``, was stored in
a shape its own type refused to read: the run that stored it ended ``failed`` without
its compensation. And after a deploy changed a result's type, every unwinding of an
older saga failed before its compensation was called, even one that never read
``ctx.result``: now the compensation gets the JSON as stored, ``ctx.result_error``
says why, and the history records the mismatch once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from saga import RetryPolicy, Saga, SagaFailed, SagaStatus, StepContext
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease

SEEN: list[Any] = []


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    """What the steps saw, empty at the start of each test (the async twin imports it)."""
    SEEN.clear()


class Aliased(pydantic.BaseModel):
    """Built by its alias only (no ``populate_by_name``): stored by field name."""

    unit_price: int = pydantic.Field(alias="unitPrice")
    sku: str


class AliasedOut(pydantic.BaseModel):
    """Dumps by alias of its own accord: still stored, and read, the same way."""

    model_config = pydantic.ConfigDict(serialize_by_alias=True)
    unit_price: int = pydantic.Field(alias="unitPrice")


class Sized(pydantic.BaseModel):
    """A computed field under ``extra="forbid"``: dumped, it is an input it refuses."""

    model_config = pydantic.ConfigDict(extra="forbid")
    width: int

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def double(self) -> int:
        return self.width * 2


class Failing(Exception):
    """The step that makes the saga unwind."""


def _unwinding(name: str, make: Callable[[], object], result_type: object) -> Saga:
    """A saga whose first step returns ``make()`` (read back as ``result_type``), whose
    second reads it, and whose third fails: the first step's compensation reads it too."""
    saga = Saga(name)

    @saga.step(result_type=result_type)
    def first(ctx: StepContext) -> Any:
        return make()

    @first.compensation
    def undo_first(ctx: StepContext) -> None:
        SEEN.append(("undo", ctx.result, ctx.result_error))

    @saga.step()
    def second(ctx: StepContext) -> None:
        SEEN.append(("read", ctx.results["first"]))

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def third(ctx: StepContext) -> None:
        raise Failing("declined")

    return saga


@pytest.mark.parametrize(
    ("name", "make", "result_type"),
    [
        ("rt-alias", lambda: Aliased(unitPrice=3, sku="mug"), Aliased),
        ("rt-alias-out", lambda: AliasedOut(unitPrice=4), AliasedOut),
        ("rt-computed", lambda: Sized(width=2), Sized),
        ("rt-in-list", lambda: [Sized(width=1), Sized(width=5)], list[Sized]),
    ],
)
def test_a_model_reads_back_from_its_own_record(
    make_coord: MakeCoordinator, name: str, make: Callable[[], object], result_type: object
) -> None:
    coord = make_coord()
    saga = _unwinding(name, make, result_type)
    with pytest.raises(SagaFailed) as failure:
        coord.run(saga, data={})
    expected = make()
    assert [("read", expected), ("undo", expected, None)] == SEEN
    view = coord.get(failure.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("first").result == expected
    assert view.step("first").result_error is None
    assert [e.kind for e in coord.history(view.id) if e.kind == "result_mismatch"] == []


class QuoteV1(pydantic.BaseModel):
    sku: str
    price: int


class QuoteV2(pydantic.BaseModel):
    """The next deploy's type: ``price`` became ``cents``, so an older row does not fit."""

    sku: str
    cents: int


class Crash(BaseException):
    """Escapes every ``except Exception``: the saga is left as a killed process leaves it."""


def _deploy(quote_type: type[pydantic.BaseModel], reads: bool, crashes: bool) -> Saga:
    """One deploy of ``deploy-order``: its ``quote`` step returns ``quote_type``; its
    compensation reads ``ctx.result`` or not, and fails its first attempt (so the mismatch
    must be recorded once, not per attempt); ``pay`` crashes the process or is declined."""
    saga = Saga("deploy-order")

    @saga.step(result_type=quote_type)
    def quote(ctx: StepContext) -> Any:
        return QuoteV1(sku="mug", price=12)  # only the first deploy runs it

    @quote.compensation(retry=RetryPolicy(max_attempts=3, initial_delay=0, retry_on=Exception))
    def release(ctx: StepContext) -> None:
        SEEN.append(("undo", ctx.attempt, ctx.result if reads else "-", ctx.result_error))
        if ctx.attempt == 1:
            raise RuntimeError("the stock service blinked")

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def pay(ctx: StepContext) -> None:
        if crashes:
            raise Crash("the old deploy's process dies here")
        raise Failing("declined")

    return saga


@pytest.mark.parametrize("reads", [True, False], ids=["reads-result", "ignores-result"])
def test_after_a_type_changed_in_a_deploy_an_older_saga_still_unwinds(
    make_coord: MakeCoordinator, reads: bool
) -> None:
    old = make_coord()
    with pytest.raises(Crash):
        old.run(_deploy(QuoteV1, reads, crashes=True), key="d-1")
    (stuck,) = old.list(name="deploy-order")
    expire_lease(old, stuck.id)  # the old deploy's process is gone
    new = make_coord()
    new.register(_deploy(QuoteV2, reads, crashes=False))  # replaces the definition here
    (outcome,) = new.recover().outcomes
    assert outcome.status is SagaStatus.COMPENSATED
    stored = {"sku": "mug", "price": 12}
    error = "result of step 'quote' does not match its type QuoteV2: cents: Field required"
    first, second = SEEN
    assert first[:3] == ("undo", 1, stored if reads else "-")
    assert second[:3] == ("undo", 2, stored if reads else "-")
    assert all((got[3] or "").startswith(error) for got in SEEN)
    mismatches = [e for e in new.history(stuck.id) if e.kind == "result_mismatch"]
    assert [(e.step, e.attempt) for e in mismatches] == [("quote", 1)]  # once, not per attempt
    assert (mismatches[0].detail or {})["error"].startswith(f"ResultTypeError: {error}")
    view = new.get(stuck.id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("quote").result == stored  # shown as stored, with the reason
    assert (view.step("quote").result_error or "").startswith(error)


class Poisoned(pydantic.BaseModel):
    """A type whose validator raises what is no ValidationError (a bug, a dead service)."""

    sku: str

    @pydantic.field_validator("sku")
    @classmethod
    def _check(cls, value: str) -> str:
        if value == "poison":
            raise LookupError("the catalogue service is down")
        return value


poisoned = Saga("poisoned-order")


@poisoned.step()
def make_poison(ctx: StepContext) -> Poisoned:
    return Poisoned.model_construct(sku="poison")  # stored; reading it back raises


@make_poison.compensation
def undo_poison(ctx: StepContext) -> None:
    SEEN.append((ctx.result, ctx.result_error))


@poisoned.step(retry=RetryPolicy(max_attempts=1))
def decline(ctx: StepContext) -> None:
    raise Failing("declined")


def test_a_raising_validator_breaks_neither_views_nor_the_unwinding(
    make_coord: MakeCoordinator,
) -> None:
    coord = make_coord()
    with pytest.raises(SagaFailed) as failure:
        coord.run(poisoned)
    ((result, error),) = SEEN
    assert result == {"sku": "poison"}
    assert "reading it raised LookupError: the catalogue service is down" in (error or "")
    view = coord.get(failure.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("make_poison").result == {"sku": "poison"}
    assert "LookupError" in (view.step("make_poison").result_error or "")
    (listed,) = coord.list(name="poisoned-order")
    assert listed.step("make_poison").result == {"sku": "poison"}
