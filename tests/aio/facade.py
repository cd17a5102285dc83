"""A blocking front for ``AsyncCoordinator``, shaped like ``Coordinator``.

It runs an event loop in a background thread and turns each call into a
coroutine on that loop, so the behavioural tests written against the sync
API run unchanged against the async one: ``coord.run(...)`` awaits
``AsyncCoordinator.run(...)``; ``with coord.saga(...) as s`` drives
``async with`` (``__aenter__``/``__aexit__``) and ``s.step(...)`` awaits
``AsyncSagaScope.step``. Step functions therefore run exactly as in an
async application: async ones on the loop, sync ones in worker threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from saga import (
    AsyncCoordinator,
    AsyncSagaScope,
    RecoveryOutcome,
    RecoveryReport,
    Saga,
    SagaStatus,
    SagaView,
)
from saga._internal.engine.scope import StepCall
from saga._internal.listening import Listener, Listeners
from saga._internal.ports import EventRecord, SagaStore

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread; ``run`` blocks until a coroutine ends."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="aio-facade")
        self._thread.daemon = True
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class AsyncScopeFacade:
    """``with`` over an ``AsyncSagaScope``: each method awaits its async twin."""

    def __init__(self, loop: LoopThread, scope: AsyncSagaScope) -> None:
        self._loop = loop
        self.scope = scope

    def __enter__(self) -> AsyncScopeFacade:
        self._loop.run(self.scope.__aenter__())
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._loop.run(self.scope.__aexit__(kind, error, traceback))

    def step(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._loop.run(self.scope.step(fn, *args, **kwargs))

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> StepCall:
        return self.scope.call(fn, *args, **kwargs)

    def parallel(self, *calls: StepCall) -> list[Any]:
        return self._loop.run(self.scope.parallel(*calls))

    @property
    def id(self) -> str:
        return self.scope.id

    @property
    def status(self) -> SagaStatus | None:
        return self.scope.status

    @property
    def results(self) -> dict[str, Any]:
        return self.scope.results


class AsyncFacade:
    """``Coordinator``'s methods, each carried out by an ``AsyncCoordinator`` on its loop."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        self._loop = LoopThread()
        self.aio = AsyncCoordinator(url, **options)

    def __repr__(self) -> str:
        return f"AsyncFacade({self.aio!r})"

    def __enter__(self) -> AsyncFacade:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # What tests read directly (the store itself stays sync: it is the same database).
    @property
    def store(self) -> SagaStore:
        return self.aio.sync.store

    @property
    def owner(self) -> str:
        return self.aio.owner

    @property
    def lease_ttl(self) -> float:
        return self.aio.lease_ttl

    @property
    def listeners(self) -> Listeners:
        return self.aio.listeners

    def add_listener(self, listener: Listener, **options: Any) -> None:
        self.aio.add_listener(listener, **options)

    def close(self) -> None:
        self._loop.run(self.aio.close())
        self._loop.close()

    def create_schema(self) -> None:
        self._loop.run(self.aio.create_schema())

    def register(self, *sagas: Saga) -> None:
        self.aio.register(*sagas)

    def run(
        self,
        saga: Saga | str,
        data: Any = None,
        *,
        key: str | None = None,
        deadline: timedelta | float | None = None,
    ) -> SagaView:
        return self._loop.run(self.aio.run(saga, data, key=key, deadline=deadline))

    def saga(
        self, name: str, *, key: str | None = None, deadline: timedelta | float | None = None
    ) -> AsyncScopeFacade:
        return AsyncScopeFacade(self._loop, self.aio.saga(name, key=key, deadline=deadline))

    def get(self, saga_id: str) -> SagaView:
        return self._loop.run(self.aio.get(saga_id))

    def list(
        self,
        status: SagaStatus | str | Iterable[SagaStatus | str] | None = None,
        name: str | None = None,
        limit: int = 100,
        **options: Any,
    ) -> list[SagaView]:
        return self._loop.run(self.aio.list(status, name, limit, **options))

    def history(self, saga_id: str) -> list[EventRecord]:
        return self._loop.run(self.aio.history(saga_id))

    def recover(self, *, compensate: bool = False, limit: int | None = None) -> RecoveryReport:
        return self._loop.run(self.aio.recover(compensate=compensate, limit=limit))

    def compensate(self, saga_id: str, *, action: str = "compensate") -> SagaView:
        return self._loop.run(self.aio.compensate(saga_id, action=action))

    def resume(self, saga_id: str) -> SagaView:
        return self._loop.run(self.aio.resume(saga_id))

    def cancel(self, saga_id: str) -> SagaView:
        return self._loop.run(self.aio.cancel(saga_id))

    def pause(self, saga_id: str) -> SagaView:
        return self._loop.run(self.aio.pause(saga_id))

    def recover_saga(self, saga_id: str, *, compensate: bool = False) -> RecoveryOutcome:
        return self._loop.run(self.aio.recover_saga(saga_id, compensate=compensate))
