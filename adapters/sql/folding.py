"""Events folded into the rows that say what they say (schema revisions 0006, 0007).

Of a happy 3-step saga's 8 history events, 6 are a step's ``step_started`` and
``step_succeeded``, and the step row says everything they say: the step's name and
attempt, and the time (``started_at``, ``finished_at``, stamped by the same commit).
PostgreSQL's writer leaves those rows out and records on the step row the ids they hold
in the history (``started_event``, ``finished_event``, drawn from the events' own
sequence in the commit's order) and the epoch they were written at (``fold_epoch``);
the history (:func:`history`) reads them back in their place. A third fewer bytes per
finished saga, and two fewer index entries per step (docs/performance.md).

A folded event must stay what it was. It is written back as a row of its own, with
its id, before a change to the step row would alter it: a new attempt or a start
stamped again, a finish stamped again (for the success), or a commit of another
epoch. PostgreSQL's writer does that inside the commit's statement (unless the process
knows there is nothing to write back, :mod:`.fold_memory`); the portable path
(operators' verbs, transactional steps) writes back every folded event of a step row
it updates (:func:`unfold`). SQLite's writer folds nothing.

A saga's ``saga_started`` and ``saga_completed`` fold into its own row the same way
(revision 0007; :func:`saga_folds`): the two event rows a finished saga kept are gone
too. Nothing ever alters what they say, so they are never written back: the start's
time is ``created_at``, its epoch the first (1: every saga is created at it), and the
module it names (``started_module``) is set once; the completion has its own time
(``finished_at``), and its epoch is the row's, which only a claim changes, and a
completed saga is never claimed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    Connection,
    Select,
    and_,
    case,
    insert,
    literal,
    null,
    select,
    union_all,
    update,
)

from saga._internal.ports import Commit, Event, EventRecord, StepWrite
from saga._internal.status import SagaStatus, StepStatus

from . import tables as t
from .rows import event_record

STARTED, SUCCEEDED = "step_started", "step_succeeded"
SAGA_STARTED, SAGA_COMPLETED = "saga_started", "saga_completed"
_FIRST_EPOCH = 1


class SagaFolds(NamedTuple):
    """Where a commit's saga start and completion fold into the saga row: their positions
    (1-based, in ``change.events``; None: not folded) and the module the start names."""

    start: int | None = None
    module: str | None = None
    finish: int | None = None


NOTHING_INTO_SAGA = SagaFolds()


def saga_folds(change: Commit, creates: bool) -> SagaFolds:
    """What of ``change`` folds into its saga row: the start of a saga it ``creates`` (at
    the first epoch, naming no module or a plain one), the completion of a saga it
    completes (without detail)."""
    starts = creates and change.epoch == _FIRST_EPOCH
    completes = change.status is SagaStatus.COMPLETED
    if not (starts or completes):  # most commits: nothing to look for
        return NOTHING_INTO_SAGA
    start = module = finish = None
    for position, event in enumerate(change.events, 1):
        if event.kind == SAGA_STARTED and starts and start is None:
            foldable, named = _named_module(event.detail)
            start, module = (position, named) if foldable else (None, None)
        elif event.kind == SAGA_COMPLETED and completes and event.detail is None:
            finish = position if finish is None else finish
    return SagaFolds(start, module, finish)


def _named_module(detail: dict[str, Any] | None) -> tuple[bool, str | None]:
    """Whether a start's ``detail`` folds, and the module it names: none, or a module
    name alone (ASCII identifiers and dots, so that :func:`_start_detail` writes its JSON
    exactly as the writer would)."""
    if detail is None:
        return True, None
    module = detail.get("module")
    if detail.keys() != {"module"} or not isinstance(module, str) or not module.isascii():
        return False, None
    return all(part.isidentifier() for part in module.split(".")), module


def folds(
    change: Commit, saga: SagaFolds = NOTHING_INTO_SAGA
) -> tuple[list[tuple[int | None, int | None]], list[int]]:
    """Which of ``change``'s events fold into which of its step writes: for each step
    write, the positions (1-based, in ``change.events``) of its folded start and
    success events (None: none); and the positions of the events written as rows (not
    those ``saga`` folds into the saga row)."""
    folded: dict[int, int] = {}  # event position -> step write index
    started: list[int | None] = [None] * len(change.steps)
    finished: list[int | None] = [None] * len(change.steps)
    writes = _by_attempt(change.steps)
    for position, event in enumerate(change.events, 1):
        index = _folds_into(event, writes.get((event.step, event.attempt), ()), change.steps)
        if index is None:
            continue
        slots = started if event.kind == STARTED else finished
        if slots[index] is None:
            slots[index] = position
            folded[position] = index
    into_saga = (saga.start, saga.finish)
    rows = [
        position
        for position in range(1, len(change.events) + 1)
        if position not in folded and position not in into_saga
    ]
    return list(zip(started, finished, strict=True)), rows


def _by_attempt(writes: Sequence[StepWrite]) -> dict[tuple[str | None, int | None], list[int]]:
    """The indexes of ``writes`` by step name and attempt, in order: a commit of a large
    saga's parallel steps holds many writes and as many events, so each event looks up
    its own writes instead of reading them all."""
    found: dict[tuple[str | None, int | None], list[int]] = {}
    for index, write in enumerate(writes):
        found.setdefault((write.step.name, write.step.attempt), []).append(index)
    return found


def _folds_into(event: Event, candidates: Iterable[int], writes: Sequence[StepWrite]) -> int | None:
    """The index, among ``candidates`` (the writes of the event's step and attempt), of
    the step write ``event`` can fold into, if any: a start without detail, into a write
    that stamps the step started; a success without detail, into an update that stamps
    it finished and succeeded (a new row's finish time is not stamped: a row is inserted
    started)."""
    if event.detail is not None or event.kind not in (STARTED, SUCCEEDED):
        return None
    started = event.kind == STARTED
    for index in candidates:
        write = writes[index]
        if started and write.stamp == "started":
            return index
        succeeded = write.step.status is StepStatus.SUCCEEDED
        if write.stamp == "finished" and not write.new and succeeded:
            return index
    return None


def _start_detail() -> Any:
    """The folded start's detail as the writer's JSON text: ``{"module": "..."}``."""
    module = t.instances.c.started_module
    return case((module.is_(None), null()), else_=literal('{"module": "') + module + '"}')


def _saga_folded(saga_id: str) -> tuple[Select[Any], Select[Any]]:
    """The saga's folded start and completion, as :func:`history` reads event rows."""
    i = t.instances.c
    started = _saga_event(i.started_event, i.created_at, SAGA_STARTED, literal(_FIRST_EPOCH))
    finished = _saga_event(i.finished_event, i.finished_at, SAGA_COMPLETED, i.epoch)
    return (
        started.add_columns(_start_detail().label("detail")).where(i.id == saga_id),
        finished.add_columns(null().label("detail")).where(i.id == saga_id),
    )


def _saga_event(id_column: Any, at_column: Any, kind: str, epoch: Any) -> Select[Any]:
    i = t.instances.c
    return select(
        id_column.label("id"),
        i.id.label("saga_id"),
        at_column.label("at"),
        literal(kind).label("kind"),
        null().label("step"),
        null().label("attempt"),
        epoch.label("epoch"),
    ).where(id_column.is_not(None))


def _folded(id_column: Any, at_column: Any, kind: str) -> Select[Any]:
    s = t.steps.c
    return select(
        id_column.label("id"),
        s.saga_id,
        at_column.label("at"),
        literal(kind).label("kind"),
        s.name.label("step"),
        s.attempt,
        s.fold_epoch.label("epoch"),
        null().label("detail"),
    ).where(id_column.is_not(None))


def _both_folded() -> tuple[Select[Any], Select[Any]]:
    s = t.steps.c
    return (
        _folded(s.started_event, s.started_at, STARTED),
        _folded(s.finished_event, s.finished_at, SUCCEEDED),
    )


def history(connection: Connection, saga_id: str) -> list[EventRecord]:
    """The saga's history, oldest first: its event rows and its folded events (its steps'
    and its own), in one statement (one snapshot: an event written back meanwhile is
    never seen twice)."""
    e = t.events.c
    rows = select(e.id, e.saga_id, e.at, e.kind, e.step, e.attempt, e.epoch, e.detail)
    started, finished = _both_folded()
    s = t.steps.c
    every = union_all(
        rows.where(e.saga_id == saga_id),
        started.where(s.saga_id == saga_id),
        finished.where(s.saga_id == saga_id),
        *_saga_folded(saga_id),
    ).subquery()
    found = connection.execute(select(every).order_by(every.c.id)).all()
    return [event_record(row) for row in found]


def unfold(connection: Connection, saga_id: str, seq: int) -> None:
    """Write step ``seq``'s folded events back as rows, with their ids, and clear them
    from its row: the portable path's update of that row may change what they say."""
    s = t.steps.c
    mine = and_(s.saga_id == saga_id, s.seq == seq)
    started, finished = _both_folded()
    back = union_all(started.where(mine), finished.where(mine))
    columns = ["id", "saga_id", "at", "kind", "step", "attempt", "epoch", "detail"]
    written = connection.execute(insert(t.events).from_select(columns, back))
    if written.rowcount:
        cleared = {"started_event": None, "finished_event": None, "fold_epoch": None}
        connection.execute(update(t.steps).where(mine).values(cleared))
