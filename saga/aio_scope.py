"""Async context-manager sagas: ``async with coord.saga(...) as s: await s.step(...)``."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any

from saga import engine, faults, operations
from saga.codec import encode
from saga.engine import Cursor
from saga.errors import INFRASTRUCTURE_ERRORS, OperationRefusedError, SagaFailed
from saga.lease import Heartbeat
from saga.parallel import StepCall, bound, run_group_async
from saga.policy import RetryPolicy
from saga.ports import Event, SagaRecord, StepWrite
from saga.scope import PlannedStep, ScopeCore
from saga.status import SagaStatus

if TYPE_CHECKING:
    from saga.aio import AsyncCoordinator


class AsyncSagaScope(ScopeCore):
    """The ``s`` in ``async with coord.saga(...) as s``; see :meth:`step`."""

    def __init__(
        self,
        coordinator: AsyncCoordinator,
        name: str,
        key: str | None,
        deadline: float | None = None,
    ) -> None:
        limit = coordinator.flows.payload_limit
        super().__init__(coordinator.owner, limit, name, key, deadline)
        self.coordinator = coordinator
        self.flows = coordinator.flows
        self.driver = coordinator.driver
        self.store = coordinator.sync.store

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
            if self._record.status is SagaStatus.COMPENSATING:  # a crash interrupted unwinding
                raise await self._finish_unwinding(self._record)
            self._hold()
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
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited if async) as the next step;
        ``compensate(result, *args, **kwargs)`` undoes it."""
        planned = self._plan(fn, args, kwargs, compensate, transactional, retry, step_name)
        if planned is None:
            return self._result
        reason = self._gave_up(planned)
        if reason is not None:
            assert self._record is not None
            raise await self.driver.run(
                self.flows.fail(self._record, planned.template.name, reason, None)
            )
        await self._begin(planned)
        return await self._run(planned, timeout, fn, args, kwargs)

    async def parallel(self, *calls: StepCall) -> list[Any]:
        """Run ``s.call(...)`` steps at once, as tasks; their results, in order.

        As ``SagaScope.parallel``; on a failure, calls in flight whose
        function is async are cancelled (recorded failed, then compensated).
        """
        return await run_group_async(self, calls)

    async def _begin(self, *group: PlannedStep) -> None:
        starts, events = self._start_writes(*group)
        faults.point("before_start_commit", group[0].template.name)
        if self._record is None:
            await self._create(starts, events)
        else:
            self._record = await self.driver.run(self.flows.write(self._record, starts, events))
        faults.point("after_start_commit", group[0].template.name)
        if self._record is not None and self._record.stop:
            raise await self.driver.run(
                self.flows.cancelled(self._record, None, [p.template.name for p in group])
            )

    async def _create(self, starts: list[StepWrite], events: list[Event]) -> None:
        record = self._new_record()
        change = engine.commit(record, starts, [Event("saga_started"), *events])
        ttl = self.coordinator.lease_ttl
        stored, created = await asyncio.to_thread(self.store.create, record, change, ttl)
        if not created:
            raise OperationRefusedError(
                stored.id,
                f"saga {self.name!r} key {self.key!r} was started by another process meanwhile",
            )
        self._record = engine.apply(record, change)
        self._hold()

    async def _run(
        self,
        planned: PlannedStep,
        timeout: float | None,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        assert self._record is not None
        name = planned.template.name
        cursor = Cursor(self._record)

        action = bound(fn, args, kwargs)  # an async fn stays async: awaited, timed out

        try:
            result = await self.driver.run(
                self.flows.attempts(
                    cursor,
                    name,
                    planned.attempt,
                    planned.policy,
                    timeout,
                    action,
                    transactional=planned.template.transactional,
                ),
                shielded=True,
            )
            # A result that cannot be stored fails the step (whose action did run).
            encoded = encode(result, f"result of step {name!r}", self.payload_limit)
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception:
            self._record = cursor.record
            self._failed_step = name
            raise
        self._record = cursor.record
        if not planned.template.transactional:  # else recorded with its own writes
            write, event = engine.succeeded(self._record, name, encoded)
            self._record = await self.driver.run(self.flows.write(self._record, [write], [event]))
        faults.point("after_success_commit", name)
        return result

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if error is None and self._failed_step is None:
                await self._complete()
            elif self._unwinds(error):
                raise await self._unwind(error) from error
        finally:
            self._release()

    async def _complete(self) -> None:
        record = self._record
        if record is None or record.status is not SagaStatus.RUNNING:
            return
        done = engine.moved(record, SagaStatus.COMPLETED)
        faults.point("before_final_commit", None)
        self._record = await self.driver.run(
            self.flows.write(record, [], [done], SagaStatus.COMPLETED)
        )
        faults.point("after_final_commit", None)

    async def _unwind(self, error: BaseException | None) -> SagaFailed:
        settled = self._settled()
        if settled is not None:
            return settled
        record = self._record
        assert record is not None
        if self._failed_step is not None:
            return await self.driver.run(
                self.flows.fail(record, self._failed_step, error or "failed", None)
            )
        reason = engine.describe(error) if error else "block failed"
        turn = engine.moved(record, SagaStatus.COMPENSATING, reason=reason)
        record = await self.driver.run(
            self.flows.write(record, [], [turn], SagaStatus.COMPENSATING, reason)
        )
        try:
            record = await self.driver.run(self.flows.unwind(record, None))
        except SagaFailed as failure:
            return failure
        return SagaFailed(record.id, record.status, None)

    @property
    def _heartbeat(self) -> Heartbeat:
        return self.coordinator.sync.heartbeat
