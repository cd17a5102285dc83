"""``async with coord.saga(...) as s: await s.step(...)``: the asyncio driver's scope.

The same flows as ``SagaScope`` (:mod:`saga.engine.scope_flows`), run with the
asyncio driver: async functions are awaited on the loop (and can be timed out
and cancelled), sync ones run in a worker thread.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Protocol

from saga import engine, operations
from saga.drivers.tasks import TaskDriver
from saga.engine.flows import Flows
from saga.engine.scope import ScopeCore, StepCall, bound
from saga.engine.scope_flows import ScopeFlows
from saga.errors import SagaFailed
from saga.failure import raise_from_block
from saga.policy import RetryPolicy
from saga.ports import Event, SagaRecord
from saga.status import SagaStatus
from saga.views import SagaView


class AsyncScopeHost(Protocol):
    """What an async scope needs of its coordinator."""

    flows: Flows
    driver: TaskDriver

    @property
    def owner(self) -> str: ...

    @property
    def lease_ttl(self) -> float: ...

    async def _unwind(self, record: SagaRecord, saga: None, fresh: bool = False) -> SagaView: ...


class AsyncSagaScope(ScopeCore):
    """The ``s`` in ``async with coord.saga(...) as s``; see :meth:`step`."""

    def __init__(
        self,
        coordinator: AsyncScopeHost,
        name: str,
        key: str | None,
        deadline: float | None = None,
    ) -> None:
        super().__init__(coordinator.owner, coordinator.flows.payload_limit, name, key, deadline)
        self.coordinator = coordinator
        self.driver = coordinator.driver
        self.store = coordinator.driver.threads.store
        self._flows = ScopeFlows(self, coordinator.flows.resolver)

    async def __aenter__(self) -> AsyncSagaScope:
        if self.key is None:
            return self
        existing = await asyncio.to_thread(self.store.find, self.name, self.key)
        if self._continues(existing):
            assert existing is not None
            claim = Event("lease_claimed", detail={"why": "re-entered"})
            self._record = await asyncio.to_thread(
                self.store.claim,
                existing.id,
                self.owner,
                self.coordinator.lease_ttl,
                claim,
                operations.continue_guard(),  # not one that failed since it was read
            )
            self.driver.listeners.tell(self._record, [claim])
            if self._record.status is SagaStatus.COMPENSATING:  # a crash interrupted unwinding
                raise await self._finish_unwinding(self._record)
            self._holding = self.driver.threads.hold(self._record)
        return self

    async def _finish_unwinding(self, record: SagaRecord) -> SagaFailed:
        """Finish compensating a saga a crash left compensating; return what to raise."""
        try:
            view = await self.coordinator._unwind(record, None)
        except SagaFailed as failure:
            return failure
        return SagaFailed(view.id, view.status, engine.failed_step(record))

    async def step(
        self,
        fn: Any,
        *args: Any,
        compensate: Any = None,
        transactional: bool = False,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        step_name: str | None = None,
        result_type: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited if async) as the next step;
        ``compensate(result, *args, **kwargs)`` undoes it."""
        planned = self._plan(
            fn, args, kwargs, compensate, transactional, retry, step_name, result_type
        )
        if planned is None:
            return self._result
        action = bound(fn, args, kwargs)  # an async fn stays async: awaited, timed out
        return await self.driver.run(self._flows.step(planned, action, timeout), shielded=True)

    async def parallel(self, *calls: StepCall) -> list[Any]:
        """Run ``s.call(...)`` steps at once, as tasks; their results, in order.

        As ``SagaScope.parallel``; on a failure, calls in flight whose
        function is async are cancelled (recorded failed, then compensated).
        """
        return await self.driver.run(self._flows.parallel(calls))

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if error is None and self._failed_step is None:
                await self.driver.run(self._flows.complete())
            elif self._unwinds(error):
                raise_from_block(await self.driver.run(self._flows.unwind(error)), error)
        finally:
            self._release()
