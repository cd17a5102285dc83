"""The portable SQL store: every statement saga runs, for PostgreSQL and SQLite.

Statements are SQLAlchemy Core on the SQLModel tables: names, keys and ids
are always bind parameters. Driver errors are translated at this boundary
into ``StorageUnavailableError`` (retried) or ``StorageError``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from saga import faults
from saga.errors import (
    CorruptRecordError,
    LeaseLostError,
    OperationRefusedError,
    SagaBusyError,
    SagaChangedError,
    StorageError,
    StorageUnavailableError,
    UnknownSagaError,
)
from saga.policy import STORE_RETRY, RetryPolicy
from saga.ports import (
    ClaimGuard,
    Commit,
    Event,
    EventRecord,
    ListQuery,
    Renewal,
    SagaRecord,
    StepRecord,
    StepWrite,
    guard_broken,
)
from saga.status import PIVOT_ACTED, SagaStatus, StepKind, StepStatus

from . import migrate
from . import tables as t
from .dialect import Dialect

T = TypeVar("T")
_ACTIVE = (SagaStatus.RUNNING.value, SagaStatus.COMPENSATING.value)
_CLAIMABLE = (*_ACTIVE, SagaStatus.FAILED.value)  # failed: an operator may act on it
_RENEW_CHUNK = 500  # leases renewed per statement (bounds the bound parameters)


def masked(url: str) -> str:
    """The URL with its password hidden, fit for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL must still never leak
        return "<unparsable database URL>"


class SqlSagaStore:
    """A ``SagaStore`` on a SQL database (PostgreSQL or SQLite)."""

    def __init__(self, url: str, dialect: Dialect, retry: RetryPolicy = STORE_RETRY) -> None:
        self.url = masked(url)
        self.dialect = dialect
        self.retry = retry
        self.engine = dialect.create_engine(url)
        self.hot = dialect.hot_path(url)
        self.session_factory: Callable[..., Session] = Session
        self._schema_ready = False

    def use_session_factory(self, factory: Callable[..., Session]) -> None:
        """Give transactional steps sessions made by ``factory`` (the application's
        ``sessionmaker``), refused with ``ConfigurationError`` unless it can only
        reach this store's database (see :mod:`saga.adapters.sql.binding`)."""
        from .binding import check_session_factory

        check_session_factory(factory, self.engine.url)
        self.session_factory = factory

    # -- plumbing ---------------------------------------------------------------

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except (OperationalError, InterfaceError) as error:
            raise StorageUnavailableError(f"{self.url}: {_first_line(error)}") from error
        except DBAPIError as error:
            if error.connection_invalidated:
                raise StorageUnavailableError(f"{self.url}: {_first_line(error)}") from error
            raise StorageError(f"{self.url}: {_first_line(error)}") from error
        except SQLAlchemyError as error:
            raise StorageError(f"{self.url}: {_first_line(error)}") from error

    def _transaction(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction, retried while the database is unreachable."""
        return self._retried(lambda: self._once(work))

    def _once(self, work: Callable[[Connection], T]) -> T:
        self._ensure_schema()
        with self._translated(), self.engine.begin() as connection:
            return work(connection)

    def _read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one read-only transaction that sees one snapshot throughout."""

        def once() -> T:
            self._ensure_schema()
            with self._translated(), self.engine.connect() as connection:
                if self.dialect.read_isolation is not None:
                    connection.execution_options(isolation_level=self.dialect.read_isolation)
                with connection.begin():
                    return work(connection)

        return self._retried(once)

    def _retried(self, work: Callable[[], T]) -> T:
        """``work()``; while the database is unreachable, tenacity retries it with backoff."""
        try:  # the common case pays nothing for the retry machinery
            return work()
        except StorageUnavailableError:
            pass
        for attempt in self.retry.retrying(attempts_used=1):
            with attempt:
                return work()
        raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover

    def _ensure_schema(self) -> None:
        # Always called under the caller's retry: retrying here too would
        # multiply the time an unreachable database takes to report.
        if not self._schema_ready:
            migrate.check(self)
            self._schema_ready = True

    def create_schema(self) -> None:
        """Create the tables, or migrate them to this release's revision (``saga db
        upgrade``); a database saga does not recognise is refused, unchanged."""
        self._retried(lambda: migrate.upgrade(self))
        self._schema_ready = True

    def schema_version(self) -> str | None:
        """The schema revision the database is at; None while saga's tables do not
        exist (creates nothing)."""

        def read() -> str | None:
            with self._translated(), self.engine.connect() as connection:
                return migrate.read(connection).at

        return self._retried(read)

    def close(self) -> None:
        self.engine.dispose()
        if self.hot is not None:
            self.hot.close()

    def now(self) -> float:
        return self._transaction(
            lambda c: float(c.execute(select(self.dialect.now())).scalar_one())
        )

    # -- writes -------------------------------------------------------------------

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> tuple[SagaRecord, bool]:
        def work(connection: Connection) -> tuple[SagaRecord, bool]:
            now = self.dialect.now()
            inserted = connection.execute(
                self.dialect.insert_ignoring_conflicts(t.instances)
                .values(
                    {
                        **_instance_values(saga),
                        "created_at": now,
                        "updated_at": now,
                        "lease_expires_at": now + lease_ttl,
                        "commit_token": first.token,
                        "deadline": None if saga.deadline is None else now + saga.deadline,
                    }
                )
                .returning(t.instances.c.id)
            ).first()
            if inserted is None:
                return self._clash(connection, saga)
            self._write_body(connection, first)
            return saga, True

        def hot() -> tuple[SagaRecord, bool]:
            self._ensure_schema()
            assert self.hot is not None
            if self.hot.create(saga, first, lease_ttl):
                return saga, True
            return self._once(lambda connection: self._clash(connection, saga))

        return self._retried(hot if self.hot is not None else lambda: self._once(work))

    def _clash(self, connection: Connection, saga: SagaRecord) -> tuple[SagaRecord, bool]:
        """The row ``saga`` clashed with: ours if a lost acknowledgement hid our insert."""
        mine = self._load(connection, saga.id)
        if mine is not None:  # ids are fresh uuid4s: a row with ours is our own write
            return mine, True
        assert saga.key is not None
        existing = self._find(connection, saga.name, saga.key)
        if existing is None:
            raise StorageError(f"saga {saga.name!r} key {saga.key!r} clashed but was not found")
        return existing, False

    def commit(self, change: Commit) -> bool:
        tries = 0

        def apply_or_recognise() -> bool:
            nonlocal tries
            tries += 1
            if tries > 1:  # the last try may have committed before its connection dropped
                landed = self._once(lambda connection: self._landed(connection, change))
                if landed is not None:
                    return landed
            return self._apply(change)

        return self._retried(apply_or_recognise)

    def transact(
        self,
        work: Callable[[Session], T],
        change_for: Callable[[T], Commit],
        lease_ttl: float,
    ) -> tuple[T, bool]:
        """Run ``work(session)`` and apply ``change_for(result)`` in one transaction.

        The session joins the transaction through a savepoint, so a
        ``session.commit()`` inside ``work`` cannot commit early. Serialisation
        failures and deadlocks roll everything back and are retried with backoff,
        running ``work`` again: nothing of the failed try was kept.
        """
        del lease_ttl  # commits leave the lease to the heartbeat
        tries = 0
        outcome: list[tuple[T, Commit]] = []

        def once(connection: Connection) -> tuple[T, bool]:
            nonlocal tries
            tries += 1
            if tries > 1 and outcome:  # a lost acknowledgement may hide our commit
                result, change = outcome[-1]
                landed = self._landed(connection, change)
                if landed is not None:
                    return result, landed
            result = self._work_in(connection, work)
            change = change_for(result)
            outcome.append((result, change))
            stop = self._commit(connection, change)
            # Everything is written, nothing committed: a crash here loses all of it.
            faults.point("before_transact_commit", _step_named(change))
            return result, stop

        try:
            return self._transaction(once)
        except _StepRaised as raised:
            raise raised.error from raised.error.__cause__

    def _work_in(self, connection: Connection, work: Callable[[Session], T]) -> T:
        """The step's own work, its errors kept apart from the store's."""
        session = self.session_factory(bind=connection, join_transaction_mode="create_savepoint")
        try:
            with session:
                result = work(session)
                session.commit()  # releases the savepoint; the transaction stays open
        except Exception as error:
            if _is_conflict(error) or _is_disconnect(error):  # rolled back: safe to run again
                raise StorageUnavailableError(f"{self.url}: {_first_line(error)}") from error
            raise _StepRaised(error) from error
        return result

    def _apply(self, change: Commit) -> bool:
        if self.hot is None:
            return self._once(lambda connection: self._commit(connection, change))
        self._ensure_schema()
        cancel = self.hot.commit(change)
        if cancel is None:
            raise LeaseLostError(change.saga_id, change.epoch)
        return cancel

    def _stop(self) -> Any:
        """True when the saga must stop at its next step: cancel requested or deadline passed."""
        i = t.instances.c
        deadline_passed = and_(i.deadline.is_not(None), i.deadline < self.dialect.now())
        return or_(i.cancel_requested, deadline_passed).label("stop")

    def _landed(self, connection: Connection, change: Commit) -> bool | None:
        """After a lost acknowledgement: did our earlier attempt commit? (cancel flag if so).

        The saga row's token names the saga's latest commit, which may be a sibling
        step's (parallel steps commit on their own); the step rows a commit wrote keep
        its token until that step is written again, which only its own driver does,
        after this call returns. So either one naming ours proves that it landed.
        """
        row = connection.execute(
            select(t.instances.c.commit_token, self._stop()).where(
                t.instances.c.id == change.saga_id
            )
        ).first()
        if row is None:
            return None
        if row.commit_token == change.token or self._wrote_steps(connection, change):
            return bool(row.stop)
        return None

    def _wrote_steps(self, connection: Connection, change: Commit) -> bool:
        if not change.steps:
            return False
        s = t.steps.c
        found = connection.execute(
            select(s.seq)
            .where(s.saga_id == change.saga_id, s.commit_token == change.token)
            .limit(1)
        ).first()
        return found is not None

    def _commit(self, connection: Connection, change: Commit) -> bool:
        now = self.dialect.now()
        values: dict[str, Any] = {"updated_at": now, "commit_token": change.token}
        # The lease is left alone (the heartbeat renews it), as on the hot path.
        if change.release:  # expired at once: an unfinished saga shows as stuck
            values.update(owner=None, lease_expires_at=now)
        if change.status is not None:
            values["status"] = change.status.value
        if change.error is not None:
            values["error"] = change.error
        row = connection.execute(
            update(t.instances)
            .where(t.instances.c.id == change.saga_id, t.instances.c.epoch == change.epoch)
            .values(values)
            .returning(self._stop())
        ).first()
        if row is None:
            raise LeaseLostError(change.saga_id, change.epoch)
        self._write_body(connection, change)
        return bool(row.stop)

    def _write_body(self, connection: Connection, change: Commit) -> None:
        now = self.dialect.now()
        for write in change.steps:
            self._write_step(connection, change, write)
        if change.events:
            connection.execute(
                insert(t.events).values(at=now),
                [_event_values(change.saga_id, change.epoch, e) for e in change.events],
            )

    def _write_step(self, connection: Connection, change: Commit, write: StepWrite) -> None:
        step, saga_id = write.step, change.saga_id
        # The row remembers which commit wrote it: see _landed.
        stamped: dict[str, Any] = {"commit_token": change.token}
        if write.stamp:
            stamped[write.stamp + "_at"] = self.dialect.now()
        if write.new:
            values = {**_step_values(step), "saga_id": saga_id, **stamped}
            connection.execute(insert(t.steps).values(values))
            return
        connection.execute(
            update(t.steps)
            .where(t.steps.c.saga_id == saga_id, t.steps.c.seq == step.seq)
            .values(
                status=step.status.value,
                attempt=step.attempt,
                undo_attempt=step.undo_attempt,
                result=step.result,
                output_digest=step.output_digest,
                error=step.error,
                **stamped,
            )
        )

    def renew_many(self, held: Mapping[str, int], lease_ttl: float) -> Renewal:
        pairs = sorted(held.items())

        def work(connection: Connection) -> Renewal:
            i = t.instances.c
            stop: set[str] = set()
            kept: set[str] = set()
            for start in range(0, len(pairs), _RENEW_CHUNK):
                rows = connection.execute(
                    update(t.instances)
                    .where(tuple_(i.id, i.epoch).in_(pairs[start : start + _RENEW_CHUNK]))
                    .values(lease_expires_at=self.dialect.now() + lease_ttl)
                    .returning(i.id, self._stop())
                ).all()
                kept.update(row.id for row in rows)
                stop.update(row.id for row in rows if row.stop)
            return Renewal(frozenset(stop), frozenset(held) - kept)

        return self._transaction(work)

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
            if tries > 1 and self._claimed_ids(connection, token, saga_id):
                loaded = self._load(connection, saga_id)
                assert loaded is not None
                return loaded
            if guard is not None:
                self._lock_row(connection, saga_id)
            row = connection.execute(
                update(t.instances)
                .where(*self._claimable(saga_id, guard))
                .values(
                    epoch=t.instances.c.epoch + 1,
                    owner=owner,
                    lease_expires_at=self.dialect.now() + lease_ttl,
                    commit_token=token,
                )
                .returning(t.instances.c.epoch)
            ).first()
            if row is None:
                raise self._refusal(connection, saga_id, guard)
            # The history says who took the saga, whatever the caller's event says.
            detail = {"owner": owner, **(event.detail or {})}
            claim = Event(event.kind, event.step, event.attempt, detail)
            self._append(connection, saga_id, row.epoch, claim)
            loaded = self._load(connection, saga_id)
            assert loaded is not None
            return loaded

        return self._transaction(work)

    def _lock_row(self, connection: Connection, saga_id: str) -> None:
        """Lock the saga row until this transaction ends. Every commit of the owner updates
        it first, so from here on no step can change, and a guard's step check (a later
        statement, with a later snapshot) sees every commit made before ours."""
        i = t.instances.c
        connection.execute(select(i.id).where(i.id == saga_id).with_for_update())

    def _claimable(self, saga_id: str, guard: ClaimGuard | None) -> list[ColumnElement[bool]]:
        """The conditions under which the saga may be taken, all checked in the claim."""
        i = t.instances.c
        # A live lease is never taken, not even from this owner: another thread of
        # the same coordinator may be executing the saga right now.
        free = or_(i.owner.is_(None), i.lease_expires_at < self.dialect.now())
        unfinished = i.status.in_(_CLAIMABLE)  # it may have finished since the caller read it
        return [i.id == saga_id, free, unfinished, *self._guarded(saga_id, guard)]

    def _guarded(self, saga_id: str, guard: ClaimGuard | None) -> list[ColumnElement[bool]]:
        """``guard`` as SQL conditions on the saga row (and its pivot steps)."""
        if guard is None:
            return []
        i, s = t.instances.c, t.steps.c
        conditions: list[ColumnElement[bool]] = [
            i.status.in_([status.value for status in guard.statuses])
        ]
        if guard.epoch is not None:
            conditions.append(i.epoch == guard.epoch)
        if guard.before_pivot:
            acted = select(s.seq).where(
                s.saga_id == saga_id,
                s.kind == StepKind.PIVOT.value,
                s.status.in_([status.value for status in PIVOT_ACTED]),
            )
            conditions.append(~acted.exists())
        return conditions

    def _refusal(
        self, connection: Connection, saga_id: str, guard: ClaimGuard | None
    ) -> OperationRefusedError | UnknownSagaError:
        """Why a claim matched no row, read in the claim's own transaction."""
        current = self._load(connection, saga_id)
        if current is None:
            return UnknownSagaError(f"no saga with id {saga_id}")
        if current.status.value not in _CLAIMABLE:
            return OperationRefusedError(
                saga_id, f"saga {saga_id} is already {current.status.value}"
            )
        changed = guard_broken(current, guard)
        if changed is not None:
            return SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {changed}")
        return SagaBusyError(
            saga_id, f"saga {saga_id} is held by {current.owner} whose lease is still live"
        )

    def claim_expired(self, owner: str, lease_ttl: float, limit: int) -> list[str]:
        token = uuid.uuid4().hex  # lets a retry recognise a claim whose acknowledgement was lost
        tries = 0

        def work(connection: Connection) -> list[str]:
            nonlocal tries
            tries += 1
            mine = self._claimed_ids(connection, token) if tries > 1 else []
            if mine:
                return mine
            now = self.dialect.now()
            i = t.instances.c
            stuck = self.dialect.lock_for_claim(
                select(i.id)
                .where(i.status.in_(_ACTIVE), i.lease_expires_at < now)
                .order_by(i.lease_expires_at)
                .limit(limit)
            )
            rows = connection.execute(
                update(t.instances)
                .where(i.id.in_(stuck.scalar_subquery()))
                .values(
                    epoch=i.epoch + 1,
                    owner=owner,
                    lease_expires_at=now + lease_ttl,
                    commit_token=token,
                )
                .returning(i.id, i.epoch)
            ).all()
            for row in rows:
                self._append(connection, row.id, row.epoch, _claimed(owner))
            return [row.id for row in rows]

        return self._transaction(work)

    def _claimed_ids(
        self, connection: Connection, token: str, saga_id: str | None = None
    ) -> list[str]:
        """After a lost acknowledgement: the sagas our earlier try claimed (and still holds)."""
        i = t.instances.c
        query = select(i.id).where(i.commit_token == token)
        if saga_id is not None:
            query = query.where(i.id == saga_id)
        return list(connection.execute(query.order_by(i.lease_expires_at)).scalars())

    def request_cancel(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        def work(connection: Connection) -> None:
            i = t.instances.c
            if guard is not None:
                self._lock_row(connection, saga_id)
            row = connection.execute(
                update(t.instances)
                .where(i.id == saga_id, i.status == SagaStatus.RUNNING.value)
                .where(i.cancel_requested.is_(False), *self._guarded(saga_id, guard))
                .values(cancel_requested=True)
                .returning(i.epoch)
            ).first()
            if row is not None:
                self._append(connection, saga_id, row.epoch, event)
                return
            current = self._load(connection, saga_id)
            if current is None:
                raise UnknownSagaError(f"no saga with id {saga_id}")
            changed = guard_broken(current, guard)
            if current.status is SagaStatus.RUNNING and changed is not None:
                raise SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {changed}")
            # else it finished meanwhile, or the request is already recorded (maybe by
            # our own earlier try, whose acknowledgement was lost): nothing to write

        self._transaction(work)

    def record_event(self, saga_id: str, event: Event) -> None:
        def work(connection: Connection) -> None:
            epoch = connection.execute(
                select(t.instances.c.epoch).where(t.instances.c.id == saga_id)
            ).scalar()
            self._append(connection, saga_id, epoch, event)

        self._transaction(work)

    def record_fenced_event(self, saga_id: str, epoch: int, event: Event) -> bool:
        def work(connection: Connection) -> bool:
            i = t.instances.c
            # FOR UPDATE (SQLite: the IMMEDIATE transaction): a claim (epoch + 1) waits for
            # this transaction or has already made the row not match, never in between.
            held = connection.execute(
                select(i.epoch).where(i.id == saga_id, i.epoch == epoch).with_for_update()
            ).first()
            if held is None:
                return False
            self._append(connection, saga_id, epoch, event)
            return True

        return self._transaction(work)

    def _append(self, connection: Connection, saga_id: str, epoch: int | None, e: Event) -> None:
        connection.execute(
            insert(t.events).values({**_event_values(saga_id, epoch, e), "at": self.dialect.now()})
        )

    def delete(self, saga_ids: Sequence[str]) -> int:
        """Delete these sagas with their steps and events; return how many went."""

        def work(connection: Connection) -> int:
            for table in (t.events, t.steps):
                connection.execute(delete(table).where(table.c.saga_id.in_(saga_ids)))
            result = connection.execute(delete(t.instances).where(t.instances.c.id.in_(saga_ids)))
            return int(result.rowcount)

        return self._transaction(work)

    # -- reads ------------------------------------------------------------------------

    def load(self, saga_id: str) -> SagaRecord | None:
        return self._read(lambda c: self._load(c, saga_id))

    def find(self, name: str, key: str) -> SagaRecord | None:
        return self._read(lambda c: self._find(c, name, key))

    def _load(self, connection: Connection, saga_id: str) -> SagaRecord | None:
        row = connection.execute(select(t.instances).where(t.instances.c.id == saga_id)).first()
        return None if row is None else self._with_steps(connection, [row])[0]

    def _find(self, connection: Connection, name: str, key: str) -> SagaRecord | None:
        i = t.instances.c
        row = connection.execute(select(t.instances).where(i.name == name, i.key == key)).first()
        return None if row is None else self._with_steps(connection, [row])[0]

    def list(self, query: ListQuery) -> list[SagaRecord]:
        def work(connection: Connection) -> list[SagaRecord]:
            rows = connection.execute(self._list_statement(query)).all()
            return self._with_steps(connection, rows)

        return self._read(work)

    def _list_statement(self, query: ListQuery) -> Any:
        i = t.instances.c
        now = self.dialect.now()
        conditions: builtins.list[ColumnElement[bool]] = []
        if query.status:
            conditions.append(i.status.in_([s.value for s in query.status]))
        if query.name is not None:
            conditions.append(i.name == query.name)
        if query.key is not None:
            conditions.append(i.key == query.key)
        if query.stuck:
            conditions.append(and_(i.status.in_(_ACTIVE), i.lease_expires_at < now))
        if query.older_than is not None:
            conditions.append(i.created_at < now - query.older_than)
        if query.before is not None:
            anchor = select(i.created_at).where(i.id == query.before).scalar_subquery()
            conditions.append(
                or_(i.created_at < anchor, and_(i.created_at == anchor, i.id < query.before))
            )
        return (
            select(t.instances)
            .where(*conditions)
            .order_by(i.created_at.desc(), i.id.desc())
            .limit(query.limit)
        )

    def status_counts(self) -> dict[SagaStatus, int]:
        # GROUP BY the leading column of ix_saga_instances_status_created: an index scan.
        def work(connection: Connection) -> dict[SagaStatus, int]:
            i = t.instances.c
            statement = select(i.status, func.count()).group_by(i.status)
            return {SagaStatus(status): int(n) for status, n in connection.execute(statement)}

        return self._read(work)

    def events(self, saga_id: str) -> builtins.list[EventRecord]:
        def work(connection: Connection) -> builtins.list[EventRecord]:
            e = t.events.c
            rows = connection.execute(
                select(t.events).where(e.saga_id == saga_id).order_by(e.id)
            ).all()
            return [_event_record(row) for row in rows]

        return self._transaction(work)

    def _with_steps(
        self, connection: Connection, rows: Sequence[Row[Any]]
    ) -> builtins.list[SagaRecord]:
        ids = [row.id for row in rows]
        by_saga: dict[str, builtins.list[StepRecord]] = {saga_id: [] for saga_id in ids}
        if ids:
            s = t.steps.c
            step_rows = connection.execute(
                select(t.steps).where(s.saga_id.in_(ids)).order_by(s.saga_id, s.seq)
            ).all()
            for step_row in step_rows:
                by_saga[step_row.saga_id].append(_step_record(step_row))
        return [_saga_record(row, tuple(by_saga[row.id])) for row in rows]


# -- row <-> record ----------------------------------------------------------------


class _StepRaised(Exception):  # noqa: N818 - internal carrier, never escapes the store
    """A step's own error, carried through the store's error translation untouched."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


_CONFLICT_SQLSTATES = ("40001", "40P01")  # serialization failure, deadlock detected


def _is_conflict(error: BaseException) -> bool:
    """A transaction the database aborted because of concurrent ones (retry it)."""
    original = getattr(error, "orig", error)
    if getattr(original, "sqlstate", None) in _CONFLICT_SQLSTATES:
        return True
    return "database is locked" in str(original)


def _step_named(change: Commit) -> str | None:
    return change.steps[0].step.name if change.steps else None


def _is_disconnect(error: BaseException) -> bool:
    """The connection dropped under the step's session: its transaction is gone with it."""
    return isinstance(error, DBAPIError) and error.connection_invalidated


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _claimed(owner: str) -> Event:
    return Event("lease_claimed", detail={"owner": owner})


def _instance_values(saga: SagaRecord) -> dict[str, Any]:
    return {
        "id": saga.id,
        "name": saga.name,
        "key": saga.key,
        "kind": saga.kind,
        "status": saga.status.value,
        "input": saga.input,
        "version": saga.version,
        "fingerprint": saga.fingerprint,
        "owner": saga.owner,
        "epoch": saga.epoch,
        "deadline": saga.deadline,
        "cancel_requested": False,
    }


def _step_values(step: StepRecord) -> dict[str, Any]:
    return {
        "seq": step.seq,
        "name": step.name,
        "status": step.status.value,
        "attempt": step.attempt,
        "kind": step.kind.value,
        "transactional": step.transactional,
        "action_ref": step.action_ref,
        "compensation_ref": step.compensation_ref,
        "args": step.args,
        "input_digest": step.input_digest,
        "result": step.result,
        "output_digest": step.output_digest,
        "error": step.error,
        "undo_attempt": step.undo_attempt,
    }


def _event_values(saga_id: str, epoch: int | None, event: Event) -> dict[str, Any]:
    detail = None if event.detail is None else json.dumps(event.detail, sort_keys=True)
    return {
        "saga_id": saga_id,
        "kind": event.kind,
        "step": event.step,
        "attempt": event.attempt,
        "epoch": epoch,
        "detail": detail,
    }


def _saga_record(row: Row[Any], step_records: tuple[StepRecord, ...]) -> SagaRecord:
    try:
        status = SagaStatus(row.status)
    except ValueError:
        raise CorruptRecordError(row.id, f"unknown status {row.status!r}") from None
    if row.kind not in ("declarative", "imperative"):
        raise CorruptRecordError(row.id, f"unknown kind {row.kind!r}")
    version, fingerprint = row.version, row.fingerprint
    if fingerprint is None and version is not None:
        # Written before versions (schema 0003, or by an older release since): the
        # version column held the fingerprint, and every definition was version 1.
        version, fingerprint = "1", version
    return SagaRecord(
        id=row.id,
        name=row.name,
        key=row.key,
        kind=row.kind,
        status=status,
        input=row.input,
        version=version,
        fingerprint=fingerprint,
        owner=row.owner,
        epoch=row.epoch,
        lease_expires_at=row.lease_expires_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        error=row.error,
        deadline=row.deadline,
        cancel_requested=bool(row.cancel_requested),
        steps=step_records,
    )


def _step_record(row: Row[Any]) -> StepRecord:
    try:
        status, kind = StepStatus(row.status), StepKind(row.kind)
    except ValueError:
        raise CorruptRecordError(
            row.saga_id, f"step {row.name!r} has status {row.status!r} / kind {row.kind!r}"
        ) from None
    return StepRecord(
        name=row.name,
        seq=row.seq,
        status=status,
        attempt=row.attempt,
        kind=kind,
        transactional=bool(row.transactional),
        action_ref=row.action_ref,
        compensation_ref=row.compensation_ref,
        args=row.args,
        input_digest=row.input_digest,
        result=row.result,
        output_digest=row.output_digest,
        error=row.error,
        undo_attempt=row.undo_attempt,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def _event_record(row: Row[Any]) -> EventRecord:
    try:
        detail = None if row.detail is None else json.loads(row.detail)
    except ValueError:
        detail = {"unreadable": row.detail}
    return EventRecord(
        id=row.id,
        saga_id=row.saga_id,
        at=row.at,
        kind=row.kind,
        step=row.step,
        attempt=row.attempt,
        epoch=row.epoch,
        detail=detail,
    )
