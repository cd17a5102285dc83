"""What a running step knows about itself: ``StepContext`` and ``current_step()``."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from saga._internal.resource_view import NO_RESOURCES, ResourceView

_current: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar(
    "saga_current_step", default=None
)


@dataclasses.dataclass(frozen=True, slots=True)
class StepContext:
    """Passed to declarative steps and compensations; also ``current_step()``.

    ``data`` is the saga's input, ``results`` the results of the steps that
    succeeded so far (by step name), ``result`` this step's own forward
    result in a compensation (``None`` when the action never returned).
    ``idempotency_key`` is stable across attempts and processes: pass it to
    the systems the step calls. ``resources`` are what the coordinator gives its
    steps (``ctx.resources["bank"]``, see ``saga.Resources``); a test of a step
    builds its context with fakes there.

    ``result_error`` is None unless ``result`` could not be read as the type its step
    declares (the type changed since it was recorded, or its validator raised): then
    ``result`` is the JSON as stored (dicts, lists, strings, numbers) and
    ``result_error`` says why, so that a compensation can still undo what it can.
    """

    saga_id: str
    saga_name: str
    step: str
    attempt: int
    epoch: int
    data: Any = None
    results: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    result: Any = None
    compensating: bool = False
    session: Any = None
    resources: ResourceView = NO_RESOURCES
    result_error: str | None = None

    @property
    def idempotency_key(self) -> str:
        return f"{self.saga_id}:{self.step}"


def current_step() -> StepContext:
    """The context of the step running in this thread or task."""
    context = _current.get()
    if context is None:
        raise RuntimeError("current_step() was called outside a saga step")
    return context


@contextlib.contextmanager
def entered(context: StepContext) -> Iterator[StepContext]:
    """Make ``context`` what ``current_step()`` returns while the block runs."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
