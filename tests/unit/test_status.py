"""Statuses and the state machine: only legal moves are possible."""

from __future__ import annotations

import itertools

import pytest

from saga import IllegalTransitionError, SagaStatus, StepStatus
from saga._internal.status import check_saga_move, check_step_move

S = SagaStatus
T = StepStatus

LEGAL_SAGA_MOVES = {
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.COMPENSATING),
    (S.RUNNING, S.FAILED),
    (S.COMPENSATING, S.COMPENSATED),
    (S.COMPENSATING, S.CANCELLED),
    (S.COMPENSATING, S.FAILED),
    (S.FAILED, S.COMPENSATING),
    (S.FAILED, S.RUNNING),  # saga retry: forward again past the pivot
    (S.RUNNING, S.PAUSED),  # an operator's pause, or a step's on_exhausted="pause"
    (S.PAUSED, S.RUNNING),  # resumed
    (S.PAUSED, S.COMPENSATING),  # an operator unwinds it instead
}

LEGAL_STEP_MOVES = {
    (T.PENDING, T.RUNNING),
    (T.PENDING, T.SKIPPED),
    (T.RUNNING, T.RUNNING),
    (T.RUNNING, T.SKIPPED),
    (T.RUNNING, T.SUCCEEDED),
    (T.RUNNING, T.FAILED),
    (T.RUNNING, T.IN_DOUBT),  # given up without ever learning the outcome
    (T.RUNNING, T.COMPENSATING),
    (T.SUCCEEDED, T.COMPENSATING),
    (T.FAILED, T.COMPENSATING),
    (T.FAILED, T.RUNNING),  # parked by a pause, run again on resume
    (T.IN_DOUBT, T.RUNNING),  # likewise
    (T.IN_DOUBT, T.COMPENSATING),
    (T.IN_DOUBT, T.FAILED),  # an operator says it did not happen
    (T.FAILED, T.RUNNING),  # saga retry runs the failed step again
    (T.IN_DOUBT, T.RUNNING),
    (T.FAILED, T.SUCCEEDED),  # saga skip: done by hand, its result recorded
    (T.IN_DOUBT, T.SUCCEEDED),
    (T.SUCCEEDED, T.RUNNING),  # saga retry --from: the chosen step runs again
    (T.SUCCEEDED, T.PENDING),  # ... and the steps after it wait their turn again
    (T.FAILED, T.PENDING),
    (T.IN_DOUBT, T.PENDING),
    (T.COMPENSATING, T.COMPENSATING),
    (T.COMPENSATING, T.COMPENSATED),
}


@pytest.mark.parametrize(("old", "new"), sorted(LEGAL_SAGA_MOVES))
def test_legal_saga_moves_pass(old: SagaStatus, new: SagaStatus) -> None:
    check_saga_move("s", old, new)


@pytest.mark.parametrize("status", list(SagaStatus))
def test_staying_put_is_not_a_saga_move(status: SagaStatus) -> None:
    check_saga_move("s", status, status)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (old, new)
        for old, new in itertools.permutations(SagaStatus, 2)
        if (old, new) not in LEGAL_SAGA_MOVES
    ],
)
def test_illegal_saga_moves_raise(old: SagaStatus, new: SagaStatus) -> None:
    with pytest.raises(IllegalTransitionError, match=f"{old.value} -> {new.value}"):
        check_saga_move("saga-1", old, new)


@pytest.mark.parametrize(("old", "new"), sorted(LEGAL_STEP_MOVES))
def test_legal_step_moves_pass(old: StepStatus, new: StepStatus) -> None:
    check_step_move("a", old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (old, new)
        for old, new in itertools.product(StepStatus, repeat=2)
        if (old, new) not in LEGAL_STEP_MOVES
    ],
)
def test_illegal_step_moves_raise(old: StepStatus, new: StepStatus) -> None:
    with pytest.raises(IllegalTransitionError, match="'charge'"):
        check_step_move("charge", old, new)


def test_terminal_and_finished_statuses() -> None:
    assert {s for s in SagaStatus if s.is_terminal} == {
        S.COMPLETED,
        S.COMPENSATED,
        S.FAILED,
        S.CANCELLED,
        S.PAUSED,
    }
    assert {s for s in SagaStatus if s.is_finished} == {S.COMPLETED, S.COMPENSATED, S.CANCELLED}


def test_statuses_are_their_stored_strings() -> None:
    assert SagaStatus("compensated") is S.COMPENSATED
    assert StepStatus("succeeded") is T.SUCCEEDED
    assert S.RUNNING == "running"
