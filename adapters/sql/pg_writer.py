"""PostgreSQL's hot path: each saga commit as one statement, in one round trip.

A commit (fence the saga row, write its steps, append its events) is a single
``WITH ... UPDATE ... INSERT ...`` statement sent in autocommit mode, so it is
one implicit transaction and one network round trip: no BEGIN, no COMMIT, no
SELECT. Every sub-statement is guarded by ``EXISTS (SELECT 1 FROM fence)``:
when the epoch moved on, the fence matches no row and nothing is written.

The SQL text depends only on which parts a commit has (step updates, step
inserts, events), never on how many rows or on data: rows travel as one array
parameter per column and are spread by ``unnest``. So there are a handful of
statement texts, which psycopg prepares once each, and a 64-step batch costs
the client no more parsing than a single step.
"""

from __future__ import annotations

import functools
import json
import typing
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from saga.errors import StorageError, StorageUnavailableError
from saga.ports import Commit, SagaRecord, StepRecord, StepWrite

from .messages import first_line

_NOW = "extract(epoch from clock_timestamp())::float8"
_FENCED = "EXISTS (SELECT 1 FROM fence)"

_STEP_COLUMNS = (
    "seq int, name text, status text, attempt int, kind text, transactional bool, "
    "action_ref text, compensation_ref text, args text, input_digest text, result text, "
    "output_digest text, error text, undo_attempt int"
)
_UPDATE_COLUMNS = (
    "seq int, status text, attempt int, undo_attempt int, result text, output_digest text, "
    "error text, start bool, finish bool"
)
_EVENT_COLUMNS = "kind text, step text, attempt int, detail text"


def _unnest(prefix: str, columns: str) -> str:
    """``unnest(%(p_a)s::int[], ...) AS v(a, ...)``: one array parameter per column, so
    the SQL text is the same whatever the number of rows."""
    arrays, names = [], []
    for part in columns.split(", "):
        name, kind = part.split()
        arrays.append(f"%({prefix}_{name})s::{kind}[]")
        names.append(name)
    return f"unnest({', '.join(arrays)}) AS v({', '.join(names)})"


_EVENT_ROW_COLUMNS = "kind text, step text, attempt int, epoch int, detail text"


def _column_names(columns: str) -> str:
    """``"a int, b text"`` -> ``"a, b"``."""
    return ", ".join(part.split()[0] for part in columns.split(", "))


def _row(prefix: str, columns: str) -> str:
    """A VALUES row of typed placeholders, ``%(prefix_column)s::type``."""
    cells = []
    for part in columns.split(", "):
        name, kind = part.split()
        cells.append(f"%({prefix}_{name})s::{kind}")
    return "(" + ", ".join(cells) + ")"


def _step_update_row(i: int) -> str:
    p = f"u{i}"
    return (
        f"u{i} AS (UPDATE saga_steps SET status = %({p}_status)s, attempt = %({p}_attempt)s::int, "
        f"undo_attempt = %({p}_undo_attempt)s::int, result = %({p}_result)s::text, "
        f"output_digest = %({p}_output_digest)s::text, error = %({p}_error)s::text, "
        "commit_token = %(token)s, "
        f"started_at = CASE WHEN %({p}_start)s::bool THEN {_NOW} ELSE started_at END, "
        f"finished_at = CASE WHEN %({p}_finish)s::bool THEN {_NOW} ELSE finished_at END "
        f"WHERE saga_id = %(id)s AND seq = %({p}_seq)s::int AND {_FENCED})"
    )


def _step_insert_rows(count: int) -> str:
    rows = ", ".join(_row(f"i{i}", _STEP_COLUMNS) for i in range(count))
    names = _column_names(_STEP_COLUMNS)
    return (
        f"ins AS (INSERT INTO saga_steps (saga_id, commit_token, {names}, started_at) "
        f"SELECT %(id)s, %(token)s, v.*, {_NOW} "
        f"FROM (VALUES {rows}) AS v({names}) WHERE {_FENCED})"
    )


def _event_insert_rows(count: int) -> str:
    rows = ", ".join(_row(f"e{i}", _EVENT_ROW_COLUMNS) for i in range(count))
    names = _column_names(_EVENT_ROW_COLUMNS)
    return (
        f"ev AS (INSERT INTO saga_events (saga_id, at, {names}) SELECT %(id)s, {_NOW}, v.* "
        f"FROM (VALUES {rows}) AS v({names}) WHERE {_FENCED})"
    )


_STEP_UPDATES = (
    "upd AS (UPDATE saga_steps s SET status = v.status, attempt = v.attempt, "
    "undo_attempt = v.undo_attempt, result = v.result, output_digest = v.output_digest, "
    f"error = v.error, commit_token = %(token)s, "
    f"started_at = CASE WHEN v.start THEN {_NOW} ELSE s.started_at END, "
    f"finished_at = CASE WHEN v.finish THEN {_NOW} ELSE s.finished_at END "
    f"FROM {_unnest('u', _UPDATE_COLUMNS)} "
    # seq = ANY(...) lets the primary key fetch just these rows; joined on v.seq alone,
    # the planner read every step of the saga each time (quadratic for a large saga).
    "WHERE s.saga_id = %(id)s AND s.seq = ANY(%(u_seq)s::int[]) AND s.seq = v.seq "
    f"AND {_FENCED})"
)
_STEP_INSERTS = (
    "ins AS (INSERT INTO saga_steps "
    f"(saga_id, commit_token, {_column_names(_STEP_COLUMNS)}, started_at) "
    f"SELECT %(id)s, %(token)s, v.*, {_NOW} FROM {_unnest('i', _STEP_COLUMNS)} WHERE {_FENCED})"
)
_EVENT_INSERTS = (
    f"ev AS (INSERT INTO saga_events (saga_id, at, epoch, {_column_names(_EVENT_COLUMNS)}) "
    f"SELECT %(id)s, {_NOW}, %(epoch)s::int, v.* FROM {_unnest('e', _EVENT_COLUMNS)} "
    f"WHERE {_FENCED})"
)

_FENCE = (
    f"fence AS (UPDATE saga_instances SET updated_at = {_NOW}, commit_token = %(token)s, "
    "lease_expires_at = CASE WHEN %(release)s::bool "
    f"THEN {_NOW} + %(release_for)s::float8 ELSE lease_expires_at END, "
    "owner = CASE WHEN %(release)s::bool THEN NULL ELSE owner END, "
    "status = COALESCE(%(status)s::text, status), error = COALESCE(%(error)s::text, error) "
    "WHERE id = %(id)s AND epoch = %(epoch)s::int "
    f"RETURNING cancel_requested OR COALESCE(deadline < {_NOW}, false) AS stop)"
)

_CREATE = (
    "fence AS (INSERT INTO saga_instances (id, name, key, kind, status, input, version, "
    "fingerprint, trace_context, owner, epoch, deadline, cancel_requested, created_at, "
    "updated_at, lease_expires_at, commit_token) "
    "VALUES (%(id)s, %(name)s, %(key)s, %(kind)s, %(status)s, %(input)s, %(version)s, "
    "%(fingerprint)s, %(trace_context)s, "
    f"%(owner)s, %(epoch)s::int, {_NOW} + %(deadline)s::float8, false, {_NOW}, {_NOW}, "
    f"{_NOW} + %(ttl)s::float8, %(token)s) ON CONFLICT DO NOTHING RETURNING false AS stop)"
)


SMALL = 4
"""Up to this many rows a part is written as VALUES rows (cheapest for a saga's
usual commits); above it, as arrays spread by unnest (one text for any size)."""


@functools.lru_cache(maxsize=128)
def statement(head: str, updates: int, inserts: int, events: int) -> str:
    """The SQL for a commit of this shape (``head`` is the fence: update or create);
    a count above SMALL is written as 'many' and uses the array form."""
    parts = [head]
    if updates > SMALL:
        parts.append(_STEP_UPDATES)
    else:
        parts += [_step_update_row(i) for i in range(updates)]
    if inserts:
        parts.append(_STEP_INSERTS if inserts > SMALL else _step_insert_rows(inserts))
    if events:
        parts.append(_EVENT_INSERTS if events > SMALL else _event_insert_rows(events))
    return "WITH " + ", ".join(parts) + " SELECT stop FROM fence"


def commit_sql(change: Commit) -> tuple[str, dict[str, Any]]:
    """The statement and parameters applying ``change``.

    A commit leaves the lease alone (the heartbeat renews it): ``lease_expires_at``
    is indexed, and leaving it unchanged lets PostgreSQL update the row in place
    (a HOT update) instead of adding an entry to every index.
    """
    params: dict[str, Any] = {
        "id": change.saga_id,
        "epoch": change.epoch,
        "token": change.token,
        "release": change.release,
        "release_for": change.release_for,
        "status": None if change.status is None else change.status.value,
        "error": change.error,
    }
    return _with_body(_FENCE, change, params), params


def create_sql(saga: SagaRecord, first: Commit, lease_ttl: float) -> tuple[str, dict[str, Any]]:
    """The statement and parameters inserting ``saga`` with its first commit."""
    params: dict[str, Any] = {
        "id": saga.id,
        "name": saga.name,
        "key": saga.key,
        "kind": saga.kind,
        "status": saga.status.value,
        "input": saga.input,
        "version": saga.version,
        "fingerprint": saga.fingerprint,
        "trace_context": saga.trace_context,
        "owner": saga.owner,
        "epoch": saga.epoch,
        "deadline": saga.deadline,
        "ttl": lease_ttl,
        "token": first.token,
    }
    return _with_body(_CREATE, first, params), params


def _with_body(head: str, change: Commit, params: dict[str, Any]) -> str:
    updates = [w for w in change.steps if not w.new]
    inserts = [w.step for w in change.steps if w.new]  # new steps are always "started"
    events = [
        (e.kind, e.step, e.attempt, None if e.detail is None else _json(e.detail))
        for e in change.events
    ]
    _put("u", [_update_row(w) for w in updates], _UPDATE_COLUMNS, params)
    _put("i", [_insert_row(step) for step in inserts], _STEP_COLUMNS, params)
    _put("e", events, _EVENT_COLUMNS, params, epoch=change.epoch)
    counts = (len(updates), len(inserts), len(events))
    return statement(head, *(n if n <= SMALL else SMALL + 1 for n in counts))


def prepared(params: dict[str, Any]) -> bool | None:
    """Whether to let psycopg prepare a commit: yes for the usual small ones (planned
    once, then only executed); never when rows travel as arrays. PostgreSQL's generic
    plan for those joins every step of the saga instead of fetching the few named by
    the array, which made each commit of a 10,000-step saga cost more than the last."""
    return False if any(isinstance(value, list) for value in params.values()) else None


def _put(
    prefix: str,
    rows: list[tuple[Any, ...]],
    columns: str,
    params: dict[str, Any],
    epoch: int | None = None,
) -> None:
    """Bind ``rows``: one parameter per cell when few, one array per column when many."""
    if len(rows) > SMALL:
        params.update(_columns(prefix, rows, columns))
        return
    for i, row in enumerate(rows):
        params.update(zip(_keys(prefix, i, columns), row, strict=True))
        if epoch is not None:
            params[f"{prefix}{i}_epoch"] = epoch


@functools.cache
def _keys(prefix: str, i: int, columns: str) -> tuple[str, ...]:
    """The parameter names of row ``i``'s cells (computed once: this is the hot path)."""
    return tuple(f"{prefix}{i}_{name}" for name in _column_names(columns).split(", "))


def _columns(prefix: str, rows: list[tuple[Any, ...]], columns: str) -> dict[str, list[Any]]:
    """Rows turned into one list per column, named as :func:`_unnest` expects."""
    names = [part.split()[0] for part in columns.split(", ")]
    return {
        f"{prefix}_{name}": list(values)
        for name, values in zip(names, zip(*rows, strict=True), strict=True)
    }


def _update_row(write: StepWrite) -> tuple[Any, ...]:
    step = write.step
    return (
        step.seq,
        step.status.value,
        step.attempt,
        step.undo_attempt,
        step.result,
        step.output_digest,
        step.error,
        write.stamp == "started",
        write.stamp == "finished",
    )


def _insert_row(step: StepRecord) -> tuple[Any, ...]:
    return (
        step.seq,
        step.name,
        step.status.value,
        step.attempt,
        step.kind.value,
        step.transactional,
        step.action_ref,
        step.compensation_ref,
        step.args,
        step.input_digest,
        step.result,
        step.output_digest,
        step.error,
        step.undo_attempt,
    )


def _json(detail: dict[str, Any]) -> str:
    return json.dumps(detail, sort_keys=True)


class PostgresHotPath:
    """Saga creation and commits as single statements on an autocommit pool."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> bool:
        """Insert the saga with its first commit; False when (name, key) or id clashed."""
        sql, params = create_sql(saga, first, lease_ttl)
        return execute_one(self.engine, sql, params, prepared(params)) is not None

    def commit(self, change: Commit) -> bool | None:
        """Apply ``change``; whether the saga must stop (cancel requested or deadline
        passed), or None when the fence matched nothing."""
        sql, params = commit_sql(change)
        row = execute_one(self.engine, sql, params, prepared(params))
        return None if row is None else bool(row[0])

    def close(self) -> None:
        self.engine.dispose()


def execute_one(
    engine: Engine, statement: str, params: dict[str, Any], prepare: bool | None = None
) -> Any:
    """Run one statement on a raw psycopg connection; return its first row (or None).

    ``prepare`` as psycopg takes it (None: prepared once used a few times).
    Driver errors become saga's: a broken connection is thrown away and
    reported as ``StorageUnavailableError`` (retried by the store).
    """
    try:
        connection = engine.raw_connection()
    except (DBAPIError, psycopg.Error) as error:  # no connection to be had: server down, no db
        raise StorageUnavailableError(first_line(error)) from error
    try:
        cursor = typing.cast("psycopg.Cursor[Any]", connection.cursor())  # psycopg's own
        cursor.execute(statement, params, prepare=prepare)
        row = cursor.fetchone()
        cursor.close()
        return row
    except (psycopg.OperationalError, psycopg.InterfaceError) as error:
        connection.invalidate()
        raise StorageUnavailableError(first_line(error)) from error
    except psycopg.Error as error:
        raise StorageError(first_line(error)) from error
    finally:
        connection.close()
