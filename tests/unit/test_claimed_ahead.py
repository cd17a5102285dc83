"""What a worker claims beyond its free slots (``saga.admin.claimed_ahead``): how many
it asks for, and when a saga that waited too long is given back. A hand-turned clock
stands in for time."""

from __future__ import annotations

from saga.admin.claimed_ahead import ClaimedAhead


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_before_a_saga_has_finished_it_claims_for_the_free_slots_only() -> None:
    ahead = ClaimedAhead(patience=10.0, batch=20)
    assert ahead.to_claim(free=3, concurrency=4) == 3
    assert ClaimedAhead(patience=10.0, batch=2).to_claim(free=3, concurrency=4) == 2


def test_quick_sagas_are_claimed_ahead_up_to_the_batch() -> None:
    ahead = ClaimedAhead(patience=10.0, batch=20)
    ahead.finished_in(0.01)  # 4 slots start 2,000 such sagas in half the patience
    assert ahead.to_claim(free=1, concurrency=4) == 20


def test_slow_sagas_are_claimed_ahead_only_as_far_as_they_start_in_time() -> None:
    ahead = ClaimedAhead(patience=10.0, batch=20)
    ahead.finished_in(2.0)  # 2 slots start 5 in 5 s
    assert ahead.to_claim(free=1, concurrency=2) == 6
    ahead.finished_in(2.0 + 8 * 100.0)  # the average moves an eighth of the way: 102 s
    assert ahead.to_claim(free=1, concurrency=2) == 1


def test_a_saga_is_given_back_once_it_waited_past_its_patience() -> None:
    clock = Clock()
    ahead = ClaimedAhead(patience=10.0, batch=20, clock=clock)
    ahead.keep(["a", "b"])
    clock.now += 4.0
    ahead.keep(["c"])
    assert ahead.overdue() == []
    clock.now += 6.0  # a and b waited 10 s, c 6 s
    assert ahead.overdue() == ["a", "b"]
    assert ahead.next() == "c"
    assert ahead.next() is None
    assert len(ahead) == 0


def test_a_stopping_worker_takes_back_everything_still_waiting() -> None:
    ahead = ClaimedAhead(patience=10.0, batch=20)
    ahead.keep(["a", "b", "c"])
    assert ahead.next() == "a"
    assert ahead.take_all() == ["b", "c"]
    assert len(ahead) == 0
