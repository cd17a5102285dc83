"""PostgreSQL's commit statements: each saga commit as one statement, in one round trip.

A commit (fence the saga row, write its steps, append its events) is a single
``WITH ... UPDATE ... INSERT ...`` statement sent in autocommit mode, so it is
one implicit transaction and one network round trip: no BEGIN, no COMMIT, no
SELECT. Every sub-statement is guarded by ``EXISTS (TABLE fence)``: when the
epoch moved on, the fence matches no row and nothing is written. A step's start
and success events are folded into its row where the row says all they say
(:mod:`.folding`): the statement draws the ids of all the commit's events in
their order, and writes back, first, a folded event the commit's update would alter.

The SQL text depends only on which parts a commit has (step updates, step
inserts, events), never on how many rows or on data: rows travel as one array
parameter per column and are spread by ``unnest``. So there are a handful of
statement texts, which psycopg prepares once each, and a 64-step batch costs
the client no more parsing than a single step.
"""

from __future__ import annotations

import functools
import operator
import typing
from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import Boolean, Float, Integer, String, Table
from sqlalchemy.types import TypeDecorator, TypeEngine

from saga._internal.ports import Commit, SagaRecord, StepWrite

from . import folding
from . import tables as t
from .fold_memory import FoldMemory, Slots
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

# One time for the whole statement (it is the commit's transaction; texts over 4,096
# characters psycopg parses on every execution, so this is short): every row a commit
# writes bears the same instant, so the times of its events (those folded into step rows
# included) never disagree with their order, whichever sub-statement PostgreSQL runs first.
_NOW = "extract(epoch from now())::float8"  # autocommit: now() is the statement's time
_FENCED = "EXISTS (TABLE fence)"

_Columns = tuple[tuple[str, str], ...]
"""Columns as (name, PostgreSQL type): each parameter is cast to its column's type."""


def _typed(table: Table, names: Iterable[str]) -> _Columns:
    """``names`` with the PostgreSQL types ``table`` declares them with."""
    return tuple((name, _pg_type(table.c[name].type)) for name in names)


def _pg_type(kind: TypeEngine[Any]) -> str:
    if isinstance(kind, TypeDecorator):  # SQLModel's str columns: a VARCHAR underneath
        kind = kind.impl_instance
    for python, sql in ((Boolean, "bool"), (Integer, "int"), (Float, "float8"), (String, "text")):
        if isinstance(kind, python):
            return sql
    raise TypeError(f"no PostgreSQL type for {kind!r}")


_INSTANCE_COLUMNS = _typed(t.instances, INSTANCE_COLUMNS)
_STEP_COLUMNS = _typed(t.steps, STEP_COLUMNS)
_STAMPS = (("start", "bool"), ("finish", "bool"))  # set the step's time column to now
# The positions, among the commit's events, of the start and success folded into the row.
_START_N, _FINISH_N = ("start_n", "int"), ("finish_n", "int")
_UPDATE_COLUMNS = _typed(t.steps, ("seq", *STEP_UPDATE_COLUMNS)) + _STAMPS + (_START_N, _FINISH_N)
_INSERT_COLUMNS = (*_STEP_COLUMNS, _START_N)
_EVENT_COLUMNS = (("n", "int"), *_typed(t.events, EVENT_COLUMNS[1:]))  # not saga_id: the commit's
assert EVENT_COLUMNS[0] == "saga_id"


def _names(columns: _Columns) -> str:
    return ", ".join(name for name, _ in columns)


def _unnest(prefix: str, columns: _Columns) -> str:
    """``unnest(%(p_a)b::int[], ...) AS v(a, ...)``: one array parameter per column, so
    the SQL text is the same whatever the number of rows. The arrays travel in binary
    (``%b``): as text, psycopg searches every element for characters to quote."""
    arrays = ", ".join(f"%({prefix}_{name})b::{kind}[]" for name, kind in columns)
    return f"unnest({arrays}) AS v({_names(columns)})"


def _values(prefix: str, columns: _Columns, count: int) -> str:
    """``(VALUES (%(p0_0)s::int, ...), ...) AS v(a, ...)``: ``count`` rows of typed
    placeholders, one per cell, named by row and column number (short names keep a
    commit's text under the 4,096 characters past which psycopg parses it again on
    every execution)."""
    rows = ", ".join(_row(f"{prefix}{i}", columns) for i in range(count))
    return f"(VALUES {rows}) AS v({_names(columns)})"


def _row(prefix: str, columns: _Columns) -> str:
    """A VALUES row of typed placeholders, ``%(prefix_number)s::type``."""
    return "(" + ", ".join(f"%({prefix}_{j})s::{kind}" for j, (_, kind) in enumerate(columns)) + ")"


SMALL = 4
"""Up to this many rows a part is written as VALUES rows (cheapest for a saga's
usual commits); above it, as arrays spread by unnest (one text for any size)."""

DRAWN = 2 * SMALL
"""Up to this many events a commit's statement text says how many ids it draws."""


def _ids(drawn: int) -> str:
    """``ids``: the ids of the commit's events (folded or not), drawn in the commit's
    order, the history's (see folding.py). The count is written into the text when
    small: with a parameter, PostgreSQL's generic plan guesses 1,000 rows, finds itself
    dearer than a custom plan, and plans every commit afresh (a third fewer sagas/s)."""
    count = str(drawn) if drawn <= DRAWN else "%(events)s::int"
    return (
        "ids AS (SELECT nextval('saga_events_id_seq') AS id, n "
        f"FROM generate_series(1, {count}) AS n)"
    )


def _id_at(position: str, many: bool = False) -> str:
    """The id of the commit's event at ``position`` (NULL for a NULL position), for a
    part of ``many`` rows (above SMALL) or of a few. A few look theirs up in ``ids``
    (cheapest for a saga's usual commits); many index an array of the ids gathered once
    by an uncorrelated subquery: looked up row by row, a commit starting and finishing
    hundreds of steps scanned ``ids`` once per row and spent most of its time there."""
    if many:
        return f"(SELECT array_agg(id ORDER BY n) FROM ids)[{position}]"
    return f"(SELECT id FROM ids WHERE ids.n = {position})"


def _step_own(many: bool) -> dict[str, str]:
    """The columns of a new step row that are not the engine's values."""
    return {
        "saga_id": "%(id)s",
        "commit_token": "%(token)s",
        "started_at": _NOW,
        "started_event": _id_at("v.start_n", many),
        "fold_epoch": "%(epoch)s::int",
    }


def _step_insert(rows: str, many: bool) -> str:
    columns = _step_own(many)
    own = ", ".join(columns.values())
    return (
        f"ins AS (INSERT INTO saga_steps ({', '.join(columns)}, {_names(_STEP_COLUMNS)}) "
        f"SELECT {own}, {', '.join(f'v.{name}' for name, _ in _STEP_COLUMNS)} "
        f"FROM {rows} WHERE {_FENCED})"
    )


def _event_insert(rows: str) -> str:
    names = ", ".join(f"v.{name}" for name, _ in _EVENT_COLUMNS[1:])
    return (
        f"ev AS (INSERT INTO saga_events (id, saga_id, at, {_names(_EVENT_COLUMNS[1:])}) "
        f"SELECT ids.id, %(id)s, {_NOW}, {names} FROM {rows} JOIN ids ON ids.n = v.n "
        f"WHERE {_FENCED})"
    )


def _kept(row: str, start: str, attempt: str) -> str:
    """Whether the start folded into a step row (``row``: its columns' prefix) still says
    what it said once the row is updated with ``start`` and ``attempt``: no new start,
    the same attempt, a commit of the same epoch."""
    return f"(NOT {start} AND {row}attempt = {attempt} AND {row}fold_epoch = %(epoch)s::int)"


def _fold_sets(row: str, v: dict[str, str], many: bool) -> str:
    """The SET clauses of a step update for its folded events: a fold the commit makes,
    else the one kept (see :func:`_kept`), else none (written back by :func:`_unfolding`)."""
    kept = _kept(row, v["start"], v["attempt"])
    return (
        f"started_event = COALESCE({_id_at(v['start_n'], many)}, "
        f"CASE WHEN {kept} THEN {row}started_event END), "
        f"finished_event = COALESCE({_id_at(v['finish_n'], many)}, "
        f"CASE WHEN {kept} AND NOT {v['finish']} THEN {row}finished_event END), "
        "fold_epoch = %(epoch)s::int"
    )


def _update_rows(rows: str) -> str:
    """``uv``: the commit's step updates, ``rows`` (VALUES or unnest, as ``v``), read by
    both the write-back and the update."""
    return f"uv AS (SELECT * FROM {rows})"


def _update_seqs(count: int) -> str:
    """The seqs of ``count`` updates bound one by one, as an array."""
    return "ARRAY[" + ", ".join(f"%(u{i}_0)s::int" for i in range(count)) + "]"
    # u{i}_0: the seq, the first of _UPDATE_COLUMNS


def _unfolding(seqs: str) -> str:
    """``mat AS (INSERT ...)``: the folded events the commit's step updates (``uv``;
    ``seqs``: their seqs, for the primary key) do not keep, written back as rows with
    their ids. The statement's snapshot shows it the step rows before the update."""
    kept = _kept("s.", "v.start", "v.attempt")
    return (
        "mat AS (INSERT INTO saga_events (id, saga_id, at, kind, step, attempt, epoch) "
        "SELECT f.id, s.saga_id, f.at, f.kind, s.name, s.attempt, s.fold_epoch "
        "FROM saga_steps s JOIN uv v ON s.seq = v.seq CROSS JOIN LATERAL (VALUES "
        f"(s.started_event, s.started_at, 'step_started', {kept}), "
        f"(s.finished_event, s.finished_at, 'step_succeeded', {kept} AND NOT v.finish)"
        ") AS f(id, at, kind, kept) "
        f"WHERE s.saga_id = %(id)s AND s.seq = ANY({seqs}) AND f.id IS NOT NULL "
        f"AND f.kept IS NOT TRUE AND {_FENCED})"
    )


def _step_updates(seqs: str, many: bool) -> str:
    """``upd AS (UPDATE ...)``: the step rows ``uv`` names (``seqs``: their seqs; ``many``:
    above SMALL), with their folded events made, kept or dropped (:func:`_fold_sets`)."""
    return (
        "upd AS (UPDATE saga_steps s SET "
        + "".join(f"{name} = v.{name}, " for name in STEP_UPDATE_COLUMNS)
        + "commit_token = %(token)s, "
        f"started_at = CASE WHEN v.start THEN {_NOW} ELSE s.started_at END, "
        f"finished_at = CASE WHEN v.finish THEN {_NOW} ELSE s.finished_at END, "
        f"{_fold_sets('s.', {name: f'v.{name}' for name, _ in _UPDATE_COLUMNS}, many)} "
        # seq = ANY(...) lets the primary key fetch just these rows; joined on v.seq alone,
        # the planner read every step of the saga each time (quadratic for a large saga).
        f"FROM uv v WHERE s.saga_id = %(id)s AND s.seq = ANY({seqs}) AND s.seq = v.seq "
        f"AND {_FENCED})"
    )


def _updates(count: int, write_back: bool) -> list[str]:
    """The parts updating ``count`` step rows (above SMALL: 'many', bound as arrays),
    writing back first the folded events they alter when ``write_back``
    (:mod:`.fold_memory` tells when it cannot be needed). One text for the rows, so that
    a commit's statement stays under the 4,096 characters past which psycopg parses its
    text again on every execution."""
    if count > SMALL:
        rows, seqs = _unnest("u", _UPDATE_COLUMNS), "%(u_seq)b::int[]"
    else:
        rows, seqs = _values("u", _UPDATE_COLUMNS, count), _update_seqs(count)
    unfolding = [_unfolding(seqs)] if write_back else []
    return [_update_rows(rows), *unfolding, _step_updates(seqs, count > SMALL)]


_STEP_INSERTS = _step_insert(_unnest("i", _INSERT_COLUMNS), many=True)
_EVENT_INSERTS = _event_insert(_unnest("e", _EVENT_COLUMNS))


def _fence(finishes: bool) -> str:
    """The fenced update of the saga row; ``finishes``: with the saga's completion folded
    into it (:func:`.folding.saga_folds`)."""
    folded = f"finished_event = {_id_at('%(finish_n)s::int')}, finished_at = {_NOW}, "
    return (
        f"fence AS (UPDATE saga_instances SET {folded if finishes else ''}"
        f"updated_at = {_NOW}, commit_token = %(token)s, "
        "lease_expires_at = CASE WHEN %(release)s::bool "
        f"THEN {_NOW} + %(release_for)s::float8 ELSE lease_expires_at END, "
        "owner = CASE WHEN %(release)s::bool THEN NULL ELSE owner END, "
        "status = COALESCE(%(status)s::text, status), error = COALESCE(%(error)s::text, error) "
        "WHERE id = %(id)s AND epoch = %(epoch)s::int "
        "RETURNING cancel_requested OR status = 'paused' "
        f"OR COALESCE(deadline < {_NOW}, false) AS stop)"
    )


_FENCE, _FENCE_FINISHING = _fence(False), _fence(True)

# A new saga row, with its start folded into it (NULLs when it is not).
_CREATE = (
    f"fence AS (INSERT INTO saga_instances ({_names(_INSTANCE_COLUMNS)}, "
    "deadline, created_at, updated_at, lease_expires_at, commit_token, "
    "started_event, started_module) "
    f"VALUES ({', '.join(f'%({name})s::{kind}' for name, kind in _INSTANCE_COLUMNS)}, "
    f"{_NOW} + %(deadline)s::float8, {_NOW}, "
    f"{_NOW}, {_NOW} + %(ttl)s::float8, %(token)s, "
    f"{_id_at('%(start_n)s::int')}, %(module)s::text) "
    "ON CONFLICT DO NOTHING RETURNING false AS stop)"
)


@functools.lru_cache(maxsize=128)
def statement(
    head: str, updates: int, inserts: int, events: int, drawn: int = 0, write_back: bool = True
) -> str:
    """The SQL for a commit of this shape (``head`` is the fence: update or create);
    a count above SMALL is written as 'many' and uses the array form. ``drawn``: how
    many event ids it draws (the events written as rows and those folded into steps;
    above DRAWN, 'many'); ``write_back``: whether its step updates may alter folded events.
    The event ids are drawn first: the head may fold the saga's start or completion."""
    parts = [_ids(drawn)] if drawn or updates or inserts or events or head != _FENCE else []
    parts.append(head)
    if updates:
        parts += _updates(updates, write_back)
    if inserts > SMALL:
        parts.append(_STEP_INSERTS)
    elif inserts:
        parts.append(_step_insert(_values("i", _INSERT_COLUMNS, inserts), many=False))
    if events > SMALL:
        parts.append(_EVENT_INSERTS)
    elif events:
        parts.append(_event_insert(_values("e", _EVENT_COLUMNS, events)))
    return "WITH " + ", ".join(parts) + " SELECT stop FROM fence"


class Statement(NamedTuple):
    """A commit's SQL, its parameters, ``prepare`` as psycopg takes it (:func:`prepared`),
    and what it folds into each step write, for :meth:`.FoldMemory.landed`."""

    sql: str
    params: dict[str, Any]
    prepare: bool | None
    slots: Slots


def commit_sql(change: Commit, memory: FoldMemory) -> Statement:
    """The statement applying ``change``.

    A commit leaves the lease alone (the heartbeat renews it): ``lease_expires_at``
    is indexed, and leaving it unchanged lets PostgreSQL update the row in place
    (a HOT update) instead of adding an entry to every index.
    """
    folds = folding.saga_folds(change, creates=False)
    params = {**fence_values(change), "finish_n": folds.finish}
    return _with_body(_FENCE_FINISHING if folds.finish else _FENCE, change, params, memory, folds)


def create_sql(saga: SagaRecord, first: Commit, lease_ttl: float, memory: FoldMemory) -> Statement:
    """The statement inserting ``saga`` with its first commit."""
    params: dict[str, Any] = {
        **instance_values(saga),
        "deadline": saga.deadline,
        "ttl": lease_ttl,
        "token": first.token,
    }
    folds = folding.saga_folds(first, creates=True)
    params.update(start_n=folds.start, module=folds.module)
    return _with_body(_CREATE, first, params, memory, folds)


def _with_body(
    head: str,
    change: Commit,
    params: dict[str, Any],
    memory: FoldMemory,
    saga: folding.SagaFolds,
) -> Statement:
    slots, rows = folding.folds(change, saga)
    writes = list(zip(change.steps, slots, strict=True))
    updates = [_update_row(w, *slot) for w, slot in writes if not w.new]
    inserts = [(*_step_cells(step_values(w.step)), slot[0]) for w, slot in writes if w.new]
    events = [
        (n, *_event_cells(event_values(change.saga_id, change.epoch, change.events[n - 1])))
        for n in rows
    ]
    params["events"] = len(change.events)
    _put("u", updates, _UPDATE_COLUMNS, params)
    _put("i", inserts, _INSERT_COLUMNS, params)
    _put("e", events, _EVENT_COLUMNS, params)
    counts = (len(updates), len(inserts), len(events))
    drawn = min(len(change.events), DRAWN + 1)
    shape = (n if n <= SMALL else SMALL + 1 for n in counts)
    sql = statement(head, *shape, drawn, bool(updates) and memory.writes_back(change))
    return Statement(sql, params, prepared(max(counts) > SMALL or drawn > DRAWN), slots)


def prepared(with_arrays: bool) -> bool | None:
    """Whether to let psycopg prepare a commit: yes for the usual small ones (planned
    once, then only executed); never when rows travel as arrays. PostgreSQL's generic
    plan for those joins every step of the saga instead of fetching the few named by
    the array, which made each commit of a 10,000-step saga cost more than the last."""
    return False if with_arrays else None


def _put(
    prefix: str, rows: list[tuple[Any, ...]], columns: _Columns, params: dict[str, Any]
) -> None:
    """Bind ``rows``: one parameter per cell when few, one array per column when many."""
    if len(rows) > SMALL:
        params.update(_columns(prefix, rows, columns))
        return
    for i, row in enumerate(rows):
        params.update(zip(_keys(prefix, i, columns), row, strict=True))


@functools.cache
def _keys(prefix: str, i: int, columns: _Columns) -> tuple[str, ...]:
    """The parameter names of row ``i``'s cells (computed once: this is the hot path)."""
    return tuple(f"{prefix}{i}_{j}" for j in range(len(columns)))


def _columns(prefix: str, rows: list[tuple[Any, ...]], columns: _Columns) -> dict[str, list[Any]]:
    """Rows turned into one list per column, named as :func:`_unnest` expects."""
    return {
        f"{prefix}_{name}": list(values)
        for (name, _), values in zip(columns, zip(*rows, strict=True), strict=True)
    }


# A row's cells, in its columns' order, from the values every write path binds.
_step_cells = operator.itemgetter(*STEP_COLUMNS)
_step_update_cells = operator.itemgetter("seq", *STEP_UPDATE_COLUMNS)
_event_cells = operator.itemgetter(*EVENT_COLUMNS[1:])


def _update_row(write: StepWrite, start_n: int | None, finish_n: int | None) -> tuple[Any, ...]:
    stamps = (write.stamp == "started", write.stamp == "finished", start_n, finish_n)
    return typing.cast("tuple[Any, ...]", _step_update_cells(step_values(write.step))) + stamps
