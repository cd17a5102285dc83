"""Parallel declarative steps (``after=``, ``max_concurrency``), sync and async.

Every test runs twice through ``any_coord``: with ``Coordinator`` (steps in a
thread pool) and with ``AsyncCoordinator`` (steps as tasks; these step
functions are sync, so each runs in a worker thread and is waited for, never
cancelled). Completion order is forced without timing: a step waits until
the store records another step's outcome.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from saga import Coordinator, DefinitionError, Saga, SagaFailed, SagaStatus, StepContext, StepStatus
from tests.aio.support import (
    most_in_flight,
    order_of,
    step_status,
    wait_for_cancel_request,
    wait_for_step,
)
from tests.integration.support import assert_history_replays, fast

SUCCEEDED, FAILED = StepStatus.SUCCEEDED, StepStatus.FAILED


def _fan_out(name: str, coord: Coordinator, order: list[tuple[str, str]], log: list[Any]) -> Saga:
    """reserve -> (a, b, c at once) -> ship; ``after_a`` waits for ``a`` only.

    ``order`` says, branch by branch, what it waits for before it ends: a pair
    (step, status) that must be durable first, or nothing; branch ``c`` fails.
    """
    saga = Saga(name, max_concurrency=3)
    waits = dict(order)
    lock = threading.Lock()

    def record(*entry: Any) -> None:
        with lock:
            log.append(entry)

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        record("do", "reserve")
        return "reserved"

    def branch(ctx: StepContext) -> str:
        record("start", ctx.step)
        if waits.get(ctx.step):
            other, status = waits[ctx.step].split(":")
            wait_for_step(coord.store, ctx.saga_id, other, StepStatus(status))
        if ctx.step == "c":
            record("fail", "c")
            raise ValueError("c: no capacity")
        record("do", ctx.step)
        return f"{ctx.step}-done"

    def undo(ctx: StepContext) -> None:
        record("undo", ctx.step, ctx.result)

    for name_ in ("a", "b", "c"):
        saga.step(name=name_, after=("reserve",), retry=fast(1))(branch).compensation(undo)
    saga.step(name="after_a", after=("a",))(branch)
    saga.step(name="ship", after=("a", "b", "c"))(branch)
    saga.by_name("reserve").compensation(undo)  # type: ignore[union-attr]
    return saga


def test_a_branch_failing_after_the_others_succeeded_unwinds_all_newest_first(
    any_coord: Coordinator,
) -> None:
    log: list[Any] = []
    # a ends first, then b, then c fails; after_a may run (a succeeded before the failure).
    saga = _fan_out("par-fail-last", any_coord, [("b", "a:succeeded"), ("c", "b:succeeded")], log)
    with pytest.raises(SagaFailed) as failed:
        any_coord.run(saga)
    assert failed.value.status is SagaStatus.COMPENSATED
    assert failed.value.failed_step == "c"
    assert isinstance(failed.value.__cause__, ValueError)
    undone = [entry[1] for entry in log if entry[0] == "undo"]
    assert undone == ["c", "b", "a", "reserve"]  # newest first by completion
    assert ("start", "ship") not in log
    view = any_coord.get(failed.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert all(s.status is StepStatus.COMPENSATED for s in view.steps if s.name != "after_a")
    history = any_coord.history(view.id)
    assert most_in_flight(history) >= 3  # a, b and c were in flight together
    assert set(order_of(history, "step_started")[1:4]) == {"a", "b", "c"}
    assert_history_replays(any_coord, view.id)  # type: ignore[arg-type]


def test_a_failure_stops_new_starts_waits_for_branches_in_flight_then_unwinds(
    any_coord: Coordinator,
) -> None:
    log: list[Any] = []
    # c fails first; a ends once that failure is durable, then b.
    saga = _fan_out("par-fail-first", any_coord, [("a", "c:failed"), ("b", "a:succeeded")], log)
    with pytest.raises(SagaFailed) as failed:
        any_coord.run(saga)
    assert failed.value.failed_step == "c"
    view = any_coord.get(failed.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    # a and b finished after the failure: recorded, then compensated with their results.
    assert ("undo", "a", "a-done") in log
    assert ("undo", "b", "b-done") in log
    undone = [entry[1] for entry in log if entry[0] == "undo"]
    assert undone == ["b", "a", "c", "reserve"]  # newest first by completion
    # after_a became ready when a succeeded, but nothing starts after a failure.
    assert {"after_a", "ship"}.isdisjoint(order_of(any_coord.history(view.id), "step_started"))
    assert [s.name for s in view.steps] == ["reserve", "a", "b", "c"]
    assert view.step("c").error == "ValueError: c: no capacity"
    assert_history_replays(any_coord, view.id)  # type: ignore[arg-type]


def test_max_concurrency_bounds_the_steps_in_flight(any_coord: Coordinator) -> None:
    saga = Saga("par-bounded", max_concurrency=2)
    pairs = threading.Barrier(2, timeout=10)  # two steps must overlap to pass it
    lock = threading.Lock()
    running = [0, 0]  # now, most

    def work(ctx: StepContext) -> str:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        pairs.wait()
        with lock:
            running[0] -= 1
        return ctx.step

    for number in range(6):
        saga.step(name=f"s{number}", after=())(work)
    view = any_coord.run(saga)
    assert view.status is SagaStatus.COMPLETED
    assert running[1] == 2
    assert most_in_flight(any_coord.history(view.id)) == 2  # as recorded, too
    assert view.results == {f"s{n}": f"s{n}" for n in range(6)}


def test_roots_and_a_diamond_run_as_soon_as_their_dependencies_succeeded(
    any_coord: Coordinator,
) -> None:
    saga = Saga("par-diamond", max_concurrency=3)
    sides = threading.Barrier(2, timeout=10)
    seen: dict[str, Any] = {}

    def observed(ctx: StepContext) -> None:
        stored = any_coord.store.load(ctx.saga_id)
        assert stored is not None
        step = stored.step(ctx.step)
        assert step is not None
        seen[ctx.step] = (step.status, step.attempt, dict(ctx.results))

    @saga.step()
    def top(ctx: StepContext) -> int:
        observed(ctx)
        return 1

    @saga.step(after=("top",))
    def left(ctx: StepContext) -> int:
        observed(ctx)
        sides.wait()
        return 2

    @saga.step(after=("top",))
    def right(ctx: StepContext) -> int:
        observed(ctx)
        sides.wait()
        return 3

    @saga.step(after=("left", "right"))
    def bottom(ctx: StepContext) -> int:
        observed(ctx)
        return int(ctx.results["left"]) + int(ctx.results["right"])

    @saga.step(after=())
    def audit(ctx: StepContext) -> str:
        observed(ctx)
        return "audited"

    view = any_coord.run(saga)
    assert view.status is SagaStatus.COMPLETED
    assert view.results == {"top": 1, "left": 2, "right": 3, "bottom": 5, "audit": "audited"}
    # Each start was durable (running, this attempt) before the action ran.
    assert {name: s[:2] for name, s in seen.items()} == {
        name: (StepStatus.RUNNING, 1) for name in ("top", "left", "right", "bottom", "audit")
    }
    bottom_saw = seen["bottom"][2]
    assert {name: bottom_saw[name] for name in ("top", "left", "right")} == {
        "top": 1,
        "left": 2,
        "right": 3,
    }
    history = any_coord.history(view.id)
    started, succeeded = order_of(history, "step_started"), order_of(history, "step_succeeded")
    assert set(started[:2]) == {"top", "audit"}  # both roots start with the saga
    events = [(e.kind, e.step) for e in history]
    for dependency, dependant in [("top", "left"), ("top", "right"), ("left", "bottom")]:
        assert events.index(("step_succeeded", dependency)) < events.index(
            ("step_started", dependant)
        )
    assert events.index(("step_succeeded", "right")) < events.index(("step_started", "bottom"))
    assert sorted(succeeded) == sorted(started)


def test_definitions_are_validated_at_registration(any_coord: Coordinator) -> None:
    def noop(ctx: StepContext) -> None:
        return None

    cyclic = Saga("par-cycle", max_concurrency=2)
    cyclic.step(name="pack", after=("label",))(noop)
    cyclic.step(name="weigh", after=("pack",))(noop)
    cyclic.step(name="label", after=("weigh",))(noop)
    cyclic.step(name="free", after=())(noop)
    with pytest.raises(DefinitionError) as cycle:
        any_coord.register(cyclic)
    message = str(cycle.value)
    assert "cycle" in message
    path = message.rsplit(": ", 1)[1].split(" -> ")
    assert set(path) == {"pack", "weigh", "label"}
    assert path[0] == path[-1]
    assert len(path) == 4

    unknown = Saga("par-unknown")
    unknown.step(name="pay", after=("quote",))(noop)
    with pytest.raises(DefinitionError, match=r"step 'pay' runs after unknown step 'quote'"):
        any_coord.register(unknown)

    twice = Saga("par-twice")
    twice.step(name="pay", after=())(noop)
    twice.step(name="pay", after=())(noop)
    with pytest.raises(DefinitionError, match="two steps are named 'pay'"):
        any_coord.run(twice)
    assert any_coord.list() == []  # nothing was recorded


def test_cancel_during_a_fan_out_stops_new_starts_and_ends_cancelled(
    any_coord: Coordinator, db_url: str
) -> None:
    saga = Saga("par-cancel", max_concurrency=2)
    log: list[str] = []
    saga_ids: list[str] = []

    @saga.step(after=())
    def hold(ctx: StepContext) -> str:
        saga_ids.append(ctx.saga_id)
        wait_for_cancel_request(any_coord.store, ctx.saga_id)
        log.append("hold")
        return "held"

    @saga.step(after=())
    def charge(ctx: StepContext) -> str:
        wait_for_step(any_coord.store, ctx.saga_id, "hold", SUCCEEDED)
        log.append("charge")
        return "charged"

    @saga.step(after=("hold", "charge"))
    def ship(ctx: StepContext) -> None:
        log.append("ship")

    for step in (hold, charge):
        step.compensation(lambda ctx: log.append(f"undo {ctx.step} {ctx.result}"))

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            any_coord.run(saga)
        except SagaFailed as failure:
            outcome.append(failure)

    thread = threading.Thread(target=run)
    thread.start()
    operator = Coordinator(db_url)
    try:
        while not saga_ids:
            thread.join(0.01)
        view = operator.cancel(saga_ids[0])  # another "process": the owner's lease is live
        # Only requested: the owner honours it (hold returns once it sees the request),
        # and may have unwound the saga, in part or whole, before the answer was read.
        assert view.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING, SagaStatus.CANCELLED)
        assert view.cancel_requested
    finally:
        thread.join(30)
        operator.close()
    (failure,) = outcome
    assert isinstance(failure, SagaFailed)
    assert failure.status is SagaStatus.CANCELLED
    assert "ship" not in log
    assert log[:2] == ["hold", "charge"]  # charge, in flight, was waited for
    assert sorted(log[2:]) == ["undo charge charged", "undo hold held"]
    assert step_status(any_coord.store, saga_ids[0], "ship") is None
