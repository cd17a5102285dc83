"""The async form of a sync store: each call in a worker thread.

What ``saga.store.async_store`` gives a backend without native async statements
(SQLite; PostgreSQL's calls off the hot path). docs/async.md has the measurements.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from saga.ports import Commit, SagaRecord, SagaStore

T = TypeVar("T")


class ThreadedAsyncStore:
    """Awaitable access to a sync ``SagaStore``: each call runs in a worker thread.

    The async form of the storage port. A backend may send its hot calls
    (``create``, ``commit``) natively instead: see ``saga.store.async_store``.
    """

    def __init__(self, store: SagaStore) -> None:
        self.sync = store

    async def call(self, method: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(method, *args)

    async def create(
        self, saga: SagaRecord, first: Commit, lease_ttl: float
    ) -> tuple[SagaRecord, bool]:
        return await asyncio.to_thread(self.sync.create, saga, first, lease_ttl)

    async def close(self) -> None:
        """Release what the async side holds (the sync store is closed by its owner)."""

    async def commit(self, change: Commit, lease_ttl: float) -> bool:
        return await asyncio.to_thread(self.sync.commit, change, lease_ttl)

    async def load(self, saga_id: str) -> SagaRecord | None:
        return await asyncio.to_thread(self.sync.load, saga_id)
