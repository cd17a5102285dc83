"""``AsyncCoordinator``: the asyncio twin of ``Coordinator``, method for method."""

from __future__ import annotations

import asyncio
import builtins
from datetime import timedelta
from typing import Any

from saga._internal.aio_scope import AsyncSagaScope
from saga._internal.coordinator import Coordinator, RunCall
from saga._internal.definition import Saga
from saga._internal.drivers.tasks import TaskDriver
from saga._internal.engine import rules
from saga._internal.listening import Listener
from saga._internal.ports import EventRecord, SagaRecord
from saga._internal.recovery import RecoveryOutcome, RecoveryReport
from saga._internal.signature import taking, twin_of
from saga._internal.store import async_store
from saga._internal.views import SagaView, needs_events, view_of


class AsyncCoordinator:
    """Runs sagas durably from asyncio code; the same arguments as ``Coordinator``.

    Async step functions run on the caller's event loop (so they may use its
    connections and clients); sync ones run in a worker thread.
    """

    @taking(Coordinator)
    def __init__(self, sync: Coordinator) -> None:
        self.sync = sync  # made of the arguments given, as ``Coordinator`` takes them
        self.listeners = self.sync.listeners
        self.resources = self.sync.resources
        self.store = async_store(self.sync.store)
        self.driver = TaskDriver(self.store, self.sync.driver)
        self.engine = self.sync.engine

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
        """See ``Coordinator.close``; async resource closers are awaited on this loop."""
        await self.resources.aclose()
        await self.store.close()
        await asyncio.to_thread(self.sync.close)

    async def create_schema(self) -> None:
        await asyncio.to_thread(self.sync.create_schema)

    def drain(self) -> None:
        """See ``Coordinator.drain``; safe to call from a signal handler."""
        self.sync.drain()

    @property
    def draining(self) -> bool:
        """See ``Coordinator.draining``."""
        return self.sync.draining

    def register(self, *sagas: Saga) -> None:
        self.sync.register(*sagas)

    def add_listener(
        self, listener: Listener, *, inline: bool | None = None, queue_size: int | None = None
    ) -> None:
        """See ``Coordinator.add_listener``; a coroutine function is awaited on the
        listener's own thread and event loop, never on the caller's."""
        self.sync.add_listener(listener, inline=inline, queue_size=queue_size)

    # -- running ----------------------------------------------------------------------------

    @taking(RunCall)
    async def run(self, call: RunCall) -> SagaView:
        """Run a declarative saga to its end; see ``Coordinator.run``."""
        return view_of(await self.driver.run(call.flow(self.sync.definitions, self.engine)))

    def saga(
        self, name: str, *, key: str | None = None, deadline: timedelta | float | None = None
    ) -> AsyncSagaScope:
        """A context-manager saga: ``async with coord.saga(...) as s: await s.step(...)``."""
        return AsyncSagaScope(self, name, key, rules.seconds(deadline))

    # -- reading --------------------------------------------------------------------------------

    async def get(
        self, saga_id: str | None = None, *, key: str | None = None, name: str | None = None
    ) -> SagaView:
        """See ``Coordinator.get``: by id, or by key (and name)."""
        return await asyncio.to_thread(lambda: self.sync.get(saga_id, key=key, name=name))

    @twin_of(Coordinator.list)
    async def list(self, *args: Any, **kwargs: Any) -> builtins.list[SagaView]:
        return await asyncio.to_thread(self.sync.list, *args, **kwargs)

    async def _view(self, record: SagaRecord) -> SagaView:
        """See ``Coordinator._view``."""
        if not needs_events(record):
            return view_of(record)
        return view_of(record, await asyncio.to_thread(self.sync.store.events, record.id))

    async def history(self, saga_id: str) -> builtins.list[EventRecord]:
        return await asyncio.to_thread(self.sync.history, saga_id)

    # -- recovery and operator actions --------------------------------------------------------

    async def recover(
        self, *, compensate: bool = False, limit: int | None = None
    ) -> RecoveryReport:
        """Claim every saga whose lease expired and finish it; see ``Coordinator.recover``."""
        return await self.driver.run(self.engine.recover(compensate, limit))

    async def recover_saga(self, saga_id: str, *, compensate: bool = False) -> RecoveryOutcome:
        """Claim this one saga and finish it; see ``Coordinator.recover_saga``."""
        return await self.driver.run(self.engine.recover_saga(saga_id, compensate))

    async def compensate(self, saga_id: str, *, action: str = "compensate") -> SagaView:
        """Unwind a stuck or failed saga now; see ``Coordinator.compensate``."""
        return await self._view(await self.driver.run(self.engine.compensate(saga_id, action)))

    async def resume(self, saga_id: str) -> SagaView:
        """Carry a stuck or paused declarative saga forward now; see
        ``Coordinator.resume``."""
        return await self._view(await self.driver.run(self.engine.resume(saga_id)))

    async def retry(self, saga_id: str, from_step: str | None = None) -> SagaView:
        """Run forward again a saga that failed past its pivot (``from_step``: from that
        step on); see ``Coordinator.retry``."""
        return await self._view(await self.driver.run(self.engine.retry(saga_id, from_step)))

    async def skip(self, saga_id: str, *, step: str, result: Any = None, reason: str) -> SagaView:
        """Record a step done by hand and go on; see ``Coordinator.skip``."""
        return await self._view(
            await self.driver.run(self.engine.skip(saga_id, step, result, reason))
        )

    async def pause(self, saga_id: str) -> SagaView:
        """Hold a running saga at its next step boundary; see ``Coordinator.pause``."""
        return await self._view(await self.driver.run(self.engine.pause(saga_id)))

    async def cancel(self, saga_id: str) -> SagaView:
        """Ask a running saga to stop at its next step boundary and unwind; see
        ``Coordinator.cancel``."""
        return await self._view(await self.driver.run(self.engine.cancel(saga_id)))
