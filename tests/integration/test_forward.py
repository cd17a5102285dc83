"""Going forward: step order, dependencies, results, and what a step knows about itself."""

from __future__ import annotations

from typing import Any

import pytest

from saga import Coordinator, Saga, SagaStatus, StepContext, StepStatus, current_step
from tests.integration import steps
from tests.integration.support import assert_history_replays


def test_steps_run_in_declaration_order_and_see_earlier_results(coord: Coordinator) -> None:
    order: list[str] = []
    seen: dict[str, dict[str, Any]] = {}
    saga = Saga("forward-order")

    @saga.step()
    def reserve(ctx: StepContext) -> dict[str, Any]:
        order.append("reserve")
        seen["reserve"] = dict(ctx.results)
        return {"reservation": ctx.data["sku"], "qty": [1, 2]}

    @saga.step()
    def charge(ctx: StepContext) -> float:
        order.append("charge")
        seen["charge"] = dict(ctx.results)
        return 12.5

    @saga.step()
    def ship(ctx: StepContext) -> None:
        order.append("ship")
        seen["ship"] = dict(ctx.results)

    view = coord.run(saga, data={"sku": "A1"})
    assert order == ["reserve", "charge", "ship"]
    assert seen == {
        "reserve": {},
        "charge": {"reserve": {"reservation": "A1", "qty": [1, 2]}},
        "ship": {"reserve": {"reservation": "A1", "qty": [1, 2]}, "charge": 12.5},
    }
    assert view.status is SagaStatus.COMPLETED
    assert view.results == {
        "reserve": {"reservation": "A1", "qty": [1, 2]},
        "charge": 12.5,
        "ship": None,
    }
    assert [s.name for s in view.steps] == ["reserve", "charge", "ship"]
    assert [s.seq for s in view.steps] == [1, 2, 3]
    assert all(s.status is StepStatus.SUCCEEDED and s.attempt == 1 for s in view.steps)
    stored = coord.get(view.id)
    assert stored.results == view.results
    assert stored.input == {"sku": "A1"}
    assert_history_replays(coord, view.id)


def test_after_dependencies_decide_the_order(coord: Coordinator) -> None:
    order: list[str] = []
    saga = Saga("forward-after")

    @saga.step()
    def first(ctx: StepContext) -> str:
        order.append("first")
        return "1"

    @saga.step(after=("second",))
    def third(ctx: StepContext) -> str:
        order.append("third")
        assert ctx.results == {"first": "1", "second": "2"}
        return "3"

    @saga.step(after=("first",))
    def second(ctx: StepContext) -> str:
        order.append("second")
        return "2"

    @saga.step(after=())
    def root(ctx: StepContext) -> str:
        order.append("root")
        return "r"

    view = coord.run(saga)
    assert view.status is SagaStatus.COMPLETED
    # 'third' waits for 'second' although declared before it; 'root' waits for nothing.
    assert order.index("third") > order.index("second") > order.index("first")
    assert sorted(order) == ["first", "root", "second", "third"]
    stored_order = [s.name for s in sorted(coord.get(view.id).steps, key=lambda s: s.seq)]
    assert stored_order == order
    assert view.results == {"first": "1", "second": "2", "third": "3", "root": "r"}


def test_step_context_fields_inside_declarative_steps(coord: Coordinator) -> None:
    contexts: list[StepContext] = []
    saga = Saga("forward-context")

    @saga.step()
    def one(ctx: StepContext) -> int:
        assert current_step() is ctx
        contexts.append(ctx)
        return 1

    @saga.step()
    def two(ctx: StepContext) -> int:
        assert current_step() is ctx
        contexts.append(ctx)
        return int(ctx.results["one"]) + 1

    view = coord.run(saga, data={"n": 1})
    first, second = contexts
    assert (first.saga_id, first.step, first.attempt, first.data) == (view.id, "one", 1, {"n": 1})
    assert first.idempotency_key == f"{view.id}:one"
    assert first.result is None
    assert second.result is None
    assert second.idempotency_key == f"{view.id}:two" != first.idempotency_key
    assert dict(second.results) == {"one": 1}
    assert second.saga_name == "forward-context"


def test_current_step_inside_context_manager_steps(coord: Coordinator) -> None:
    with coord.saga("forward-cm", key="cm-1") as s:
        first = s.step(steps.probe)
        second = s.step(steps.probe)
        hold = s.step(steps.debit, "alice", 10, compensate=steps.refund)
    assert first == {
        "saga_id": s.id,
        "step": "probe",
        "attempt": 1,
        "key": f"{s.id}:probe",
        "results": {},
    }
    assert second["step"] == "probe#2"
    assert second["key"] == f"{s.id}:probe#2"
    assert second["results"] == {"probe": first}
    assert hold == {"hold": "alice-10", "key": f"{s.id}:debit"}
    view = coord.get(s.id)
    assert view.status is SagaStatus.COMPLETED
    assert view.key == "cm-1"
    assert view.results == {"probe": first, "probe#2": second, "debit": hold}
    assert view.step("debit").compensation == "tests.integration.steps:refund"
    assert_history_replays(coord, s.id)


def test_current_step_outside_a_step_raises() -> None:
    with pytest.raises(RuntimeError, match="outside a saga step"):
        current_step()


def test_current_step_is_gone_after_the_step_returns(coord: Coordinator) -> None:
    saga = Saga("forward-context-gone")

    @saga.step()
    def only(ctx: StepContext) -> None:
        return None

    coord.run(saga)
    with pytest.raises(RuntimeError):
        current_step()
    with coord.saga("forward-context-gone-cm") as s:
        s.step(steps.probe)
        with pytest.raises(RuntimeError):
            current_step()
