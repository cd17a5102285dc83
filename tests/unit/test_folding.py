"""Which events of a commit fold into which of its step writes (adapters/sql/folding.py),
on commits of the size a large saga's parallel steps make, where each event finds its
step's writes by name and attempt instead of reading every write."""

from __future__ import annotations

from saga.adapters.sql import folding

from saga import SagaStatus, StepStatus
from saga._internal.ports import Commit, Event, StepRecord, StepWrite
from saga._internal.record import Stamp

WIDTH = 6  # above pg_writer.SMALL: the commit's rows travel as arrays


def _write(name: str, seq: int, status: StepStatus, stamp: Stamp, new: bool = False) -> StepWrite:
    return StepWrite(StepRecord(name, seq, status, 1), new=new, stamp=stamp)


def test_each_event_of_a_wide_commit_folds_into_its_own_step() -> None:
    finished = [
        _write(f"a{i}", i + 1, StepStatus.SUCCEEDED, stamp="finished") for i in range(WIDTH)
    ]
    started = [
        _write(f"b{i}", WIDTH + i + 1, StepStatus.RUNNING, new=True, stamp="started")
        for i in range(WIDTH)
    ]
    # the successes in the opposite order to their writes, the starts interleaved
    events: list[Event] = []
    for i in reversed(range(WIDTH)):
        events += [Event("step_succeeded", f"a{i}", 1), Event("step_started", f"b{i}", 1)]
    change = Commit("saga-1", 1, steps=(*finished, *started), events=(*events, Event("x")))
    slots, rows = folding.folds(change)
    for i in range(WIDTH):
        position = 2 * (WIDTH - 1 - i) + 1  # 1-based, of a{i}'s success
        assert slots[i] == (None, position)
        assert slots[WIDTH + i] == (position + 1, None)
    assert rows == [len(events) + 1]  # only the event no step row can say


def test_an_event_folds_only_into_its_own_attempt_and_only_once() -> None:
    again = StepWrite(StepRecord("a", 1, StepStatus.RUNNING, 2), stamp="started")
    change = Commit(
        "saga-1",
        1,
        steps=(again,),
        events=(
            Event("step_started", "a", 1),  # another attempt: a row of its own
            Event("step_started", "a", 2),
            Event("step_started", "a", 2),  # a second start of the same write: a row
            Event("step_started", "a", 2, detail={"why": "x"}),  # a detail: a row
        ),
    )
    slots, rows = folding.folds(change)
    assert slots == [(2, None)]
    assert rows == [1, 3, 4]


def _saga_commit(*events: Event, status: SagaStatus | None = None, epoch: int = 1) -> Commit:
    return Commit("saga-1", epoch, events=events, status=status)


def test_a_new_saga_folds_its_start_naming_no_module_or_a_plain_one() -> None:
    plain = Event("saga_started", detail={"module": "shop.flows_2"})
    assert folding.saga_folds(_saga_commit(plain), creates=True) == (1, "shop.flows_2", None)
    bare = _saga_commit(Event("step_started", "a", 1), Event("saga_started"))
    assert folding.saga_folds(bare, creates=True) == (2, None, None)
    _, rows = folding.folds(bare, folding.saga_folds(bare, creates=True))
    assert rows == [1]  # the folded start is no row; the step start has no write here


def test_a_start_whose_detail_its_json_could_not_rebuild_stays_a_row() -> None:
    for detail in (
        {"module": "shop.flöws"},  # not ASCII: the writer's JSON escapes it
        {"module": 'shop"x'},  # a quote: the JSON would need escaping
        {"module": "shop..flows"},
        {"module": "shop", "other": 1},  # more than the module
        {"module": 7},
    ):
        change = _saga_commit(Event("saga_started", detail=detail))
        assert folding.saga_folds(change, creates=True).start is None, detail
    plain = _saga_commit(Event("saga_started"))
    assert folding.saga_folds(plain, creates=False).start is None  # not a creation
    assert (
        folding.saga_folds(_saga_commit(Event("saga_started"), epoch=2), creates=True).start is None
    )


def test_only_a_completing_commit_folds_its_completion_without_detail() -> None:
    done = Event("saga_completed")
    completing = _saga_commit(Event("step_succeeded", "a", 1), done, status=SagaStatus.COMPLETED)
    assert folding.saga_folds(completing, creates=False) == (None, None, 2)
    assert folding.saga_folds(_saga_commit(done), creates=False).finish is None  # no status
    compensated = _saga_commit(done, status=SagaStatus.COMPENSATED)
    assert folding.saga_folds(compensated, creates=False).finish is None
    detailed = _saga_commit(
        Event("saga_completed", detail={"by": "x"}), status=SagaStatus.COMPLETED
    )
    assert folding.saga_folds(detailed, creates=False).finish is None
    twice = _saga_commit(done, done, status=SagaStatus.COMPLETED)
    assert folding.folds(twice, folding.saga_folds(twice, creates=False))[1] == [2]
