"""A saga with its steps in one statement, on PostgreSQL's autocommit pool.

A recoverer reads every saga it claims before it runs it, and the portable read is a
REPEATABLE READ transaction of two SELECTs on the store's pool: four round trips and
SQLAlchemy's row processing. One statement sees one snapshot by itself, so the saga
row and its steps (aggregated as JSON arrays, in seq order) come back as one row on a
raw connection. Column names are those of :mod:`.tables`, never user data.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from saga._internal.ports import SagaRecord

from . import tables as t
from .messages import clash_not_found
from .rows import saga_record, step_record

# Not the folded start and completion: only the history reads them (folding.py).
_INSTANCE = tuple(c.name for c in t.instances.c if c.name not in t.INSTANCE_FOLD_COLUMNS)
_STEP = tuple(column.name for column in t.steps.c)

_SELECT = (
    f"SELECT {', '.join(f'saga_instances.{name}' for name in _INSTANCE)}, "
    f"(SELECT json_agg(json_build_array({', '.join(f'saga_steps.{name}' for name in _STEP)})"
    " ORDER BY saga_steps.seq) FROM saga_steps WHERE saga_steps.saga_id = saga_instances.id) "
    "FROM saga_instances WHERE "
)
LOAD = _SELECT + "saga_instances.id = %(id)s"
"""The statement (its text is what tests look for to see which columns a read takes)."""

FIND = _SELECT + "saga_instances.name = %(name)s AND saga_instances.key = %(key)s"
"""The saga of a definition run under a key (``uq_saga_instances_name_key``)."""

CLASH = _SELECT + (
    "saga_instances.id = %(id)s "
    "OR (saga_instances.name = %(name)s AND saga_instances.key = %(key)s)"
)
"""After a creation that inserted nothing: the row it clashed with, ours (a lost
acknowledgement hid our insert) or the saga already run under its (name, key). At
most one row: ours, if it exists, holds that (name, key) itself."""


def saga_of(row: tuple[Any, ...]) -> SagaRecord:
    """The saga a row of :data:`LOAD` holds, with its steps."""
    *cells, step_rows = row
    instance = SimpleNamespace(**dict(zip(_INSTANCE, cells, strict=True)))
    steps = tuple(
        step_record(SimpleNamespace(**dict(zip(_STEP, step, strict=True))))
        for step in step_rows or ()
    )
    return saga_record(instance, steps)


def clash_params(saga: SagaRecord) -> dict[str, Any]:
    """The parameters of :data:`CLASH` for ``saga``, whose creation inserted nothing."""
    return {"id": saga.id, "name": saga.name, "key": saga.key}


def clashed_with(row: tuple[Any, ...] | None, saga: SagaRecord) -> tuple[SagaRecord, bool]:
    """The row :data:`CLASH` found: ours (created: True) or the existing saga."""
    if row is None:
        raise clash_not_found(saga)
    found = saga_of(row)
    return found, found.id == saga.id
