"""``s.parallel(s.call(...), ...)``: several context-manager steps at once.

Each test runs with ``with coord.saga(...)`` (calls in threads) and with
``async with`` behind the facade (calls as tasks; these functions are sync,
so each runs in a worker thread).
"""

from __future__ import annotations

import threading

import pytest

from saga import Coordinator, SagaFailed, SagaStatus, StepStatus, UnsafeReferenceError
from tests.aio import steps
from tests.aio.support import order_of
from tests.integration.support import assert_history_replays, expire_lease


def test_parallel_calls_run_at_once_once_all_their_starts_are_durable(
    any_coord: Coordinator,
) -> None:
    steps.STORE.append(any_coord.store)
    steps.BARRIERS["trip"] = threading.Barrier(3, timeout=10)
    with any_coord.saga("trip", key="t-1") as s:
        quote = s.step(steps.book, "quote", compensate=steps.unbook)
        booked = s.parallel(
            s.call(steps.meet, "flight", "trip", compensate=steps.unmeet, step_name="flight"),
            s.call(steps.meet, "hotel", "trip", compensate=steps.unmeet, step_name="hotel"),
            s.call(steps.meet, "car", "trip", compensate=steps.unmeet, step_name="car"),
        )
        paid = s.step(steps.book, "pay", compensate=steps.unbook)
    assert quote == "quote-booked"
    assert booked == ["flight-booked", "hotel-booked", "car-booked"]
    assert paid == "pay-booked"
    view = any_coord.get(s.id)
    assert view.status is SagaStatus.COMPLETED
    assert [st.name for st in view.steps] == ["book", "flight", "hotel", "car", "book#2"]
    assert view.results["car"] == "car-booked"
    group = ["flight", "hotel", "car"]
    # Each call saw its own start durable before it ran.
    saw = {entry[1]: entry[2] for entry in steps.LOG if entry[0] == "saw"}
    assert saw == dict.fromkeys(group, StepStatus.RUNNING)
    history = any_coord.history(s.id)
    started, succeeded = order_of(history, "step_started"), order_of(history, "step_succeeded")
    assert started[1:4] == group  # one commit, in call order
    events = [(e.kind, e.step) for e in history]
    first_done = min(events.index(("step_succeeded", name)) for name in group)
    assert all(events.index(("step_started", name)) < first_done for name in group)
    assert sorted(succeeded) == sorted(started)
    assert view.step("flight").compensation == "tests.aio.steps:unmeet"
    assert_history_replays(any_coord, s.id)  # type: ignore[arg-type]


def test_a_failed_call_waits_for_the_others_then_everything_unwinds_newest_first(
    any_coord: Coordinator,
) -> None:
    steps.STORE.append(any_coord.store)
    with (  # noqa: PT012 - the block is the saga
        pytest.raises(SagaFailed) as failed,
        any_coord.saga("trip-fail", key="t-2") as s,
    ):
        s.step(steps.book, "quote", compensate=steps.unbook)
        s.parallel(
            # hotel fails first; flight ends once that is durable, car after flight.
            s.call(
                steps.book_after,
                "flight",
                "hotel",
                "failed",
                compensate=steps.unbook_after,
                step_name="flight",
            ),
            s.call(steps.refuse, "hotel", compensate=steps.unbook, step_name="hotel"),
            s.call(
                steps.book_after,
                "car",
                "flight",
                compensate=steps.unbook_after,
                step_name="car",
            ),
        )
        s.step(steps.book, "never")
    assert failed.value.status is SagaStatus.COMPENSATED
    assert failed.value.failed_step == "hotel"
    assert isinstance(failed.value.__cause__, ValueError)
    undone = [(entry[1], entry[2]) for entry in steps.LOG if entry[0] == "unbook"]
    assert undone == [
        ("car", "car-booked"),
        ("flight", "flight-booked"),
        ("hotel", None),  # it may have acted before it raised
        ("quote", "quote-booked"),
    ]
    assert not any(entry[1] == "never" for entry in steps.LOG)
    view = any_coord.get(s.id)
    assert view.status is SagaStatus.COMPENSATED
    assert all(st.status is StepStatus.COMPENSATED for st in view.steps)
    assert view.step("hotel").error == "ValueError: hotel refused"
    assert_history_replays(any_coord, s.id)  # type: ignore[arg-type]


def test_reentering_after_a_crash_mid_group_runs_only_the_unfinished_calls(
    any_coord: Coordinator,
) -> None:
    steps.STORE.append(any_coord.store)
    steps.CRASHES["car"] = 1

    def block() -> list[str]:
        with any_coord.saga("trip-crash", key="t-3") as s:
            return s.parallel(
                s.call(steps.book, "flight", compensate=steps.unbook, step_name="flight"),
                s.call(
                    steps.crash_after,
                    "car",
                    "flight",
                    compensate=steps.unbook_after,
                    step_name="car",
                ),
            )

    with pytest.raises(steps.Crash):
        block()
    (saga,) = any_coord.list()
    assert saga.status is SagaStatus.RUNNING
    assert saga.step("flight").status is StepStatus.SUCCEEDED
    assert saga.step("car").status is StepStatus.RUNNING
    expire_lease(any_coord, saga.id)  # as if the crashed process's lease ran out
    assert block() == ["flight-booked", "car-booked"]
    booked = [(entry[1], entry[3]) for entry in steps.LOG if entry[0] == "book"]
    assert booked == [("flight", 1), ("car", 2)]  # flight was not run again
    view = any_coord.get(saga.id)
    assert view.status is SagaStatus.COMPLETED
    assert view.step("car").attempt == 2


def test_a_bad_call_is_refused_before_anything_runs(any_coord: Coordinator) -> None:
    with (
        pytest.raises(UnsafeReferenceError, match="lambda"),
        any_coord.saga("trip-bad", key="t-4") as s,
    ):
        s.parallel(s.call(steps.book, "flight"), s.call(lambda: "hotel"))
    assert steps.LOG == []
    assert any_coord.list() == []
