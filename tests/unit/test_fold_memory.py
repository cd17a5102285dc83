"""When PostgreSQL's writer may leave a commit's write-back of folded events out
(adapters/sql/fold_memory.py): only when every step row it updates was last written by
this process at the saga's epoch and keeps what it holds. Each rule of the SQL's own
check (folding.py, ``kept``) is a case here, since the engine rarely reaches some."""

from __future__ import annotations

from saga.adapters.sql import folding
from saga.adapters.sql.fold_memory import FoldMemory

from saga._internal.ports import Commit, Event, StepRecord, StepWrite
from saga._internal.record import Stamp
from saga._internal.status import StepStatus


def _write(
    seq: int, attempt: int, stamp: Stamp, status: StepStatus, new: bool = False
) -> StepWrite:
    return StepWrite(StepRecord(f"s{seq}", seq, status, attempt), new=new, stamp=stamp)


START = _write(1, 1, "started", StepStatus.RUNNING, new=True)
SUCCEED = _write(1, 1, "finished", StepStatus.SUCCEEDED)
COMPENSATE = _write(1, 1, None, StepStatus.COMPENSATING)
RETRY = _write(1, 2, "started", StepStatus.RUNNING)
FAIL = _write(1, 1, "finished", StepStatus.FAILED)


def _commit(*writes: StepWrite, epoch: int = 1, release: bool = False) -> Commit:
    """A commit of ``writes`` with the events a forward run writes with them (folded)."""
    return Commit("saga-1", epoch, steps=writes, events=_events(writes), release=release)


def _events(writes: tuple[StepWrite, ...]) -> tuple[Event, ...]:
    events = []
    for write in writes:
        if write.stamp == "started":
            events.append(Event("step_started", write.step.name, write.step.attempt))
        elif write.step.status is StepStatus.SUCCEEDED:
            events.append(Event("step_succeeded", write.step.name, write.step.attempt))
    return tuple(events)


def _landed(memory: FoldMemory, change: Commit) -> None:
    """As the writer does: ask before sending, remember once it committed."""
    memory.writes_back(change)
    memory.landed(change, folding.folds(change)[0])


def test_a_row_this_process_never_wrote_is_written_back() -> None:
    assert FoldMemory().writes_back(_commit(SUCCEED))


def test_finishing_the_attempt_this_process_started_writes_nothing_back() -> None:
    memory = FoldMemory()
    _landed(memory, _commit(START))
    assert not memory.writes_back(_commit(SUCCEED))


def test_a_new_attempt_a_new_start_or_another_epoch_is_written_back() -> None:
    for later in (_commit(RETRY), _commit(_write(1, 1, "started", StepStatus.RUNNING))):
        memory = FoldMemory()
        _landed(memory, _commit(START))
        assert memory.writes_back(later)
    memory = FoldMemory()
    _landed(memory, _commit(START))
    assert memory.writes_back(_commit(SUCCEED, epoch=2))


def test_finishing_again_a_row_holding_a_folded_success_writes_it_back() -> None:
    memory = FoldMemory()
    _landed(memory, _commit(START))
    _landed(memory, _commit(SUCCEED))
    assert not memory.writes_back(_commit(COMPENSATE))  # no stamp: the success is kept


def test_a_row_whose_success_may_be_folded_is_written_back_when_finished_again() -> None:
    memory = FoldMemory()
    _landed(memory, _commit(START))
    _landed(memory, _commit(SUCCEED))
    assert memory.writes_back(_commit(FAIL))
    memory = FoldMemory()
    _landed(memory, _commit(START))
    _landed(memory, _commit(COMPENSATE))  # unknown to the memory whether it holds one
    assert memory.writes_back(_commit(FAIL))


def test_a_commit_not_known_to_have_landed_leaves_its_rows_unknown() -> None:
    memory = FoldMemory()
    _landed(memory, _commit(START))
    memory.writes_back(_commit(COMPENSATE))  # sent; its outcome never known
    assert memory.writes_back(_commit(COMPENSATE))


def test_a_released_saga_and_the_oldest_beyond_capacity_are_forgotten() -> None:
    memory = FoldMemory()
    _landed(memory, _commit(START))
    _landed(memory, _commit(epoch=1, release=True))
    assert memory.writes_back(_commit(SUCCEED))
    small = FoldMemory(capacity=1)
    _landed(small, _commit(START))
    _landed(small, Commit("saga-2", 1, steps=(START,), events=_events((START,))))
    assert small.writes_back(_commit(SUCCEED))
    assert not small.writes_back(Commit("saga-2", 1, steps=(SUCCEED,)))
