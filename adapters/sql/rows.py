"""Rows and records: the values a saga's records are written as, and the records
its rows are read back into (a row saga cannot read is a ``CorruptRecordError``).

Shared by every SQL write path: the portable store, and the SQLite and
PostgreSQL hot paths, so that each writes a record's columns alike.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Row, Table

from saga._internal.errors import CorruptRecordError
from saga._internal.ports import Commit, Event, EventRecord, SagaRecord, StepRecord
from saga._internal.status import SagaStatus, StepKind, StepStatus

from . import tables as t


def _filled(table: Table, *by_writer: str) -> tuple[str, ...]:
    """``table``'s columns, in its order, but ``by_writer``: those each write path fills
    in itself (the database's times, the commit token, the saga a row belongs to)."""
    return tuple(column.name for column in table.columns if column.name not in by_writer)


INSTANCE_COLUMNS = _filled(
    t.instances,
    *("created_at", "updated_at", "lease_expires_at", "deadline", "commit_token", "error"),
    *t.INSTANCE_FOLD_COLUMNS,
)
"""The columns of a new saga row that :func:`instance_values` fills. Its deadline is
relative until then (seconds from the database's now); a new saga has no error."""
STEP_COLUMNS = _filled(
    t.steps, "saga_id", "started_at", "finished_at", "commit_token", *t.FOLD_COLUMNS
)
"""The columns of a step row that :func:`step_values` fills."""
STEP_UPDATE_COLUMNS = ("status", "attempt", "undo_attempt", "result", "output_digest", "error")
"""What writing a recorded step again changes, with its commit token and times: its
outcome so far, never what declared it (name, kind, references, arguments)."""
EVENT_COLUMNS = _filled(t.events, "id", "at")
"""The columns of an event row that :func:`event_values` fills."""


def instance_values(saga: SagaRecord) -> dict[str, Any]:
    """The :data:`INSTANCE_COLUMNS` of a new saga row."""
    return {
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
        "cancel_requested": False,
    }


def step_values(step: StepRecord) -> dict[str, Any]:
    """The :data:`STEP_COLUMNS` of a step row."""
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


def event_values(saga_id: str, epoch: int | None, event: Event) -> dict[str, Any]:
    """The :data:`EVENT_COLUMNS` of an event row; the detail as sorted JSON."""
    detail = None if event.detail is None else json.dumps(event.detail, sort_keys=True)
    return {
        "saga_id": saga_id,
        "kind": event.kind,
        "step": event.step,
        "attempt": event.attempt,
        "epoch": epoch,
        "detail": detail,
    }


def fence_values(change: Commit) -> dict[str, Any]:
    """The parameters of a commit's fenced update of its saga row, as both hot paths
    name them (the portable path builds its update from the same fields)."""
    return {
        "id": change.saga_id,
        "epoch": change.epoch,
        "token": change.token,
        "release": change.release,
        "release_for": change.release_for,
        "status": None if change.status is None else change.status.value,
        "error": change.error,
    }


def saga_record(
    row: Row[Any] | SimpleNamespace, step_records: tuple[StepRecord, ...]
) -> SagaRecord:
    """The saga a row of ``saga_instances`` holds (its cells as attributes), with
    ``step_records``."""
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
        trace_context=row.trace_context,
        steps=step_records,
    )


def step_record(row: Row[Any] | SimpleNamespace) -> StepRecord:
    """The step a row of ``saga_steps`` holds."""
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


def event_record(row: Row[Any]) -> EventRecord:
    """The event a row of ``saga_events`` holds (unreadable detail kept as text)."""
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
