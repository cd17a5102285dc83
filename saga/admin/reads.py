"""The read use cases: ``saga list``, ``show``, ``history`` and ``diff``.

Each takes a coordinator and returns a record of :mod:`saga.admin.results`;
none of them changes anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from saga._internal.coordinator import Coordinator
from saga._internal.definition import Saga, defined_versions
from saga._internal.errors import ConfigurationError
from saga._internal.policy import describe_retry_on
from saga._internal.ports import DEFAULT_LIST_LIMIT, EventRecord, ListQuery
from saga._internal.status import SagaStatus, StepKind, StepStatus, statuses_of
from saga._internal.views import SagaView, StepView, view_of
from saga._internal.wording import describe_event as describe_event
from saga.admin.inputs import SagaRef, definition_of, get_saga
from saga.admin.results import (
    RetryWait,
    SagaDetail,
    SagaDiff,
    SagaPage,
    StepDiff,
    Timeline,
    TimelineEntry,
)
from saga.admin.unrunnable import unrunnable_here


def list_sagas(
    coord: Coordinator,
    *,
    statuses: Sequence[SagaStatus] = (),
    name: str | None = None,
    stuck: bool = False,
    older_than: float | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
    before: str | None = None,
    key: str | None = None,
    key_prefix: str | None = None,
    step: str | None = None,
) -> SagaPage:
    """Sagas matching every filter given, newest first, at most ``limit``: ``key_prefix``
    matches the start of a key exactly, ``step`` the current step (the one a page shows).

    The views carry no payloads: a page shows none of them, and a saga's results may
    weigh megabytes, so their ``input``, step ``result``, ``args`` and ``error`` are None
    (``show_saga`` or ``coord.get`` reads them)."""
    if limit < 1:
        raise ConfigurationError(f"--limit must be at least 1, not {limit}")
    if before is not None:
        before = get_saga(coord, before).id  # an unknown anchor is an error, not []
    query = ListQuery(
        status=statuses_of(statuses or None),
        name=name,
        key=key,
        key_prefix=key_prefix,
        step=step,
        stuck=stuck,
        before=before,
        older_than=older_than,
        limit=limit,
        payloads=False,
    )
    views = tuple(view_of(record) for record in coord.store.list(query))
    notes = unrunnable_here(coord, views) if stuck else {}
    return SagaPage(views, coord.store.now(), limit, notes)


def status_counts(coord: Coordinator, cap: int | None = None) -> dict[SagaStatus, int]:
    """How many sagas are in each status, every status listed (zero when none). With
    ``cap``, a count over ``cap`` reads ``cap + 1`` (show it as "more than cap")."""
    counts = coord.store.status_counts(cap)
    return {status: counts.get(status, 0) for status in SagaStatus}


def show_saga(coord: Coordinator, saga_id: SagaRef) -> SagaDetail:
    """The saga with what an operator needs to judge it (``saga show``)."""
    return show_with_history(coord, saga_id)[0]


def show_with_history(coord: Coordinator, saga_id: SagaRef) -> tuple[SagaDetail, Timeline]:
    """``show_saga`` and ``saga_history`` together, reading the saga and its events once
    (the web console's saga page shows both)."""
    view = get_saga(coord, saga_id)
    events = coord.store.events(view.id)
    return _detail(coord, view, events), Timeline(view, timeline(events))


def _detail(coord: Coordinator, view: SagaView, events: Sequence[EventRecord]) -> SagaDetail:
    definition = definition_of(view)
    recorded = {s.name for s in view.steps}
    pending: tuple[str, ...] = ()
    pivot = next((s.name for s in view.steps if s.kind is StepKind.PIVOT), None)
    if definition is not None:
        pending = tuple(s.name for s in definition.order() if s.name not in recorded)
        declared = (s.name for s in definition.steps if s.kind is StepKind.PIVOT)
        pivot = pivot or next(declared, None)
    retry_on = {} if definition is None else retry_classes(definition, [*recorded, *pending])
    return SagaDetail(
        view,
        coord.store.now(),
        pending,
        pivot,
        undo_notes(events),
        retry_on,
        None if definition is not None else retry_unknown(view),
        retry_waits(view, events),
    )


def retry_waits(view: SagaView, events: Sequence[EventRecord]) -> dict[str, RetryWait]:
    """The running steps whose latest attempt failed and whose next has not started: a
    step's last forward event is then the ``attempt_failed`` of its current attempt."""
    last: dict[str, EventRecord] = {}
    for event in events:
        if event.step is not None and event.kind in _ATTEMPT_KINDS:
            last[event.step] = event
    waits: dict[str, RetryWait] = {}
    for step in view.steps:
        failed = last.get(step.name)
        if failed is None:
            continue
        if step.status is StepStatus.RUNNING and failed.kind == "attempt_failed":
            if failed.attempt == step.attempt:
                waits[step.name] = RetryWait(failed)
        elif step.status is StepStatus.COMPENSATING and _handed_back(failed):
            waits[step.name] = RetryWait(failed)  # its compensation waits for a worker
    return waits


_ATTEMPT_KINDS = (
    "step_started",
    "attempt_failed",
    "compensation_started",
    "compensation_attempt_failed",
)


def _handed_back(event: EventRecord) -> bool:
    """A compensation's failed attempt recorded with the wait to its next one: the
    saga was handed back for that wait (one recorded with the next start has none)."""
    return event.kind == "compensation_attempt_failed" and "delay" in (event.detail or {})


def retry_classes(definition: Saga, names: Sequence[str]) -> dict[str, str]:
    """Which errors each named step's action is retried on, by the definition this
    process loaded: what a recovery run from here would do."""
    declared = {step.name: step for step in definition.steps}
    return {
        name: describe_retry_on(declared[name].retry.retry_on)
        if name in declared
        else "not known here: no such step in the loaded definition"
        for name in names
    }


def retry_unknown(view: SagaView) -> str:
    """Why this process cannot tell a saga's retry policies: they are not recorded, only
    declared in code, and this code is not here (or has no code to declare them in)."""
    if view.kind != "declarative":
        return "not known here: context-manager saga (its own code sets them)"
    if defined_versions(view.name):
        return f"not known here: version {view.version or 1} of the saga not loaded"
    return "not known here: saga definition not loaded"


def undo_notes(events: Sequence[EventRecord]) -> dict[str, str]:
    """Why a step was settled without its action or compensation saying so ("nothing to
    undo: no compensation", "its transaction never committed: nothing happened", an
    operator's mark-step reason), from its last such event, by step name."""
    notes: dict[str, str] = {}
    for event in events:
        if event.kind not in ("compensation_done", "step_failed") or event.step is None:
            continue
        reason = (event.detail or {}).get("reason")
        if reason:
            notes[event.step] = str(reason)
        else:
            notes.pop(event.step, None)
    return notes


# -- history ----------------------------------------------------------------------------------

_END_OF = {
    "step_succeeded": "step_started",
    "step_failed": "step_started",
    "step_in_doubt": "step_started",
    "attempt_failed": "step_started",
    "compensation_done": "compensation_started",
    "compensation_attempt_failed": "compensation_started",
    "compensation_failed": "compensation_started",
}


def saga_history(coord: Coordinator, saga_id: SagaRef) -> Timeline:
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


# -- diff -------------------------------------------------------------------------------------


def diff_sagas(coord: Coordinator, left_id: str, right_id: str) -> SagaDiff:
    """Step by step, where two runs differ: digests of inputs and outputs, and timing."""
    left = get_saga(coord, left_id)
    right = get_saga(coord, right_id)
    names = [s.name for s in left.steps]
    names += [s.name for s in right.steps if s.name not in names]
    return SagaDiff(left, right, tuple(StepDiff(n, _find(left, n), _find(right, n)) for n in names))


def _find(view: SagaView, name: str) -> StepView | None:
    return next((s for s in view.steps if s.name == name), None)
