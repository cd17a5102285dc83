"""``AsyncCoordinator``: the asyncio twin of ``Coordinator``, method for method."""

from __future__ import annotations

import asyncio
import builtins
import functools
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from saga import engine, faults, operations
from saga.aio_scope import AsyncSagaScope
from saga.codec import DEFAULT_PAYLOAD_LIMIT, encode
from saga.coordinator import Coordinator
from saga.definition import Saga
from saga.drivers.tasks import TaskDriver
from saga.errors import LeaseLostError, OperationRefusedError, SagaBusyError, SagaFailed
from saga.policy import STORE_RETRY, RetryPolicy
from saga.ports import ClaimGuard, Event, EventRecord, SagaRecord, SagaStore
from saga.recovery import RecoveryOutcome, RecoveryReport
from saga.status import SagaStatus
from saga.store import async_store
from saga.views import SagaView, view_of


class AsyncCoordinator:
    """Runs sagas durably from asyncio code; the same arguments as ``Coordinator``.

    Async step functions run on the caller's event loop (so they may use its
    connections and clients); sync ones run in a worker thread.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        lease_ttl: float = 30.0,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        trusted_modules: Iterable[str] = (),
        store: SagaStore | None = None,
        store_retry: RetryPolicy = STORE_RETRY,
        session_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.sync = Coordinator(
            url,
            lease_ttl=lease_ttl,
            payload_limit=payload_limit,
            trusted_modules=trusted_modules,
            store=store,
            store_retry=store_retry,
            session_factory=session_factory,
        )
        self.store = async_store(self.sync.store)
        self.flows = self.sync.flows
        self.driver = TaskDriver(self.store, self.sync.driver)

    def __repr__(self) -> str:
        return f"AsyncCoordinator({self.sync.store.url!r})"

    @property
    def owner(self) -> str:
        return self.sync.owner

    @property
    def lease_ttl(self) -> float:
        return self.sync.lease_ttl

    async def __aenter__(self) -> AsyncCoordinator:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.store.close()
        await asyncio.to_thread(self.sync.close)

    async def create_schema(self) -> None:
        await asyncio.to_thread(self.sync.create_schema)

    def register(self, *sagas: Saga) -> None:
        self.sync.register(*sagas)

    # -- running ----------------------------------------------------------------------------

    async def run(
        self,
        saga: Saga | str,
        data: Any = None,
        *,
        key: str | None = None,
        deadline: timedelta | float | None = None,
    ) -> SagaView:
        """Run a declarative saga to its end; see ``Coordinator.run``."""
        definition = self.sync._definition(saga)
        payload = encode(data, "input", self.flows.payload_limit)
        record, change, started = operations.new_saga(
            definition, key, payload.text, self.owner, deadline
        )
        first_name = started[0].name if started else None
        faults.point("before_start_commit", first_name)
        stored, created = await self.store.create(record, change, self.lease_ttl)
        if not created:
            return await self._rerun(definition, stored, payload.text)
        faults.point("after_start_commit", first_name)
        return await self._forward(definition, engine.apply(record, change), started)

    async def _forward(
        self, saga: Saga, record: SagaRecord, started: Sequence[engine.RunStep] = ()
    ) -> SagaView:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def stop_requested() -> None:  # on the heartbeat thread: a cancel request or a deadline
            loop.call_soon_threadsafe(stop.set)

        with self.sync.heartbeat.holding(record.id, record.epoch, stop_requested):
            flow = self.flows.forward(saga, record, started)
            return view_of(await self.driver.run(flow, stop))

    async def _rerun(self, saga: Saga, existing: SagaRecord, input_text: str | None) -> SagaView:
        if operations.rerun(saga, existing, input_text):
            return view_of(existing)
        try:
            claim = functools.partial(
                self.sync.store.claim,
                existing.id,
                self.owner,
                self.lease_ttl,
                operations.claimed("rerun"),
                operations.continue_guard(),
            )
            record = await self.store.call(claim)
        except SagaBusyError:
            raise
        except OperationRefusedError:  # it finished (or failed) between our read and our claim
            latest = await asyncio.to_thread(self.sync._load, existing.id)
            return await self._rerun(saga, latest, input_text)
        started = self.sync.started_with(record)  # the version the saga began with
        if record.status is SagaStatus.COMPENSATING:
            view = await self._unwind(record, started)
            raise SagaFailed(view.id, view.status, engine.failed_step(record))
        return await self._forward(started, record)

    def saga(
        self, name: str, *, key: str | None = None, deadline: timedelta | float | None = None
    ) -> AsyncSagaScope:
        """A context-manager saga: ``async with coord.saga(...) as s: await s.step(...)``."""
        return AsyncSagaScope(self, name, key, operations.seconds(deadline))

    # -- reading --------------------------------------------------------------------------------

    async def get(self, saga_id: str) -> SagaView:
        return await asyncio.to_thread(self.sync.get, saga_id)

    async def list(
        self,
        status: SagaStatus | str | Iterable[SagaStatus | str] | None = None,
        name: str | None = None,
        limit: int = 100,
        *,
        stuck: bool = False,
        before: str | None = None,
        older_than: float | None = None,
        key: str | None = None,
    ) -> list[SagaView]:
        return await asyncio.to_thread(
            lambda: self.sync.list(
                status, name, limit, stuck=stuck, before=before, older_than=older_than, key=key
            )
        )

    async def history(self, saga_id: str) -> builtins.list[EventRecord]:
        return await asyncio.to_thread(self.sync.history, saga_id)

    # -- recovery and operator actions --------------------------------------------------------

    async def recover(
        self, *, compensate: bool = False, limit: int | None = None
    ) -> RecoveryReport:
        """Claim every saga whose lease expired and finish it; see ``Coordinator.recover``."""
        report = RecoveryReport()
        seen: set[str] = set()
        while limit is None or len(report.outcomes) < limit:
            claimed = await self.store.call(
                self.sync.store.claim_expired, self.owner, self.lease_ttl, 1
            )
            if not claimed:
                break
            if claimed[0] in seen:
                await asyncio.to_thread(self.sync._release, claimed[0])
                break
            seen.add(claimed[0])
            report.outcomes.append(await self._recover_one(claimed[0], compensate))
        return report

    async def _recover_one(self, saga_id: str, compensate: bool) -> RecoveryOutcome:
        record: SagaRecord | None = None
        try:
            record = await asyncio.to_thread(self.sync._load, saga_id)
            if record.owner != self.owner:  # claimed by another since our claim
                return RecoveryOutcome.lost_to_another(saga_id, record.name)
            view = await self._finish(record, compensate)
            return RecoveryOutcome(saga_id, record.name, view.status, None)
        except SagaFailed as failure:
            return RecoveryOutcome(saga_id, record.name if record else "?", failure.status, None)
        except LeaseLostError:  # another process has the saga now: nothing more is written
            return RecoveryOutcome.lost_to_another(saga_id, record.name if record else "?")
        except Exception as error:  # one saga's problem never stops the others
            await asyncio.to_thread(self.sync._refused, saga_id, record, error)
            return RecoveryOutcome(saga_id, record.name if record else "?", None, str(error))

    async def _finish(self, record: SagaRecord, compensate: bool) -> SagaView:
        saga = self.sync._saga_for(record)
        route = operations.recovery_route(record, saga, compensate)
        if route == "forward":
            assert saga is not None
            return await self._forward(saga, record)
        if route == "turn":
            self.flows.check_compensations(record, saga)  # refuse before changing anything
            record = await self._turn(record, "recovery")
        return await self._unwind(record, saga)

    async def _turn(self, record: SagaRecord, why: str) -> SagaRecord:
        event = operations.turn(record, why)
        return await self.driver.run(self.flows.write(record, [], [event], SagaStatus.COMPENSATING))

    async def _unwind(self, record: SagaRecord, saga: Saga | None, fresh: bool = False) -> SagaView:
        with self.sync.heartbeat.holding(record.id, record.epoch):
            return view_of(await self.driver.run(self.flows.unwind(record, saga, fresh)))

    async def compensate(self, saga_id: str, *, action: str = "compensate") -> SagaView:
        """Unwind a stuck or failed saga now; see ``Coordinator.compensate``."""
        record = await asyncio.to_thread(self.sync._load, saga_id)
        operations.refuse_compensate(record)
        saga = self.sync._saga_for(record)
        self.flows.check_compensations(record, saga)  # refuse before changing anything
        guard = operations.compensate_guard(record)
        event = operations.by_operator(action)
        record = await self._claim_guarded(saga_id, event, guard, operations.refuse_compensate)
        fresh = record.status is SagaStatus.FAILED
        if record.status is not SagaStatus.COMPENSATING:
            record = await self._turn(record, "operator compensate")
        return await self._unwind(record, saga, fresh)

    async def resume(self, saga_id: str) -> SagaView:
        """Carry a stuck declarative saga forward now."""
        record = await asyncio.to_thread(self.sync._load, saga_id)
        operations.refuse_resume(record)
        saga = self.sync._saga_for(record)
        assert saga is not None
        guard = operations.resume_guard(record)
        event = operations.by_operator("resume")
        record = await self._claim_guarded(saga_id, event, guard, operations.refuse_resume)
        return await self._forward(saga, record)

    async def cancel(self, saga_id: str) -> SagaView:
        """Ask a running saga to stop at its next step boundary and unwind; see
        ``Coordinator.cancel``."""
        record = await asyncio.to_thread(self.sync._load, saga_id)
        operations.refuse_cancel(record)
        guard, event = operations.cancel_guard(), operations.by_operator("cancel")
        request = functools.partial(self.sync.store.request_cancel, saga_id, event, guard)
        await self.store.call(self.sync.guarded, request, saga_id, operations.refuse_cancel)
        saga = self.sync._saga_if_known(record)
        if saga is None and record.kind == "declarative":
            return await self.get(saga_id)  # recorded; a process with the definition unwinds it
        try:
            claim = functools.partial(
                self.sync.store.claim,
                saga_id,
                self.owner,
                self.lease_ttl,
                operations.claimed("cancel"),
                guard,
            )
            record = await self.store.call(claim)
        except OperationRefusedError:  # busy, or its owner honoured the request meanwhile
            return await self.get(saga_id)
        return await self._unwind(await self._turn(record, "cancel requested"), saga)

    async def _claim_guarded(
        self, saga_id: str, event: Event, guard: ClaimGuard, refuse: Callable[[SagaRecord], object]
    ) -> SagaRecord:
        return await self.store.call(self.sync.claim_guarded, saga_id, event, guard, refuse)
