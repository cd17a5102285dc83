"""``with coord.saga(name, key=...) as s: s.step(fn, ...)``: the thread driver's scope.

A shell: :class:`~saga._internal.engine.scope_face.ScopeFace` holds the saga's state and
flows (entering with a key included, each call, leaving); this class runs them
with the coordinator's thread driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

from saga._internal.drivers.functions import Action, bound
from saga._internal.drivers.threads import ThreadDriver
from saga._internal.engine.scope import StepCall, step_call
from saga._internal.engine.scope_face import ScopeFace
from saga._internal.signature import taking


class SagaScope(ScopeFace[ThreadDriver]):
    """The ``s`` in ``with coord.saga(...) as s``; see :meth:`step`."""

    def __enter__(self) -> SagaScope:
        self.driver.run(self._engine.enter(self._flows))
        return self

    @taking(step_call)
    def step(self, call: StepCall) -> Any:
        """Run ``fn(*args, **kwargs)`` as the next step; ``compensate(result, *args, **kwargs)``
        undoes it. Both must be module-level functions and the arguments JSON values.
        A replayed step returns its recorded result as ``result_type`` (default: ``fn``'s
        return annotation, when it names a dataclass or a model; see ``saga._internal.typed``)."""

        def action(_context: Any) -> Any:  # sync, even for an async fn: the driver awaits it
            return call.fn(*call.args, **call.kwargs)

        with self.driver.functions.given([action]) as (target,):
            assert target is not None
            return self.driver.run(self._flows.call(call, target))

    def parallel(self, *calls: StepCall) -> list[Any]:
        """Run ``s.call(...)`` steps at once, in threads; their results, in order.

        Every start is durable before any of them runs. If one fails, the
        others are waited for, everything that may have acted is compensated
        (newest first by completion) and the first error is raised.
        """
        with self.driver.functions.given(actions_of(calls)) as targets:
            return self.driver.run(self._flows.parallel(calls, targets))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.driver.run(self._flows.leave(error))
        finally:
            self.driver.run(self._flows.let_go())


def actions_of(calls: Sequence[object]) -> list[Action | None]:
    """What runs each of ``s.parallel``'s calls (None for what is not an ``s.call``:
    the flow refuses it, naming it, before anything runs)."""
    return [
        bound(call.fn, call.args, call.kwargs) if isinstance(call, StepCall) else None
        for call in calls
    ]
