"""A real SQL store that loses the acknowledgement of chosen commits.

:class:`LostAckStore` is :class:`SqlSagaStore` on a real database. Its writes
(saga creation, commits, transactional steps, claims) are numbered in the
order they are made; write number ``n`` in ``lose`` really commits, and then
its caller is told the connection dropped (``StorageUnavailableError``), just
as when the network fails between the server's COMMIT and its reply. The
fault is injected inside the store's own retry loop, so what is tested is
that loop: the retry must recognise its own earlier write and apply nothing
twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from saga.adapters.sql.store import SqlSagaStore
from sqlalchemy import Connection

from saga import RetryPolicy, StorageUnavailableError
from saga._internal.ports import ClaimGuard, Commit, Event, Runnable, SagaRecord
from tests.faults import figures

T = TypeVar("T")

FAST_STORE_RETRY = RetryPolicy(
    max_attempts=None,
    initial_delay=0.001,
    max_delay=0.02,
    jitter=0.0,
    retry_on=(StorageUnavailableError,),
    max_elapsed=30.0,
)
"""The store's retry, with tiny delays: a lost acknowledgement costs no test time."""


def dialect_for(url: str) -> Any:
    if url.startswith("sqlite"):
        from saga.adapters.sql.sqlite import SqliteDialect

        return SqliteDialect()
    from saga.adapters.sql.postgres import PostgresDialect

    return PostgresDialect()


class LostAckStore(SqlSagaStore):
    """A SQL store whose writes numbered in ``lose`` commit, then report a dropped connection."""

    def __init__(self, url: str, lose: Collection[int] = ()) -> None:
        super().__init__(url, dialect_for(url), FAST_STORE_RETRY)
        self.lose = frozenset(lose)
        self.writes: list[str] = []
        """Each write's kind, in order (``create``, ``commit``, ``transact``, ``claim``...)."""
        self.lost: list[str] = []
        self._pending = threading.local()
        self._lock = threading.Lock()
        if self.hot is not None:
            self.hot = _LossyHotPath(self.hot, self)

    # -- the writes, numbered -----------------------------------------------------------

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> tuple[SagaRecord, bool]:
        parent = super()
        return self._write("create", lambda: parent.create(saga, first, lease_ttl))

    def commit(self, change: Commit) -> bool:
        parent = super()
        return self._write("commit", lambda: parent.commit(change))

    def transact(
        self, work: Callable[[Any], T], change_for: Callable[[T], Commit]
    ) -> tuple[T, bool]:
        parent = super()
        return self._write("transact", lambda: parent.transact(work, change_for))

    def claim(
        self,
        saga_id: str,
        owner: str,
        lease_ttl: float,
        event: Event,
        guard: ClaimGuard | None = None,
    ) -> SagaRecord:
        parent = super()
        return self._write("claim", lambda: parent.claim(saga_id, owner, lease_ttl, event, guard))

    def claim_expired(
        self, owner: str, lease_ttl: float, limit: int, runnable: Runnable | None = None
    ) -> list[str]:
        parent = super()
        return self._write(
            "claim_expired", lambda: parent.claim_expired(owner, lease_ttl, limit, runnable)
        )

    def request_cancel(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        parent = super()
        self._write("request_cancel", lambda: parent.request_cancel(saga_id, event, guard))

    def request_pause(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        parent = super()
        self._write("request_pause", lambda: parent.request_pause(saga_id, event, guard))

    def record_event(self, saga_id: str, event: Event) -> None:
        parent = super()
        self._write("record_event", lambda: parent.record_event(saga_id, event))

    def record_fenced_event(self, saga_id: str, epoch: int, event: Event) -> bool:
        parent = super()
        return self._write(
            "record_fenced_event", lambda: parent.record_fenced_event(saga_id, epoch, event)
        )

    def _write(self, kind: str, call: Callable[[], T]) -> T:
        self._pending.kind = kind
        try:
            return call()
        finally:
            self._pending.kind = None

    # -- where the acknowledgement is lost ------------------------------------------------

    def once(self, work: Callable[[Connection], T]) -> T:
        result = super().once(work)
        self.committed()
        return result

    def committed(self) -> None:
        """The first transaction of the current write just committed: maybe lose its ack."""
        kind = getattr(self._pending, "kind", None)
        if kind is None:
            return
        self._pending.kind = None
        with self._lock:
            self.writes.append(kind)
            number = len(self.writes)
            if number not in self.lose:
                return
            self.lost.append(kind)
        figures.count("lost acks")
        raise StorageUnavailableError(
            f"{self.url}: connection lost after COMMIT of write {number} ({kind}) [injected]"
        )


class _LossyHotPath:
    """PostgreSQL's single-statement path, losing acknowledgements as its store says."""

    def __init__(self, hot: Any, store: LostAckStore) -> None:
        self.hot = hot
        self.store = store

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> bool:
        created = bool(self.hot.create(saga, first, lease_ttl))
        self.store.committed()
        return created

    def commit(self, change: Commit) -> bool | None:
        stop: bool | None = self.hot.commit(change)
        self.store.committed()
        return stop

    def close(self) -> None:
        self.hot.close()


WritePredicate = Callable[[str, Commit], bool]
"""Which write loses its acknowledgement: its kind (``commit``, ``transact``...) and change."""


class SiblingFirstStore(LostAckStore):
    """Loses the acknowledgement of the first write ``lose`` accepts; before telling its
    caller, waits until another thread has committed one more write of the same saga.

    What a parallel saga meets when one branch's acknowledgement is lost and a
    sibling commits before the reconnect: the retry comes after the sibling's
    commit. The wait is bounded (``timeout``; ``timed_out`` then says so). With
    ``sibling_first=False`` the caller is told at once, as :class:`LostAckStore` does.
    """

    def __init__(
        self, url: str, lose: WritePredicate, sibling_first: bool = True, timeout: float = 30.0
    ) -> None:
        super().__init__(url)
        self.lose_when = lose
        self.timeout = timeout if sibling_first else 0.0
        self.caught = threading.Event()
        """Set when the chosen write committed and its caller is not yet told."""
        self.timed_out = False
        self._saga_writes: dict[str, int] = {}
        self._watches: list[tuple[WritePredicate, threading.Event]] = []
        self._cond = threading.Condition()

    def watch(self, predicate: WritePredicate) -> threading.Event:
        """An event set once a write from now on that ``predicate`` accepts committed."""
        event = threading.Event()
        with self._cond:
            self._watches.append((predicate, event))
        return event

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> tuple[SagaRecord, bool]:
        self._pending.change = first
        return super().create(saga, first, lease_ttl)

    def commit(self, change: Commit) -> bool:
        self._pending.change = change
        return super().commit(change)

    def transact(
        self, work: Callable[[Any], T], change_for: Callable[[T], Commit]
    ) -> tuple[T, bool]:
        def noted(result: T) -> Commit:
            change = self._pending.change = change_for(result)
            return change

        return super().transact(work, noted)

    def _write(self, kind: str, call: Callable[[], T]) -> T:
        try:
            return super()._write(kind, call)
        finally:
            self._pending.change = None

    def committed(self) -> None:
        kind = getattr(self._pending, "kind", None)
        change: Commit | None = getattr(self._pending, "change", None)
        if kind is None:
            return
        self._pending.kind = None
        saga = change.saga_id if change is not None else ""
        with self._cond:
            self.writes.append(kind)
            landed = self._saga_writes[saga] = self._saga_writes.get(saga, 0) + 1
            self._cond.notify_all()
            if change is None:
                return
            for predicate, event in self._watches:
                if predicate(kind, change):
                    event.set()
            if self.lost or not self.lose_when(kind, change):
                return
            self.lost.append(kind)
            self.caught.set()
            if self.timeout and not self._cond.wait_for(
                lambda: self._saga_writes[saga] > landed, self.timeout
            ):
                self.timed_out = True
        figures.count("lost acks")
        raise StorageUnavailableError(
            f"{self.url}: connection lost after COMMIT of {kind} [injected]"
        )
