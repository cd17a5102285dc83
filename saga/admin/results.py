"""What the read commands return: frozen records whose ``as_json()`` is the
documented shape (docs/operating.md); fields are only ever added, never
renamed or removed.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from saga._internal.codec import as_json_value, encode
from saga._internal.ports import EventRecord
from saga._internal.status import StepKind
from saga._internal.views import SagaView, StepView
from saga._internal.wording import attempt_failed_text, next_attempt_at
from saga.admin.facts import (
    IN_DOUBT,
    current_step,
    is_stuck,
    iso_time,
    json_value,
    lease_left,
    past_pivot,
    rounded,
)


def saga_summary(view: SagaView, now: float) -> dict[str, Any]:
    """One saga as a row of ``saga list --json``: ``error`` is the one to act on (a failed
    compensation's, when one failed for good), ``forward_error`` the one that began it."""
    step = current_step(view)
    left = lease_left(view, now)
    return {
        "id": view.id,
        "name": view.name,
        "key": view.key,
        "kind": view.kind,
        "version": view.version,
        "fingerprint": view.fingerprint,
        "status": view.status.value,
        "current_step": step.name if step else None,
        "current_step_status": json_value(step.status) if step else None,
        "attempt": step.attempt if step else None,
        "created_at": iso_time(view.created_at),
        "updated_at": iso_time(view.updated_at),
        "age_seconds": None if view.created_at is None else round(now - view.created_at, 3),
        "owner": view.owner,
        "epoch": view.epoch,
        "lease_expires_at": iso_time(view.lease_expires_at),
        "lease_expired": None if left is None else left < 0,
        "stuck": is_stuck(view, now),
        "cancel_requested": view.cancel_requested,
        "error": view.error,
        "forward_error": view.forward_error,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class SagaPage:
    """One page of ``saga list``, newest first; ``now`` is the database clock."""

    sagas: tuple[SagaView, ...]
    now: float
    limit: int
    unrunnable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Stuck sagas listed that this process cannot run (id -> why): a worker started
    like it (the same ``--app``) leaves them unclaimed. Filled for ``--stuck`` only."""

    @property
    def next_before(self) -> str | None:
        """The ``--before`` value for the next page, when there may be one."""
        return self.sagas[-1].id if len(self.sagas) == self.limit else None

    def as_json(self) -> dict[str, Any]:
        sagas = []
        for view in self.sagas:
            summary = saga_summary(view, self.now)
            if view.id in self.unrunnable:
                summary["cannot_run_here"] = self.unrunnable[view.id]
            sagas.append(summary)
        return {"sagas": sagas, "next_before": self.next_before}


def _step_json(step: StepView) -> dict[str, Any]:
    return {
        "seq": step.seq,
        "name": step.name,
        "kind": step.kind.value,
        "status": step.status.value,
        "attempt": step.attempt,
        "compensation_attempt": step.compensation_attempt,
        "transactional": step.transactional,
        "started_at": iso_time(step.started_at),
        "finished_at": iso_time(step.finished_at),
        "duration_seconds": rounded(step.duration),
        "result": as_json_value(step.result),
        "result_error": step.result_error,
        "compensation_result": as_json_value(step.compensation_result),
        "compensation_result_error": step.compensation_result_error,
        "error": step.error,
        "input_digest": step.input_digest,
        "output_digest": step.output_digest,
        "in_doubt": step.status in IN_DOUBT,
        "pivot": step.kind is StepKind.PIVOT,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class RetryWait:
    """A step whose attempt failed and whose next attempt is not started yet: its
    ``attempt_failed`` event, recorded as the attempt failed (database clock)."""

    event: EventRecord

    @property
    def text(self) -> str:
        """``attempt 1 failed: E; next attempt at T``."""
        return attempt_failed_text(self.event)

    def as_json(self) -> dict[str, Any]:
        took = (self.event.detail or {}).get("took")
        return {
            "attempt": self.event.attempt,
            "error": (self.event.detail or {}).get("error"),
            "failed_at": iso_time(self.event.at),
            "duration_seconds": took if isinstance(took, int | float) else None,
            "next_attempt_at": iso_time(next_attempt_at(self.event)),
            "text": self.text,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class SagaDetail:
    """A saga with what an operator needs to judge it (``saga show``).

    ``pending`` lists the declared steps that have not started yet, when
    this process knows the definition (``--app``). ``notes`` says, by step
    name, why a step was compensated without a compensation running.
    ``retry_on`` says, by step name, which errors the step's action is retried
    on (:func:`~saga._internal.policy.describe_retry_on`), when this process knows the
    definition; else ``retry_unknown`` says why none is known. ``waiting`` holds,
    by step name, the failed attempt of a step waiting for its next one: such a step
    is ``running`` but not in doubt (its attempt is known to have failed).
    """

    saga: SagaView
    now: float
    pending: tuple[str, ...]
    pivot: str | None
    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    retry_on: Mapping[str, str] = dataclasses.field(default_factory=dict)
    retry_unknown: str | None = "not known here: saga definition not loaded"
    waiting: Mapping[str, RetryWait] = dataclasses.field(default_factory=dict)

    def retry_of(self, step: str) -> str | None:
        """Which errors ``step``'s action is retried on, or why that is not known here."""
        return self.retry_on.get(step, self.retry_unknown)

    @property
    def in_doubt(self) -> tuple[StepView, ...]:
        """Steps that may have acted (or been undone) without that being confirmed."""
        return tuple(
            s for s in self.saga.steps if s.status in IN_DOUBT and s.name not in self.waiting
        )

    def as_json(self) -> dict[str, Any]:
        view = self.saga
        return {
            **saga_summary(view, self.now),
            "input": view.input,
            "pivot_step": self.pivot,
            "past_pivot": past_pivot(view),
            "in_doubt_steps": [s.name for s in self.in_doubt],
            "pending_steps": list(self.pending),
            "steps": [self._step_json(step) for step in view.steps],
        }

    def _step_json(self, step: StepView) -> dict[str, Any]:
        wait = self.waiting.get(step.name)
        return {
            **_step_json(step),
            "in_doubt": step.status in IN_DOUBT and wait is None,
            "retry_on": self.retry_of(step.name),
            "retry_wait": None if wait is None else wait.as_json(),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One event; ``offset`` from the saga's first event, ``duration`` of what it ends."""

    event: EventRecord
    offset: float
    duration: float | None
    text: str

    def as_json(self) -> dict[str, Any]:
        event = self.event
        return {
            "id": event.id,
            "at": iso_time(event.at),
            "offset_seconds": round(self.offset, 6),
            "duration_seconds": rounded(self.duration),
            "kind": event.kind,
            "step": event.step,
            "attempt": event.attempt,
            "epoch": event.epoch,
            "detail": event.detail,
            "next_attempt_at": iso_time(next_attempt_at(event)),
            "text": self.text,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    saga: SagaView
    entries: tuple[TimelineEntry, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.saga.id,
            "name": self.saga.name,
            "status": self.saga.status.value,
            "events": [entry.as_json() for entry in self.entries],
        }


def _same(left: str | None, right: str | None) -> bool | None:
    """Whether two digests match; None when neither side has one to compare."""
    if left is None and right is None:
        return None
    return left == right


@dataclasses.dataclass(frozen=True, slots=True)
class StepDiff:
    """One step name across two sagas; a side is None when the step did not run there."""

    name: str
    left: StepView | None
    right: StepView | None

    @property
    def same_input(self) -> bool | None:
        if self.left is None or self.right is None:
            return None
        return _same(self.left.input_digest, self.right.input_digest)

    @property
    def same_output(self) -> bool | None:
        if self.left is None or self.right is None:
            return None
        return _same(self.left.output_digest, self.right.output_digest)

    @property
    def duration_delta(self) -> float | None:
        """Right minus left, in seconds."""
        if self.left is None or self.right is None:
            return None
        if self.left.duration is None or self.right.duration is None:
            return None
        return self.right.duration - self.left.duration

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "left": None if self.left is None else _side_json(self.left),
            "right": None if self.right is None else _side_json(self.right),
            "same_input": self.same_input,
            "same_output": self.same_output,
            "duration_delta_seconds": rounded(self.duration_delta),
        }


def _side_json(step: StepView) -> dict[str, Any]:
    return {
        "status": step.status.value,
        "attempt": step.attempt,
        "input_digest": step.input_digest,
        "output_digest": step.output_digest,
        "duration_seconds": rounded(step.duration),
    }


def input_digest(view: SagaView) -> str:
    """SHA-256 of the saga's input in canonical JSON, as stored digests are computed."""
    return encode(view.input, "input", sys.maxsize).digest


def total_duration(view: SagaView) -> float | None:
    """From creation to the last update, for a saga that is finished."""
    if not view.status.is_terminal or view.created_at is None or view.updated_at is None:
        return None
    return view.updated_at - view.created_at


@dataclasses.dataclass(frozen=True, slots=True)
class SagaDiff:
    left: SagaView
    right: SagaView
    steps: tuple[StepDiff, ...]

    @property
    def same_input(self) -> bool:
        return input_digest(self.left) == input_digest(self.right)

    @property
    def only_left(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.steps if d.right is None)

    @property
    def only_right(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.steps if d.left is None)

    def as_json(self) -> dict[str, Any]:
        def side(view: SagaView) -> dict[str, Any]:
            return {
                "id": view.id,
                "name": view.name,
                "key": view.key,
                "status": view.status.value,
                "input_digest": input_digest(view),
                "duration_seconds": rounded(total_duration(view)),
            }

        return {
            "left": side(self.left),
            "right": side(self.right),
            "same_input": self.same_input,
            "steps": [d.as_json() for d in self.steps],
            "only_left": list(self.only_left),
            "only_right": list(self.only_right),
        }
