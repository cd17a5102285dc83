"""The portable SQL store: the ``SagaStore`` on PostgreSQL and SQLite.

Statements are SQLAlchemy Core on the SQLModel tables (:mod:`.tables`): names,
keys and ids are always bind parameters. The statements are grouped by what
they do (:mod:`.reads`, :mod:`.writes`, :mod:`.claims`); here each port method
picks its transaction (:mod:`.transactions`) and, for writes whose
acknowledgement a dropped connection can lose, how a retry recognises its own
earlier write (the commit token) instead of writing twice.
"""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from saga._internal import faults
from saga._internal.errors import LeaseLostError, SagaBusyError
from saga._internal.ports import (
    AsyncSagaStore,
    ClaimGuard,
    Commit,
    Event,
    EventRecord,
    ListQuery,
    Renewal,
    Runnable,
    SagaRecord,
)
from saga._internal.status import SagaStatus

from . import claims, liveness, reads, writes
from .dialect import LoadsInOneStatement
from .messages import masked
from .transactions import SqlTransactions

__all__ = ["SqlSagaStore", "masked"]

T = TypeVar("T")


class SqlSagaStore(SqlTransactions):
    """A ``SagaStore`` on a SQL database (PostgreSQL or SQLite)."""

    def native_async(self) -> AsyncSagaStore | None:
        """The dialect's native async form of this store, if it has one."""
        return None if self.hot is None else self.dialect.native_async(self)

    # -- writes -----------------------------------------------------------------------

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> tuple[SagaRecord, bool]:
        def portable(connection: Connection) -> tuple[SagaRecord, bool]:
            if writes.insert_saga(connection, self.dialect, saga, first, lease_ttl):
                return saga, True
            return writes.clash(connection, saga)

        def hot() -> tuple[SagaRecord, bool]:
            self.ensure_schema()
            assert self.hot is not None
            if self.hot.create(saga, first, lease_ttl):
                return saga, True
            reader = self.one_statement_reads()
            if reader is not None:  # a keyed re-run: one statement
                return reader.clash(saga)
            return self.once(lambda connection: writes.clash(connection, saga))

        def answered() -> tuple[SagaRecord, bool]:
            made = hot() if self.hot is not None else self.once(portable)
            faults.answer_to_commit()
            return made

        return self.retried(answered)

    def commit(self, change: Commit) -> bool:
        tries = 0

        def apply_or_recognise() -> bool:
            nonlocal tries
            tries += 1
            if tries > 1:  # the last try may have committed before its connection dropped
                landed = self.once(lambda c: writes.landed(c, self.dialect, change))
                if landed is not None:
                    return landed
            stop = self._apply(change)
            faults.answer_to_commit()
            return stop

        return self.retried(apply_or_recognise)

    def _apply(self, change: Commit) -> bool:
        if self.hot is None:
            return self.once(lambda c: writes.apply(c, self.dialect, change))
        self.ensure_schema()
        cancel = self.hot.commit(change)
        if cancel is None:
            raise LeaseLostError(change.saga_id, change.epoch)
        return cancel

    def transact(
        self,
        work: Callable[[Session], T],
        change_for: Callable[[T], Commit],
    ) -> tuple[T, bool]:
        """Run ``work(session)`` and apply ``change_for(result)`` in one transaction.

        The session joins the transaction through a savepoint, so a
        ``session.commit()`` inside ``work`` cannot commit early. Serialisation
        failures and deadlocks roll everything back and are retried with backoff,
        running ``work`` again: nothing of the failed try was kept.
        """
        outcome: list[tuple[T, Commit]] = []

        def once(connection: Connection) -> tuple[T, bool]:
            if outcome:  # a retry: a lost acknowledgement may hide our commit
                result, change = outcome[-1]
                landed = writes.landed(connection, self.dialect, change)
                if landed is not None:
                    return result, landed
            result = writes.work_in(connection, self.session_factory, work, self.url)
            change = change_for(result)
            outcome.append((result, change))
            stop = writes.apply(connection, self.dialect, change)
            # Everything is written, nothing committed: a crash here loses all of it.
            faults.point("before_transact_commit", writes.step_named(change))
            return result, stop

        try:
            return self.transaction(once)
        except writes.StepRaised as raised:
            raise raised.error from raised.error.__cause__

    # -- leases and operators ------------------------------------------------------------

    def renew_many(self, held: Mapping[str, int], lease_ttl: float) -> Renewal:
        pairs = sorted(held.items())
        return self.transaction(lambda c: claims.renew(c, self.dialect, pairs, lease_ttl))

    def claim(
        self,
        saga_id: str,
        owner: str,
        lease_ttl: float,
        event: Event,
        guard: ClaimGuard | None = None,
    ) -> SagaRecord:
        token = uuid.uuid4().hex  # lets a retry recognise a claim whose acknowledgement was lost
        tries = 0

        def work(connection: Connection) -> SagaRecord:
            nonlocal tries
            tries += 1
            if tries > 1 and claims.claimed_ids(connection, token, saga_id):
                loaded = reads.load(connection, saga_id)
                assert loaded is not None
                return loaded
            return claims.claim(
                connection, self.dialect, saga_id, owner, lease_ttl, event, guard, token
            )

        try:
            return self.transaction(work)
        except SagaBusyError:
            # Its owner's session may have gone (a killed process): suspect it, wait out
            # the grace once, and try again, rather than refuse a caller for a whole lease.
            left = self.transaction(lambda c: liveness.suspected(c, self.dialect, saga_id))
            if left is None:
                raise
            time.sleep(left)
            return self.transaction(work)

    def claim_expired(
        self, owner: str, lease_ttl: float, limit: int, runnable: Runnable | None = None
    ) -> list[str]:
        token = uuid.uuid4().hex  # lets a retry recognise a claim whose acknowledgement was lost
        tries = 0

        def work(connection: Connection) -> list[str]:
            nonlocal tries
            tries += 1
            mine = claims.claimed_ids(connection, token) if tries > 1 else []
            if mine:
                return mine
            return claims.claim_expired(
                connection, self.dialect, owner, lease_ttl, limit, token, runnable
            )

        return self.transaction(work)

    def register_owner(self, owner: str) -> None:
        """Record ``owner`` as alive (see :mod:`.liveness`); errors are StorageErrors."""
        self.ensure_schema()
        with self.translated():
            self.liveness.register(owner)

    def owner_registered(self, owner: str) -> bool:
        return self.liveness.registered(owner)

    def keep_owners(self) -> None:
        with self.translated():
            self.liveness.keep()

    def release_owner(self, owner: str) -> None:
        self.liveness.release(owner)

    def request_cancel(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        self.transaction(lambda c: claims.request_cancel(c, self.dialect, saga_id, event, guard))

    def request_pause(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        self.transaction(lambda c: claims.request_pause(c, self.dialect, saga_id, event, guard))

    def record_event(self, saga_id: str, event: Event) -> None:
        self.transaction(lambda c: claims.record_event(c, self.dialect, saga_id, event))

    def record_fenced_event(self, saga_id: str, epoch: int, event: Event) -> bool:
        return self.transaction(
            lambda c: claims.record_fenced_event(c, self.dialect, saga_id, epoch, event)
        )

    def delete(self, saga_ids: Sequence[str]) -> int:
        """Delete these sagas with their steps and events; return how many went."""
        return self.transaction(lambda c: claims.delete_sagas(c, saga_ids))

    # -- reads --------------------------------------------------------------------------

    def one_statement_reads(self) -> LoadsInOneStatement | None:
        """The hot path, if it reads a saga in one statement (PostgreSQL's does, SQLite's
        not: there the portable read is a transaction of two SELECTs)."""
        hot: object = self.hot
        return hot if isinstance(hot, LoadsInOneStatement) else None

    def load(self, saga_id: str) -> SagaRecord | None:
        reader = self.one_statement_reads()
        if reader is None:
            return self.read(lambda c: reads.load(c, saga_id))
        return self.retried(self.schema_first(lambda: reader.load(saga_id)))

    def find(self, name: str, key: str) -> SagaRecord | None:
        reader = self.one_statement_reads()
        if reader is None:
            return self.read(lambda c: reads.find(c, name, key))
        return self.retried(self.schema_first(lambda: reader.find(name, key)))

    def schema_first(self, read: Callable[[], T]) -> Callable[[], T]:
        """``read``, once the schema is known to be there (as every portable read)."""

        def once() -> T:
            self.ensure_schema()
            return read()

        return once

    def list(self, query: ListQuery) -> builtins.list[SagaRecord]:
        return self.read(lambda c: reads.listed(c, self.dialect, query))

    def status_counts(
        self, cap: int | None = None, statuses: Collection[SagaStatus] | None = None
    ) -> dict[SagaStatus, int]:
        return self.read(lambda connection: reads.status_counts(connection, cap, statuses))

    def stuck_count(self) -> int:
        return self.read(lambda c: reads.stuck_count(c, self.dialect))

    def events(self, saga_id: str) -> builtins.list[EventRecord]:
        return self.transaction(lambda c: reads.events(c, saga_id))
