"""Operator use cases: what the ``saga`` admin command does, as plain functions.

Every function here takes a :class:`~saga.Coordinator` and returns frozen
records; ``saga/cli.py`` only parses arguments, calls one of them and renders
what comes back. They work just as well from Python::

    from saga import admin

    with admin.open_coordinator("postgresql+psycopg://...", apps=["shop.sagas"]) as coord:
        for view in admin.list_sagas(coord, stuck=True).sagas:
            print(view.id, view.status)

The ``as_json()`` shapes are part of the contract: docs/operating.md
documents them, and fields are only ever added, never renamed or removed.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import tenacity

from saga import engine
from saga.codec import encode
from saga.coordinator import Coordinator, parse_status
from saga.definition import Saga, defined_saga
from saga.errors import (
    ConfigurationError,
    OperationRefusedError,
    SagaBusyError,
    StorageError,
    StorageUnavailableError,
    UnknownSagaError,
    UnsafeReferenceError,
)
from saga.operations import operator_detail
from saga.policy import RetryPolicy
from saga.ports import Event, EventRecord, ListQuery, SagaRecord, StepRecord, StepWrite
from saga.status import SagaStatus, StepKind, StepStatus
from saga.views import SagaView, StepView

CLI_STORE_RETRY = RetryPolicy(
    max_attempts=None,
    initial_delay=0.05,
    max_delay=0.5,
    retry_on=(StorageUnavailableError,),
    max_elapsed=3.0,
)
"""An operator waits seconds, not the library's 30, to learn the database is unreachable."""

FINISHED = (SagaStatus.COMPLETED, SagaStatus.COMPENSATED, SagaStatus.CANCELLED)
IN_DOUBT = (StepStatus.RUNNING, StepStatus.COMPENSATING)

# -- opening -------------------------------------------------------------------------------


def import_apps(modules: Sequence[str]) -> None:
    """Import the operator's modules (``--app``) so that their sagas are defined here."""
    if modules and os.getcwd() not in sys.path:
        # The console script does not put the current directory on the path
        # the way ``python -m`` does; operators expect ``--app myproject.sagas``
        # to work from their project's root.
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ConfigurationError(
                f"cannot import --app module {name!r} ({error}); check the name and that it "
                "is importable from this directory or PYTHONPATH"
            ) from error
        except Exception as error:
            raise ConfigurationError(
                f"importing --app module {name!r} failed: {type(error).__name__}: {error}"
            ) from error


def open_coordinator(
    url: str | None = None,
    apps: Sequence[str] = (),
    *,
    lease_ttl: float = 30.0,
    store_retry: RetryPolicy = CLI_STORE_RETRY,
) -> Coordinator:
    """A coordinator for operator work: ``apps`` imported and trusted, a short store retry."""
    import_apps(apps)
    return Coordinator(url, lease_ttl=lease_ttl, trusted_modules=apps, store_retry=store_retry)


# -- parsing operator input ----------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w)?)+")


def parse_duration(text: str, what: str = "duration") -> float:
    """Seconds in ``90s``, ``10m``, ``1h30m``, ``30d``, ``2w`` or a plain number of seconds."""
    compact = text.strip().lower().replace(" ", "")
    if not _DURATION.fullmatch(compact):
        raise ConfigurationError(
            f"{what} {text!r} is not a duration; write it like 90s, 10m, 1h30m, 30d or 2w"
        )
    return sum(
        float(number) * _UNITS[unit or "s"] for number, unit in _DURATION_PART.findall(compact)
    )


def parse_saga_id(text: str) -> str:
    """The canonical form of a saga id, or ``UnknownSagaError`` saying it cannot be one."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        raise UnknownSagaError(
            f"{text!r} is not a saga id (ids are UUIDs like 0b7e7c2e-4f7a-4c55-9d0e-"
            "5a2f8f1d3c11); find ids with `saga list`"
        ) from None


def parse_statuses(values: Iterable[str]) -> tuple[SagaStatus, ...]:
    """Statuses from ``--status`` values, each possibly comma-separated."""
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    return tuple(parse_status(name) for name in names)


# -- formatting shared by the command, the demo and the JSON -------------------------------


def iso_time(seconds: float | None) -> str | None:
    """A database timestamp as ISO 8601 UTC with milliseconds."""
    if seconds is None:
        return None
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def human_duration(seconds: float | None) -> str:
    """``850 ms``, ``4.2 s``, ``3m 05s``, ``2h 10m``, ``3d 4h``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def _json_value(value: SagaStatus | StepStatus | StepKind | None) -> str | None:
    return None if value is None else value.value


# -- list ------------------------------------------------------------------------------------


def current_step(view: SagaView) -> StepView | None:
    """The step in flight (running or compensating), else the most recent one."""
    in_flight = [s for s in view.steps if s.status in IN_DOUBT]
    if in_flight:
        return in_flight[-1]
    return view.steps[-1] if view.steps else None


def past_pivot(view: SagaView) -> bool:
    return any(s.kind is StepKind.PIVOT and s.status is StepStatus.SUCCEEDED for s in view.steps)


def lease_left(view: SagaView, now: float) -> float | None:
    """Seconds left on an unfinished saga's lease (negative once expired)."""
    if view.status.is_terminal or view.lease_expires_at is None:
        return None
    return view.lease_expires_at - now


def is_stuck(view: SagaView, now: float) -> bool:
    """Running or compensating with an expired lease: its process is gone."""
    left = lease_left(view, now)
    return left is not None and left < 0


def saga_summary(view: SagaView, now: float) -> dict[str, Any]:
    """One saga as a row of ``saga list --json``."""
    step = current_step(view)
    left = lease_left(view, now)
    return {
        "id": view.id,
        "name": view.name,
        "key": view.key,
        "kind": view.kind,
        "status": view.status.value,
        "current_step": step.name if step else None,
        "current_step_status": _json_value(step.status) if step else None,
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
    }


@dataclasses.dataclass(frozen=True, slots=True)
class SagaPage:
    """One page of ``saga list``, newest first; ``now`` is the database clock."""

    sagas: tuple[SagaView, ...]
    now: float
    limit: int

    @property
    def next_before(self) -> str | None:
        """The ``--before`` value for the next page, when there may be one."""
        return self.sagas[-1].id if len(self.sagas) == self.limit else None

    def as_json(self) -> dict[str, Any]:
        return {
            "sagas": [saga_summary(view, self.now) for view in self.sagas],
            "next_before": self.next_before,
        }


def list_sagas(
    coord: Coordinator,
    *,
    statuses: Sequence[SagaStatus] = (),
    name: str | None = None,
    stuck: bool = False,
    older_than: float | None = None,
    limit: int = 50,
    before: str | None = None,
) -> SagaPage:
    """Sagas matching every filter given, newest first, at most ``limit``."""
    if limit < 1:
        raise ConfigurationError(f"--limit must be at least 1, not {limit}")
    if before is not None:
        before = get_saga(coord, before).id  # an unknown anchor is an error, not []
    views = coord.list(
        statuses or None,
        name,
        limit,
        stuck=stuck,
        before=before,
        older_than=older_than,
    )
    return SagaPage(tuple(views), coord.store.now(), limit)


# -- show -------------------------------------------------------------------------------------


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
        "duration_seconds": None if step.duration is None else round(step.duration, 6),
        "result": step.result,
        "error": step.error,
        "input_digest": step.input_digest,
        "output_digest": step.output_digest,
        "in_doubt": step.status in IN_DOUBT,
        "pivot": step.kind is StepKind.PIVOT,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class SagaDetail:
    """A saga with what an operator needs to judge it (``saga show``).

    ``pending`` lists the declared steps that have not started yet, when
    this process knows the definition (``--app``).
    """

    saga: SagaView
    now: float
    pending: tuple[str, ...]
    pivot: str | None

    @property
    def in_doubt(self) -> tuple[StepView, ...]:
        """Steps that may have acted (or been undone) without that being confirmed."""
        return tuple(s for s in self.saga.steps if s.status in IN_DOUBT)

    def as_json(self) -> dict[str, Any]:
        view = self.saga
        return {
            **saga_summary(view, self.now),
            "input": view.input,
            "error": view.error,
            "pivot_step": self.pivot,
            "past_pivot": past_pivot(view),
            "in_doubt_steps": [s.name for s in self.in_doubt],
            "pending_steps": list(self.pending),
            "steps": [_step_json(step) for step in view.steps],
        }


def show_saga(coord: Coordinator, saga_id: str) -> SagaDetail:
    view = get_saga(coord, saga_id)
    definition = _definition(view)
    recorded = {s.name for s in view.steps}
    pending: tuple[str, ...] = ()
    pivot = next((s.name for s in view.steps if s.kind is StepKind.PIVOT), None)
    if definition is not None:
        pending = tuple(s.name for s in definition.order() if s.name not in recorded)
        declared = (s.name for s in definition.steps if s.kind is StepKind.PIVOT)
        pivot = pivot or next(declared, None)
    return SagaDetail(view, coord.store.now(), pending, pivot)


def get_saga(coord: Coordinator, saga_id: str) -> SagaView:
    """The saga with this id; an unknown or malformed id is ``UnknownSagaError`` with a hint."""
    try:
        return coord.get(parse_saga_id(saga_id))
    except UnknownSagaError as error:
        raise UnknownSagaError(f"{error}; find ids with `saga list`") from None


def _definition(view: SagaView) -> Saga | None:
    return defined_saga(view.name) if view.kind == "declarative" else None


# -- history ----------------------------------------------------------------------------------

_END_OF = {
    "step_succeeded": "step_started",
    "step_failed": "step_started",
    "attempt_failed": "step_started",
    "compensation_done": "compensation_started",
    "compensation_failed": "compensation_started",
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
            "duration_seconds": None if self.duration is None else round(self.duration, 6),
            "kind": event.kind,
            "step": event.step,
            "attempt": event.attempt,
            "epoch": event.epoch,
            "detail": event.detail,
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


def saga_history(coord: Coordinator, saga_id: str) -> Timeline:
    """The saga's events, oldest first, with offsets and durations."""
    view = get_saga(coord, saga_id)
    return Timeline(view, timeline(coord.history(view.id)))


def timeline(events: Sequence[EventRecord]) -> tuple[TimelineEntry, ...]:
    """Offsets from the first event, and for each ending event how long its step took."""
    if not events:
        return ()
    first = events[0].at
    started: dict[tuple[str, str | None], float] = {}
    entries = []
    for event in events:
        duration = None
        opener = _END_OF.get(event.kind)
        if opener is not None and (opener, event.step) in started:
            duration = event.at - started[(opener, event.step)]
        elif event.kind in ("saga_completed", "saga_compensated", "saga_cancelled"):
            duration = event.at - first
        started[(event.kind, event.step)] = event.at
        entries.append(TimelineEntry(event, event.at - first, duration, describe_event(event)))
    return tuple(entries)


def describe_event(event: EventRecord) -> str:
    """An event as one line of plain English."""
    detail = event.detail or {}
    step, attempt = event.step, event.attempt
    error = detail.get("error")
    texts: dict[str, Callable[[], str]] = {
        "saga_started": lambda: "saga started",
        "step_started": lambda: f"step {step} started (attempt {attempt})",
        "attempt_failed": lambda: f"step {step} attempt {attempt} failed: {error}",
        "step_succeeded": lambda: f"step {step} succeeded (attempt {attempt})",
        "step_failed": lambda: f"step {step} failed: {error}",
        "compensation_started": lambda: f"compensating step {step} (attempt {attempt})",
        "compensation_done": lambda: _compensated_text(event),
        "compensation_failed": lambda: f"compensation of step {step} failed: {error}",
        "lease_claimed": lambda: _claim_text(event),
        "operator_action": lambda: _operator_text(event),
        "recovery_refused": lambda: f"recovery by {detail.get('owner')} refused: {error}",
    }
    if event.kind in texts:
        return texts[event.kind]()
    if event.kind.startswith("saga_"):
        reason = detail.get("reason")
        return f"saga {event.kind[5:]}" + (f" ({reason})" if reason else "")
    return f"{event.kind} {detail}" if detail else event.kind


def _compensated_text(event: EventRecord) -> str:
    detail = event.detail or {}
    if detail.get("marked_by"):
        return (
            f"step {event.step} marked compensated by {detail['marked_by']}: {detail.get('reason')}"
        )
    return f"step {event.step} compensated"


def _claim_text(event: EventRecord) -> str:
    detail = event.detail or {}
    why = f" to {detail['why']}" if detail.get("why") else ""
    return f"lease claimed by {detail.get('owner', '?')}{why} (epoch {event.epoch})"


def _operator_text(event: EventRecord) -> str:
    detail = dict(event.detail or {})
    who = f"{detail.pop('by', '?')}@{detail.pop('host', '?')}"
    action = detail.pop("action", "?")
    owner = detail.pop("owner", None)
    extra = "".join(f", {key} {value!r}" for key, value in sorted(detail.items()))
    claimed = f"as {owner}, " if owner else ""
    return f"operator {who}: {action}{extra} ({claimed}epoch {event.epoch})"


# -- diff -------------------------------------------------------------------------------------


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
            "duration_delta_seconds": _rounded(self.duration_delta),
        }


def _side_json(step: StepView) -> dict[str, Any]:
    return {
        "status": step.status.value,
        "attempt": step.attempt,
        "input_digest": step.input_digest,
        "output_digest": step.output_digest,
        "duration_seconds": _rounded(step.duration),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


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
                "duration_seconds": _rounded(total_duration(view)),
            }

        return {
            "left": side(self.left),
            "right": side(self.right),
            "same_input": self.same_input,
            "steps": [d.as_json() for d in self.steps],
            "only_left": list(self.only_left),
            "only_right": list(self.only_right),
        }


def diff_sagas(coord: Coordinator, left_id: str, right_id: str) -> SagaDiff:
    """Step by step, where two runs differ: digests of inputs and outputs, and timing."""
    left = get_saga(coord, left_id)
    right = get_saga(coord, right_id)
    names = [s.name for s in left.steps]
    names += [s.name for s in right.steps if s.name not in names]
    return SagaDiff(left, right, tuple(StepDiff(n, _find(left, n), _find(right, n)) for n in names))


def _find(view: SagaView, name: str) -> StepView | None:
    return next((s for s in view.steps if s.name == name), None)


# -- operator actions -------------------------------------------------------------------------


def compensate(coord: Coordinator, saga_id: str) -> SagaView:
    """Unwind a saga now (refused past its pivot and once it finished)."""
    return coord.compensate(parse_saga_id(saga_id))


def resume(coord: Coordinator, saga_id: str) -> SagaView:
    """Carry a running declarative saga forward now (its definition must be known: --app)."""
    return coord.resume(parse_saga_id(saga_id))


def cancel(coord: Coordinator, saga_id: str) -> SagaView:
    """Ask a running saga to stop at its next step boundary and unwind."""
    return coord.cancel(parse_saga_id(saga_id))


def retry_compensation(coord: Coordinator, saga_id: str) -> SagaView:
    """Run the compensations of a ``failed`` saga again, with a fresh attempt budget."""
    saga_id = parse_saga_id(saga_id)
    _require_failed(get_saga(coord, saga_id), "retry-compensation")
    return coord.compensate(saga_id, action="retry-compensation")


def mark_compensated(coord: Coordinator, saga_id: str, step: str, reason: str) -> SagaView:
    """Record that an operator undid ``step`` by hand, then unwind the rest.

    For a saga that is ``failed`` because ``step``'s compensation kept
    failing: the operator fixed things outside saga and says so here. The
    step is recorded as compensated (with who, where and why), and the
    compensations of the steps below it run as ``retry-compensation`` would.
    """
    saga_id = parse_saga_id(saga_id)
    if not reason.strip():
        raise ConfigurationError("--reason must say what was done by hand; it is recorded")
    view = get_saga(coord, saga_id)
    _require_failed(view, "mark-compensated")
    definition = _definition(view)
    if view.kind == "declarative" and definition is None:
        raise UnknownSagaError(
            f"no definition of saga {view.name!r} in this process; pass --app MODULE"
        )
    record = coord.store.load(saga_id)
    assert record is not None
    _record_hand_undo(coord, saga_id, _undo_candidate(record, step, definition), reason)
    return coord.compensate(saga_id, action="continue after mark-compensated")


def _record_hand_undo(coord: Coordinator, saga_id: str, marked: StepRecord, reason: str) -> None:
    """Record ``marked`` as compensated by this operator, under a claim of the saga."""
    claim = Event("lease_claimed", detail={"owner": coord.owner, "why": "mark-compensated"})
    record = coord.store.claim(saga_id, coord.owner, coord.lease_ttl, claim)
    who = operator_detail()
    detail = {"action": "mark-compensated", "step": marked.name, "reason": reason, **who}
    marked_by = {"marked_by": f"{who['by']}@{who['host']}", "reason": reason}
    events = [
        Event("operator_action", detail=detail),
        Event("compensation_done", marked.name, marked.undo_attempt, marked_by),
    ]
    compensated = dataclasses.replace(marked, status=StepStatus.COMPENSATED)
    write = StepWrite(compensated, stamp="finished")
    # Released in the same transaction: the unwind that follows claims the saga
    # afresh, and a failed saga is never taken by a recoverer in between.
    change = dataclasses.replace(engine.commit(record, [write], events), release=True)
    coord.store.commit(change, coord.lease_ttl)


def _require_failed(view: SagaView, action: str) -> None:
    if view.status is not SagaStatus.FAILED:
        raise OperationRefusedError(
            view.id,
            f"saga {view.id} is {view.status.value}; {action} is the way out of 'failed' only",
        )
    if past_pivot(view):
        raise OperationRefusedError(
            view.id,
            f"saga {view.id} failed after its pivot step, so it cannot be compensated; "
            "fix the failing step's cause and finish it by hand",
        )


def _undo_candidate(record: SagaRecord, step: str, definition: Saga | None) -> StepRecord:
    """The recorded step ``step`` if it is still waiting to be compensated."""
    waiting = {s.name: s for s in engine.undo_stack(record) if _has_undo(s, definition)}
    if step in waiting:
        return waiting[step]
    names = ", ".join(waiting) or "none"
    if record.step(step) is None:
        raise UnknownSagaError(f"saga {record.id} has no step {step!r}; steps to undo: {names}")
    raise OperationRefusedError(
        record.id, f"step {step!r} of saga {record.id} has nothing to undo; steps to undo: {names}"
    )


def _has_undo(step: StepRecord, definition: Saga | None) -> bool:
    if definition is None:
        return step.compensation_ref is not None
    declared = definition.by_name(step.name)
    return declared is not None and declared.undo is not None


# -- recovery ---------------------------------------------------------------------------------


class Plan(enum.StrEnum):
    """What recovery does (or would do) with one saga."""

    RESUME = "resume"
    COMPENSATE = "compensate"
    CONTINUE = "continue-compensating"
    SKIP = "skip"


class Result(enum.StrEnum):
    """How recovery of one saga ended."""

    RESUMED = "resumed"
    COMPENSATED = "compensated"
    FAILED = "failed"
    SKIPPED = "skipped"
    PLANNED = "planned"  # --dry-run: nothing was done


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryItem:
    """One saga in a recovery run: the plan, and (unless dry) how it ended."""

    saga_id: str
    name: str
    plan: Plan
    result: Result
    status: SagaStatus | None = None
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.saga_id,
            "name": self.name,
            "plan": self.plan.value,
            "result": self.result.value,
            "status": _json_value(self.status),
            "reason": self.reason,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class RecoverySummary:
    dry_run: bool
    items: tuple[RecoveryItem, ...]

    def count(self, result: Result) -> int:
        return sum(1 for item in self.items if item.result is result)

    @property
    def ok(self) -> bool:
        return self.count(Result.FAILED) == 0

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "sagas": [item.as_json() for item in self.items],
            "summary": {result.value: self.count(result) for result in Result},
            "ok": self.ok,
        }


Progress = Callable[[RecoveryItem, int, int], None]
"""Called after each saga with (item, done, total)."""


def recover(
    coord: Coordinator,
    saga_ids: Sequence[str] = (),
    *,
    compensate: bool = False,
    dry_run: bool = False,
    limit: int | None = None,
    progress: Progress | None = None,
) -> RecoverySummary:
    """Claim and finish stuck sagas: the ones given, or every stuck one (oldest first).

    Each saga is claimed through its expired lease, so a live process's saga
    is skipped, and a saga another recoverer takes meanwhile is skipped too.
    With ``dry_run`` it only says what it would do.
    """
    if limit is not None and limit < 1:
        raise ConfigurationError(f"--limit must be at least 1, not {limit}")
    ids = list(dict.fromkeys(parse_saga_id(i) for i in saga_ids)) or stuck_ids(coord, limit)
    now = coord.store.now()
    plans = [_plan(coord, get_saga(coord, saga_id), compensate, now) for saga_id in ids[:limit]]
    items: list[RecoveryItem] = []
    for item in plans:
        items.append(item if dry_run or item.plan is Plan.SKIP else _carry_out(coord, item))
        if progress is not None:
            progress(items[-1], len(items), len(plans))
    return RecoverySummary(dry_run, tuple(items))


def stuck_ids(coord: Coordinator, limit: int | None = None, page: int = 200) -> list[str]:
    """Ids of every stuck saga (or the ``limit`` oldest), oldest first."""
    ids: list[str] = []
    before: str | None = None
    while True:
        views = coord.list(None, None, page, stuck=True, before=before)
        ids.extend(view.id for view in views)
        if len(views) < page:
            break
        before = views[-1].id
    ids.reverse()
    return ids if limit is None else ids[:limit]


def _plan(coord: Coordinator, view: SagaView, compensate: bool, now: float) -> RecoveryItem:
    def skip(reason: str) -> RecoveryItem:
        return RecoveryItem(view.id, view.name, Plan.SKIP, Result.SKIPPED, view.status, reason)

    if view.status is SagaStatus.FAILED:
        return skip("failed: needs `saga retry-compensation` or `saga mark-compensated`")
    if view.status.is_terminal:
        return skip(f"already {view.status.value}")
    left = lease_left(view, now)
    if view.owner is not None and left is not None and left > 0:
        return skip(f"not stuck: {view.owner} holds it (lease live {human_duration(left)} more)")
    plan, problem = _decide(coord, view, compensate)
    if problem is not None:
        return skip(problem)
    return RecoveryItem(view.id, view.name, plan, Result.PLANNED, view.status)


def _decide(coord: Coordinator, view: SagaView, compensate: bool) -> tuple[Plan, str | None]:
    """The coordinator's recovery rule, predicted; and what would stop it, if anything."""
    definition = _definition(view)
    if view.kind == "declarative" and definition is None:
        return Plan.SKIP, f"no definition of saga {view.name!r} here; pass --app MODULE"
    if view.status is SagaStatus.COMPENSATING:
        plan = Plan.CONTINUE
    elif definition is None:  # a context-manager saga: only its own code goes forward
        plan = Plan.COMPENSATE
    elif past_pivot(view):
        plan = Plan.RESUME
    elif compensate or definition.on_crash == "compensate" or view.cancel_requested:
        plan = Plan.COMPENSATE
    else:
        plan = Plan.RESUME
    if plan is not Plan.RESUME and definition is None:
        return plan, _untrusted(coord, view)
    return plan, None


def _untrusted(coord: Coordinator, view: SagaView) -> str | None:
    """Why a context-manager saga's compensations could not be run here, if they could not."""
    for step in view.steps:
        if step.compensation is None or step.status is StepStatus.COMPENSATED:
            continue
        try:
            coord.resolver.resolve(step.compensation)
        except UnsafeReferenceError:
            module = step.compensation.partition(":")[0]
            return f"compensation {step.compensation} is not trusted here; pass --app {module}"
    return None


def _carry_out(coord: Coordinator, item: RecoveryItem) -> RecoveryItem:
    try:
        outcome = coord.recover_saga(item.saga_id, compensate=item.plan is Plan.COMPENSATE)
    except SagaBusyError as busy:
        return dataclasses.replace(item, result=Result.SKIPPED, reason=f"taken meanwhile: {busy}")
    if outcome.error is not None:
        return dataclasses.replace(item, result=Result.FAILED, reason=outcome.error)
    status = outcome.status
    if status is SagaStatus.COMPLETED:
        return dataclasses.replace(item, result=Result.RESUMED, status=status)
    if status in (SagaStatus.COMPENSATED, SagaStatus.CANCELLED):
        return dataclasses.replace(item, result=Result.COMPENSATED, status=status)
    reason = "a compensation failed for good; see `saga show` and `saga history`"
    return dataclasses.replace(item, result=Result.FAILED, status=status, reason=reason)


# -- worker -----------------------------------------------------------------------------------


@dataclasses.dataclass
class WorkerStats:
    passes: int = 0
    recovered: int = 0
    errors: int = 0


def run_worker(
    coord: Coordinator,
    stop: threading.Event,
    *,
    interval: float = 5.0,
    batch: int = 20,
    log: Callable[[str], None] = print,
) -> WorkerStats:
    """Recover stuck sagas every ``interval`` seconds until ``stop`` is set.

    Several workers may share a database: claims skip what another holds.
    The stop flag is checked between sagas, so a worker that is told to stop
    finishes the saga in hand (leaving nothing claimed) and returns. While the
    database is unreachable it backs off (tenacity) and logs one line a try.
    """
    if interval <= 0 or batch < 1:
        raise ConfigurationError("--interval must be positive and --batch at least 1")
    stats = WorkerStats()
    log(f"worker {coord.owner} recovering on {coord.store.url} every {human_duration(interval)}")
    while not stop.is_set():
        handled = _pass_with_backoff(coord, stop, interval, batch, log, stats)
        stats.passes += 1
        if handled < batch:  # caught up: rest; a full batch means more may be waiting
            stop.wait(interval)
    log(f"worker {coord.owner} stopped after recovering {stats.recovered} saga(s)")
    return stats


def _pass_with_backoff(
    coord: Coordinator,
    stop: threading.Event,
    interval: float,
    batch: int,
    log: Callable[[str], None],
    stats: WorkerStats,
) -> int:
    def tell(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log(f"database unavailable ({error}); retrying in {wait:.1f}s")

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(StorageError),
        wait=tenacity.wait_exponential_jitter(initial=interval, max=max(60.0, interval)),
        stop=lambda _state: stop.is_set(),
        sleep=lambda seconds: _pause(stop, seconds),
        before_sleep=tell,
        reraise=True,
    )
    try:
        return retrying(_recovery_pass, coord, stop, batch, log, stats)
    except StorageError:
        if stop.is_set():
            return 0
        raise


def _pause(stop: threading.Event, seconds: float) -> None:
    """Sleep, but wake at once when a stop is requested."""
    stop.wait(seconds)


def _recovery_pass(
    coord: Coordinator,
    stop: threading.Event,
    batch: int,
    log: Callable[[str], None],
    stats: WorkerStats,
) -> int:
    """Recover up to ``batch`` sagas one at a time, so a stop request waits for one saga only."""
    handled = 0
    while handled < batch and not stop.is_set():
        outcomes = coord.recover(limit=1).outcomes
        if not outcomes:
            break
        outcome = outcomes[0]
        handled += 1
        if outcome.error is None:
            stats.recovered += 1
            log(f"saga {outcome.saga_id} ({outcome.name}): {_json_value(outcome.status)}")
            continue
        stats.errors += 1
        log(f"saga {outcome.saga_id} ({outcome.name}) not recovered: {outcome.error}")
        # A refused saga is released for a better-equipped process and is
        # claimable again at once: wait for the next pass rather than spin on it.
        break
    return handled


# -- purge --------------------------------------------------------------------------------------


def purge(
    coord: Coordinator,
    *,
    older_than: float,
    statuses: Sequence[SagaStatus] = (SagaStatus.COMPLETED, SagaStatus.COMPENSATED),
    batch: int = 500,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete finished sagas created more than ``older_than`` seconds ago; return how many.

    Their steps and events go with them, so a key used again afterwards
    starts a fresh saga.
    """
    unfinished = [s.value for s in statuses if s not in FINISHED]
    if unfinished or not statuses:
        raise ConfigurationError(
            f"purge deletes finished sagas only (completed, compensated, cancelled), not "
            f"{', '.join(unfinished) or 'nothing'}; a failed saga needs retry-compensation or "
            "mark-compensated first"
        )
    delete = getattr(coord.store, "delete", None)
    if delete is None:
        raise ConfigurationError(f"the store at {coord.store.url} cannot delete sagas")
    query = ListQuery(status=tuple(statuses), older_than=older_than, limit=batch)
    total = 0
    while True:
        ids = [record.id for record in coord.store.list(query)]
        deleted = int(delete(ids)) if ids else 0
        total += deleted
        if progress is not None and deleted:
            progress(total)
        if deleted == 0:
            return total


# -- schema -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaStatus:
    url: str
    version: int | None
    expected: int | None

    @property
    def up_to_date(self) -> bool:
        return self.version is not None and self.version == self.expected

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "version": self.version,
            "expected": self.expected,
            "up_to_date": self.up_to_date,
        }


def schema_status(coord: Coordinator) -> SchemaStatus:
    """The schema version recorded in the database (None: no tables yet)."""
    return SchemaStatus(coord.store.url, coord.store.schema_version(), _expected_version())


def upgrade_schema(coord: Coordinator) -> SchemaStatus:
    """Create the tables, or migrate them to the version this code expects."""
    coord.store.create_schema()
    return schema_status(coord)


def _expected_version() -> int | None:
    # Looked up only when asked for: the core never imports an adapter eagerly.
    tables = importlib.import_module("saga.adapters.sql.tables")
    version = getattr(tables, "SCHEMA_VERSION", None)
    return version if isinstance(version, int) else None
