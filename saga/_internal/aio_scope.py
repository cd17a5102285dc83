"""``async with coord.saga(...) as s: await s.step(...)``: the asyncio driver's scope.

The same face and flows as ``SagaScope`` (:mod:`saga._internal.engine.scope_face`), run with
the asyncio driver: async functions are awaited on the loop (and can be timed out
and cancelled), sync ones run in a worker thread.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from saga._internal.drivers.functions import bound
from saga._internal.drivers.tasks import TaskDriver
from saga._internal.engine.scope import StepCall, step_call
from saga._internal.engine.scope_face import ScopeFace
from saga._internal.scope import actions_of
from saga._internal.signature import taking


class AsyncSagaScope(ScopeFace[TaskDriver]):
    """The ``s`` in ``async with coord.saga(...) as s``; see :meth:`step`."""

    async def __aenter__(self) -> AsyncSagaScope:
        await self.driver.run(self._engine.enter(self._flows))
        return self

    @taking(step_call)
    async def step(self, call: StepCall) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited if async) as the next step;
        ``compensate(result, *args, **kwargs)`` undoes it."""
        action = bound(call.fn, call.args, call.kwargs)  # an async fn stays async: awaited
        with self.driver.functions.given([action]) as (target,):
            assert target is not None
            return await self.driver.run(self._flows.call(call, target), shielded=True)

    async def parallel(self, *calls: StepCall) -> list[Any]:
        """Run ``s.call(...)`` steps at once, as tasks; their results, in order.

        As ``SagaScope.parallel``; on a failure, calls in flight whose
        function is async are cancelled (recorded failed, then compensated).
        """
        with self.driver.functions.given(actions_of(calls)) as targets:
            return await self.driver.run(self._flows.parallel(calls, targets))

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            await self.driver.run(self._flows.leave(error))
        finally:
            await self.driver.run(self._flows.let_go())
