"""SQLite's hot path: creations and commits as constant SQL on raw ``sqlite3`` connections.

The portable path builds and compiles a SQLAlchemy statement for each of a
saga's writes, which costs several times the commit's own fsync. Here every
statement is a constant text (``sqlite3`` keeps each connection's prepared
statements cached by text), values are always bind parameters, and a
creation or commit is one ``BEGIN IMMEDIATE ... COMMIT`` on a connection of a
small pool of our own, configured as the engine's (WAL, ``synchronous=FULL``,
busy timeout). The semantics are the portable store's, statement for statement:
the fenced update of the saga row comes first, and when it matches nothing the
transaction is rolled back with nothing written.

The database clock is ``(julianday('now') - 2440587.5) * 86400.0``, written
out in each statement (SQLite fixes 'now' for the length of one statement). The
statements are built once, at import, from the columns :mod:`.rows` names.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import URL, make_url

from saga._internal.errors import StorageError, StorageUnavailableError
from saga._internal.ports import CREATION_TICK, Commit, SagaRecord, StepWrite

from .messages import first_line, masked
from .rows import (
    EVENT_COLUMNS,
    INSTANCE_COLUMNS,
    STEP_COLUMNS,
    STEP_UPDATE_COLUMNS,
    event_values,
    fence_values,
    instance_values,
    step_values,
)

T = TypeVar("T")

_NOW = "(julianday('now') - 2440587.5) * 86400.0"

_CREATED = (
    f"max({_NOW}, coalesce((SELECT max(created_at) FROM saga_instances), 0) + {CREATION_TICK!r})"
)
"""A new saga's ``created_at``. The clock ticks in milliseconds: sagas made within one
would tie, and list (newest first) in the order of their random ids. SQLite writes one
transaction at a time, so the newest ``created_at`` read here is the newest there is;
an index gives it (``ix_saga_instances_created``)."""


def _names(columns: tuple[str, ...]) -> str:
    return ", ".join(columns)


def _binds(columns: tuple[str, ...]) -> str:
    return ", ".join(f":{name}" for name in columns)


_CREATE = (
    f"INSERT INTO saga_instances ({_names(INSTANCE_COLUMNS)}, "
    "deadline, created_at, updated_at, lease_expires_at, commit_token) "
    f"VALUES ({_binds(INSTANCE_COLUMNS)}, "
    f"{_NOW} + :deadline, {_CREATED}, {_NOW}, {_NOW} + :ttl, :token) "
    "ON CONFLICT DO NOTHING"
)

# Released (terminal): no owner, the lease expired at once. Otherwise the lease is
# left alone: the heartbeat renews it.
_FENCE = (
    f"UPDATE saga_instances SET updated_at = {_NOW}, commit_token = :token, "
    f"lease_expires_at = CASE WHEN :release THEN {_NOW} + :release_for ELSE lease_expires_at END, "
    "owner = CASE WHEN :release THEN NULL ELSE owner END, "
    "status = COALESCE(:status, status), error = COALESCE(:error, error) "
    "WHERE id = :id AND epoch = :epoch "
    "RETURNING cancel_requested OR status = 'paused' "
    f"OR (deadline IS NOT NULL AND deadline < {_NOW})"
)

_STEP_INSERT = (
    f"INSERT INTO saga_steps (saga_id, {_names(STEP_COLUMNS)}, "
    "commit_token, started_at, finished_at) "
    f"VALUES (:saga_id, {_binds(STEP_COLUMNS)}, :token, "
    f"CASE WHEN :started THEN {_NOW} END, CASE WHEN :finished THEN {_NOW} END)"
)

_STEP_UPDATE = (
    "UPDATE saga_steps SET "
    + "".join(f"{name} = :{name}, " for name in STEP_UPDATE_COLUMNS)
    + "commit_token = :token, "
    f"started_at = CASE WHEN :started THEN {_NOW} ELSE started_at END, "
    f"finished_at = CASE WHEN :finished THEN {_NOW} ELSE finished_at END "
    "WHERE saga_id = :saga_id AND seq = :seq"
)

_EVENT_INSERT = (
    f"INSERT INTO saga_events ({_names(EVENT_COLUMNS)}, at) "
    f"VALUES ({_binds(EVENT_COLUMNS)}, {_NOW})"
)

_MAX_IDLE = 16
"""Idle connections kept; more are closed when returned (concurrency beyond this is rare)."""


class SqliteHotPath:
    """Saga creation and commits in one IMMEDIATE transaction each, on raw connections."""

    def __init__(
        self, url: str, configure: Callable[[sqlite3.Connection], None], busy_timeout: float
    ) -> None:
        """``configure`` sets a new connection up as the engine's are; ``busy_timeout``
        is how long, in seconds, a write waits for the lock before failing."""
        self.url = masked(url)
        filename, options = _connect_args(make_url(url), busy_timeout)
        self._filename, self._options = filename, options
        self._configure = configure
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> bool:
        """Insert the saga with its first commit; False when its id or (name, key) clashed."""

        def work(connection: sqlite3.Connection) -> bool:
            params = {
                **instance_values(saga),
                "deadline": saga.deadline,
                "ttl": lease_ttl,
                "token": first.token,
            }
            if connection.execute(_CREATE, params).rowcount != 1:
                return False
            _write_body(connection, first)
            return True

        return self._transaction(work, keep=bool)

    def commit(self, change: Commit) -> bool | None:
        """Apply ``change``; whether the saga must stop (cancel requested or deadline
        passed), or None when the fence matched nothing (and nothing was written)."""

        def work(connection: sqlite3.Connection) -> bool | None:
            rows = connection.execute(_FENCE, fence_values(change)).fetchall()
            if not rows:
                return None
            _write_body(connection, change)
            return bool(rows[0][0])

        return self._transaction(work, keep=lambda stop: stop is not None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    # -- transactions and connections -------------------------------------------------

    def _transaction(self, work: Callable[[sqlite3.Connection], T], keep: Callable[[T], bool]) -> T:
        """``work`` in one IMMEDIATE transaction, committed if ``keep(its result)``,
        else rolled back. Driver errors become saga's, as on the portable path."""
        connection = self._checkout()
        try:
            connection.execute("BEGIN IMMEDIATE")
            result = work(connection)
            connection.execute("COMMIT" if keep(result) else "ROLLBACK")
        except sqlite3.Error as error:
            self._recover(connection)
            raise self._translated(error) from error
        except BaseException:
            self._recover(connection)
            raise
        self._checkin(connection)
        return result

    def _translated(self, error: sqlite3.Error) -> StorageError:
        message = f"{self.url}: {first_line(error)}"
        if isinstance(error, sqlite3.OperationalError | sqlite3.InterfaceError):
            return StorageUnavailableError(message)  # locked, busy, I/O: retried
        if _is_closed(error):
            return StorageUnavailableError(message)
        return StorageError(message)

    def _checkout(self) -> sqlite3.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            connection: sqlite3.Connection = sqlite3.connect(self._filename, **self._options)
        except sqlite3.Error as error:
            raise self._translated(error) from error
        try:
            self._configure(connection)
        except sqlite3.Error as error:  # e.g. locked while switching to WAL: retried
            connection.close()
            raise self._translated(error) from error
        return connection

    def _checkin(self, connection: sqlite3.Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(connection)
                return
        connection.close()

    def _recover(self, connection: sqlite3.Connection) -> None:
        """Return a connection that failed mid-transaction rolled back, or discard it."""
        try:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        except sqlite3.Error:
            connection.close()
            return
        self._checkin(connection)


def _write_body(connection: sqlite3.Connection, change: Commit) -> None:
    """The commit's steps, in order, then its events (the fence already matched)."""
    for write in change.steps:
        _write_step(connection, change, write)
    if change.events:
        connection.executemany(
            _EVENT_INSERT, [event_values(change.saga_id, change.epoch, e) for e in change.events]
        )


def _write_step(connection: sqlite3.Connection, change: Commit, write: StepWrite) -> None:
    params = {
        **step_values(write.step),
        "saga_id": change.saga_id,
        "token": change.token,  # the step row remembers which commit wrote it
        "started": write.stamp == "started",
        "finished": write.stamp == "finished",
    }
    connection.execute(_STEP_INSERT if write.new else _STEP_UPDATE, params)


def _connect_args(url: URL, busy_timeout: float) -> tuple[str, dict[str, Any]]:
    """``sqlite3.connect`` arguments for ``url``, as SQLAlchemy reads them (``uri`` etc.),
    with the engine's settings: the busy timeout, any thread, no implicit BEGIN."""
    dialect = url.get_dialect()()
    args, options = dialect.create_connect_args(url)
    options.update(timeout=busy_timeout, check_same_thread=False, isolation_level=None)
    return str(args[0]), dict(options)


def is_file_database(url: str) -> bool:
    """Whether ``url`` names a database file: an in-memory database is private to one
    connection, so only the engine's single connection may write it."""
    parsed = make_url(url)
    database = parsed.database
    return bool(database) and database != ":memory:" and parsed.query.get("mode") != "memory"


def _is_closed(error: sqlite3.Error) -> bool:
    # What SQLAlchemy's pysqlite dialect counts as a disconnect (so: retried).
    return isinstance(error, sqlite3.ProgrammingError) and "closed database" in str(error)
