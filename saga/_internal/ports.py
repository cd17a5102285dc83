"""The storage port: the only storage words the core knows.

A store keeps three things: saga instances, their steps (the success stack)
and an append-only event history, as the records of :mod:`saga._internal.record`. Every
change arrives as one :class:`Commit`, applied in one transaction and fenced by
the saga's epoch: if the epoch moved on (another process claimed the saga)
nothing is written and the store raises ``LeaseLostError``.

:class:`SagaStore` is what every store does; :class:`AsyncSagaStore` is its
awaitable form for the asyncio driver. What only some stores can do is a small
optional protocol of its own (:class:`Deletable`, :class:`JoinsSessions`,
:class:`MigratableSchema`, :class:`NativeAsync`), asked with ``isinstance``.
The records are importable from here too, as the port's words.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from saga._internal.record import (
    CREATION_TICK,
    DEFAULT_LIST_LIMIT,
    ClaimGuard,
    Commit,
    Event,
    EventRecord,
    ListQuery,
    Renewal,
    Runnable,
    SagaKind,
    SagaRecord,
    Stamp,
    StepRecord,
    StepWrite,
    guard_broken,
    undone,
)
from saga._internal.status import SagaStatus

__all__ = [
    "CREATION_TICK",
    "DEFAULT_LIST_LIMIT",
    "AsyncSagaStore",
    "ClaimGuard",
    "Commit",
    "Deletable",
    "Event",
    "EventRecord",
    "JoinsSessions",
    "KnowsOwners",
    "ListQuery",
    "MigratableSchema",
    "NativeAsync",
    "Renewal",
    "Runnable",
    "SagaKind",
    "SagaRecord",
    "SagaStore",
    "SchemaFound",
    "Stamp",
    "StepRecord",
    "StepWrite",
    "guard_broken",
    "undone",
]

T = TypeVar("T")


class SagaStore(Protocol):
    """The port through which the core reads and writes sagas."""

    url: str

    def create_schema(self) -> None: ...

    def schema_version(self) -> str | None:
        """The schema revision the store is at (None: nothing created yet)."""
        ...

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> tuple[SagaRecord, bool]:
        """Insert ``saga`` and apply ``first``; on a (name, key) clash return the existing one.

        At creation ``saga.deadline`` is in seconds *from now* (the database's
        now); the store keeps it as an absolute time.
        """
        ...

    def commit(self, change: Commit) -> bool:
        """Apply ``change`` fenced by its epoch; return whether the saga must stop
        (a cancel was requested or its deadline passed, by the database clock)."""
        ...

    def renew_many(self, held: Mapping[str, int], lease_ttl: float) -> Renewal:
        """Extend the leases of ``held`` (saga id -> epoch) in one transaction: what a
        heartbeat does, so that its cost does not grow with the sagas a process runs."""
        ...

    def load(self, saga_id: str) -> SagaRecord | None: ...

    def find(self, name: str, key: str) -> SagaRecord | None: ...

    def claim(
        self,
        saga_id: str,
        owner: str,
        lease_ttl: float,
        event: Event,
        guard: ClaimGuard | None = None,
    ) -> SagaRecord:
        """Take the saga (epoch + 1) unless another owner's lease is live (``SagaBusyError``)
        or ``guard`` no longer holds (``SagaChangedError``)."""
        ...

    def claim_expired(
        self, owner: str, lease_ttl: float, limit: int, runnable: Runnable | None = None
    ) -> list[str]:
        """Claim up to ``limit`` sagas whose lease expired (with ``runnable``: only those
        it admits, checked in the claim); return their ids."""
        ...

    def transact(
        self,
        work: Callable[[Any], T],
        change_for: Callable[[T], Commit],
    ) -> tuple[T, bool]:
        """Run ``work(session)`` and apply ``change_for(its result)`` in one transaction
        (transactional steps); ``session`` is a SQLAlchemy ``Session`` in it."""
        ...

    def request_cancel(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        """Record a cancel request on a running saga, if ``guard`` (checked in the same
        transaction) holds: ``SagaChangedError`` if the saga is running and it does not.
        A saga that finished meanwhile, or whose request is recorded already, is left."""
        ...

    def request_pause(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        """Turn a running saga ``paused``, if ``guard`` (checked in the same transaction)
        holds, and append ``event``: ``SagaChangedError`` if it is no longer running or
        the guard fails. A saga paused already is left. Its owner, if any, is told by
        its next commit's or renewal's answer ("stop") and hands it back."""
        ...

    def record_event(self, saga_id: str, event: Event) -> None: ...

    def record_fenced_event(self, saga_id: str, epoch: int, event: Event) -> bool:
        """Append ``event`` under ``epoch`` only while ``epoch`` is still the saga's, in one
        transaction with that check; return whether it was written (False: the saga was
        claimed since, or is gone, and nothing was written)."""
        ...

    def list(self, query: ListQuery) -> list[SagaRecord]: ...

    def status_counts(
        self, cap: int | None = None, statuses: Collection[SagaStatus] | None = None
    ) -> dict[SagaStatus, int]:
        """How many sagas there are in each status (statuses with none left out). With
        ``cap``, a status with more than ``cap`` sagas is counted as ``cap + 1`` ("more
        than cap"), which costs at most that many index entries however many there are.
        With ``statuses``, only those are counted: the others' index entries are not read
        (the metrics' gauges count the unfinished and failed sagas, not the finished)."""
        ...

    def stuck_count(self) -> int:
        """How many unfinished sagas no process holds a live lease on (by the database
        clock): what recovery would claim now."""
        ...

    def events(self, saga_id: str) -> builtins.list[EventRecord]: ...  # list: the method

    def now(self) -> float:
        """The database clock, in seconds since the epoch."""
        ...

    def close(self) -> None: ...


class AsyncSagaStore(Protocol):
    """The async form of the port, for the asyncio driver: the calls on its hot path
    (creations, commits, loads) awaitable; anything else through :meth:`call`.

    ``saga._internal.store.async_store`` picks one: a store's native async form if it has
    one (:class:`NativeAsync`), else its calls in worker threads.
    """

    sync: SagaStore
    """The sync store behind this one (closed by its owner, not by :meth:`close`)."""

    async def call(self, method: Callable[..., T], *args: Any) -> T:
        """``method(*args)``, a call of the sync store, without blocking the event loop."""
        ...

    async def create(
        self, saga: SagaRecord, first: Commit, lease_ttl: float
    ) -> tuple[SagaRecord, bool]:
        """As :meth:`SagaStore.create`."""
        ...

    async def commit(self, change: Commit) -> bool:
        """As :meth:`SagaStore.commit`."""
        ...

    async def load(self, saga_id: str) -> SagaRecord | None: ...

    async def close(self) -> None:
        """Release what the async side holds (connections of its own, if any)."""
        ...


# -- capabilities only some stores have ----------------------------------------------------


@runtime_checkable
class Deletable(Protocol):
    """A store that can delete sagas (``saga purge``)."""

    def delete(self, saga_ids: Sequence[str]) -> int:
        """Delete these sagas with their steps and events; return how many went."""
        ...


@runtime_checkable
class JoinsSessions(Protocol):
    """A store whose transactions a transactional step's SQL session can join."""

    def use_session_factory(self, factory: Callable[..., Any]) -> None:
        """Make the steps' sessions with ``factory`` (checked: it must reach this
        store's database, and only it)."""
        ...


@runtime_checkable
class KnowsOwners(Protocol):
    """A store that records how to tell its owners dead, so that a claim need not wait
    for the lease of a saga whose process was killed (the SQL store)."""

    def register_owner(self, owner: str) -> None:
        """Record ``owner`` as alive for as long as this process runs (once per owner)."""
        ...

    def owner_registered(self, owner: str) -> bool:
        """Whether ``owner`` is recorded (no I/O: asked before every saga)."""
        ...

    def keep_owners(self) -> None:
        """Check that what proves the registered owners alive still does, and record it
        again at once if it was lost (the store watches for that loss itself)."""
        ...

    def release_owner(self, owner: str) -> None:
        """Forget ``owner`` (its coordinator closes)."""
        ...


@runtime_checkable
class MigratableSchema(Protocol):
    """A store whose schema has revisions (``saga db status``, ``upgrade``, ``downgrade``)."""

    url: str

    def read_schema(self) -> SchemaFound:
        """What the database holds of saga's schema (nothing changed)."""
        ...

    def upgrade_schema(self) -> builtins.list[str]:
        """Migrate to this release's revision; the revisions applied, oldest first."""
        ...

    def upgrade_schema_sql(self) -> str:
        """The SQL :meth:`upgrade_schema` would run (empty: nothing to do)."""
        ...

    def downgrade_schema(self, revision: str) -> builtins.list[str]:
        """Reverse the migrations after ``revision``; those reversed, newest first."""
        ...

    def schema_version(self) -> str | None: ...


class SchemaFound(Protocol):
    """What :meth:`MigratableSchema.read_schema` found: the revision the database is
    ``at``, the ``revision`` migrations recorded, the ``legacy`` version a release
    before them recorded, and the ``state`` (empty, current, behind, ahead, unknown)."""

    @property
    def at(self) -> str | None: ...

    @property
    def revision(self) -> str | None: ...

    @property
    def legacy(self) -> int | None: ...

    @property
    def state(self) -> str: ...


@runtime_checkable
class NativeAsync(Protocol):
    """A store with an async form of its own, faster than its calls in worker threads."""

    def native_async(self) -> AsyncSagaStore | None:
        """The native async form, or None where this store has none (then: threads)."""
        ...
