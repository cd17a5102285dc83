"""The async form of any ``SagaStore``: each call in a worker thread.

What the asyncio driver uses wherever a store has no native async form of its
own (SQLite, the in-memory store, PostgreSQL's calls off the hot path):
``asyncio.to_thread`` costs a thread hand-over per call, which docs/async.md
measures against the native form.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from saga._internal.ports import Commit, SagaRecord, SagaStore

T = TypeVar("T")


class ThreadedAsyncStore:
    """An ``AsyncSagaStore`` over a sync ``SagaStore``: each call runs in a worker thread."""

    def __init__(self, store: SagaStore) -> None:
        self.sync = store

    async def call(self, method: Callable[..., T], *args: Any) -> T:
        """``method(*args)`` in a worker thread."""
        return await asyncio.to_thread(method, *args)

    async def create(
        self, saga: SagaRecord, first: Commit, lease_ttl: float
    ) -> tuple[SagaRecord, bool]:
        """The sync store's ``create``, in a worker thread."""
        return await asyncio.to_thread(self.sync.create, saga, first, lease_ttl)

    async def commit(self, change: Commit) -> bool:
        """The sync store's ``commit``, in a worker thread."""
        return await asyncio.to_thread(self.sync.commit, change)

    async def load(self, saga_id: str) -> SagaRecord | None:
        """The sync store's ``load``, in a worker thread."""
        return await asyncio.to_thread(self.sync.load, saga_id)

    async def close(self) -> None:
        """Nothing of its own to release (the sync store is closed by its owner)."""
