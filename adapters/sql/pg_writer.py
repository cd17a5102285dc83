"""PostgreSQL's hot path: each saga commit as one statement, in one round trip.

A commit (fence the saga row, write its steps, append its events) is a single
``WITH ... UPDATE ... INSERT ...`` statement sent in autocommit mode, so it is
one implicit transaction and one network round trip: no BEGIN, no COMMIT, no
SELECT. Every sub-statement is guarded by ``EXISTS (SELECT 1 FROM fence)``:
when the epoch moved on, the fence matches no row and nothing is written.

The SQL text depends only on the *shape* of a commit (how many step updates,
step inserts and events), never on data: every value is a bind parameter.
psycopg prepares a statement once it has seen it a few times, and a saga's
commits come in a handful of shapes.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from sqlalchemy import Engine

from saga.ports import Commit, SagaRecord, StepWrite

from .postgres import execute_one

_NOW = "extract(epoch from clock_timestamp())::float8"
_FENCED = "EXISTS (SELECT 1 FROM fence)"

_STEP_COLUMNS = (
    "seq int, name text, status text, attempt int, kind text, transactional bool, "
    "action_ref text, compensation_ref text, args text, input_digest text, result text, "
    "output_digest text, error text, undo_attempt int"
)
_EVENT_COLUMNS = "kind text, step text, attempt int, epoch int, detail text"


def _column_names(columns: str) -> str:
    return ", ".join(part.split()[0] for part in columns.split(", "))


def _row(prefix: str, columns: str) -> str:
    """A VALUES row of typed placeholders, ``%(prefix_column)s::type``."""
    cells = []
    for part in columns.split(", "):
        name, kind = part.split()
        cells.append(f"%({prefix}_{name})s::{kind}")
    return "(" + ", ".join(cells) + ")"


def _step_update(i: int) -> str:
    p = f"u{i}"
    return (
        f"u{i} AS (UPDATE saga_steps SET status = %({p}_status)s, attempt = %({p}_attempt)s::int, "
        f"undo_attempt = %({p}_undo_attempt)s::int, result = %({p}_result)s::text, "
        f"output_digest = %({p}_output_digest)s::text, error = %({p}_error)s::text, "
        f"started_at = CASE WHEN %({p}_start)s::bool THEN {_NOW} ELSE started_at END, "
        f"finished_at = CASE WHEN %({p}_finish)s::bool THEN {_NOW} ELSE finished_at END "
        f"WHERE saga_id = %(id)s AND seq = %({p}_seq)s::int AND {_FENCED})"
    )


def _step_inserts(count: int) -> str:
    rows = ", ".join(_row(f"i{i}", _STEP_COLUMNS) for i in range(count))
    names = _column_names(_STEP_COLUMNS)
    return (
        f"ins AS (INSERT INTO saga_steps (saga_id, {names}, started_at) SELECT %(id)s, v.*, {_NOW} "
        f"FROM (VALUES {rows}) AS v({names}) WHERE {_FENCED})"
    )


def _event_inserts(count: int) -> str:
    rows = ", ".join(_row(f"e{i}", _EVENT_COLUMNS) for i in range(count))
    names = _column_names(_EVENT_COLUMNS)
    return (
        f"ev AS (INSERT INTO saga_events (saga_id, at, {names}) SELECT %(id)s, {_NOW}, v.* "
        f"FROM (VALUES {rows}) AS v({names}) WHERE {_FENCED})"
    )


_FENCE = (
    f"fence AS (UPDATE saga_instances SET updated_at = {_NOW}, commit_token = %(token)s, "
    f"lease_expires_at = CASE WHEN %(release)s::bool THEN {_NOW} ELSE lease_expires_at END, "
    "owner = CASE WHEN %(release)s::bool THEN NULL ELSE owner END, "
    "status = COALESCE(%(status)s::text, status), error = COALESCE(%(error)s::text, error) "
    "WHERE id = %(id)s AND epoch = %(epoch)s::int "
    f"RETURNING cancel_requested OR COALESCE(deadline < {_NOW}, false) AS stop)"
)

_CREATE = (
    "fence AS (INSERT INTO saga_instances (id, name, key, kind, status, input, version, owner, "
    "epoch, deadline, cancel_requested, created_at, updated_at, lease_expires_at, commit_token) "
    "VALUES (%(id)s, %(name)s, %(key)s, %(kind)s, %(status)s, %(input)s, %(version)s, "
    f"%(owner)s, %(epoch)s::int, {_NOW} + %(deadline)s::float8, false, {_NOW}, {_NOW}, "
    f"{_NOW} + %(ttl)s::float8, %(token)s) ON CONFLICT DO NOTHING RETURNING false AS stop)"
)


@functools.lru_cache(maxsize=256)
def statement(head: str, updates: int, inserts: int, events: int) -> str:
    """The SQL for a commit of this shape (``head`` is the fence: update or create)."""
    parts = [head]
    parts += [_step_update(i) for i in range(updates)]
    if inserts:
        parts.append(_step_inserts(inserts))
    if events:
        parts.append(_event_inserts(events))
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
        "owner": saga.owner,
        "epoch": saga.epoch,
        "deadline": saga.deadline,
        "ttl": lease_ttl,
        "token": first.token,
    }
    return _with_body(_CREATE, first, params), params


def _with_body(head: str, change: Commit, params: dict[str, Any]) -> str:
    updates = [w for w in change.steps if not w.new]
    inserts = [w for w in change.steps if w.new]
    for i, write in enumerate(updates):
        _update_params(f"u{i}", write, params)
    for i, write in enumerate(inserts):
        _insert_params(f"i{i}", write, params)
    for i, event in enumerate(change.events):
        params.update(
            {
                f"e{i}_kind": event.kind,
                f"e{i}_step": event.step,
                f"e{i}_attempt": event.attempt,
                f"e{i}_epoch": change.epoch,
                f"e{i}_detail": None if event.detail is None else _json(event.detail),
            }
        )
    return statement(head, len(updates), len(inserts), len(change.events))


def _update_params(p: str, write: StepWrite, params: dict[str, Any]) -> None:
    step = write.step
    params.update(
        {
            f"{p}_seq": step.seq,
            f"{p}_status": step.status.value,
            f"{p}_attempt": step.attempt,
            f"{p}_undo_attempt": step.undo_attempt,
            f"{p}_result": step.result,
            f"{p}_output_digest": step.output_digest,
            f"{p}_error": step.error,
            f"{p}_start": write.stamp == "started",
            f"{p}_finish": write.stamp == "finished",
        }
    )


def _insert_params(p: str, write: StepWrite, params: dict[str, Any]) -> None:
    # New steps are always "started": their started_at is the statement's clock.
    step = write.step
    params.update(
        {
            f"{p}_seq": step.seq,
            f"{p}_name": step.name,
            f"{p}_status": step.status.value,
            f"{p}_attempt": step.attempt,
            f"{p}_kind": step.kind.value,
            f"{p}_transactional": step.transactional,
            f"{p}_action_ref": step.action_ref,
            f"{p}_compensation_ref": step.compensation_ref,
            f"{p}_args": step.args,
            f"{p}_input_digest": step.input_digest,
            f"{p}_result": step.result,
            f"{p}_output_digest": step.output_digest,
            f"{p}_error": step.error,
            f"{p}_undo_attempt": step.undo_attempt,
        }
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
        return execute_one(self.engine, sql, params) is not None

    def commit(self, change: Commit, lease_ttl: float) -> bool | None:
        """Apply ``change``; whether the saga must stop (cancel requested or deadline
        passed), or None when the fence matched nothing."""
        del lease_ttl  # leases are renewed by the heartbeat, not by commits
        sql, params = commit_sql(change)
        row = execute_one(self.engine, sql, params)
        return None if row is None else bool(row[0])

    def close(self) -> None:
        self.engine.dispose()
