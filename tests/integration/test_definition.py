"""Definitions are validated when registered: nothing of an invalid saga ever runs."""

from __future__ import annotations

import pytest

from saga import Coordinator, DefinitionError, Saga, StepContext

RAN: list[str] = []


def _noop(ctx: StepContext) -> None:
    RAN.append(ctx.step)


def _refused(coord: Coordinator, saga: Saga, *names: str) -> DefinitionError:
    with pytest.raises(DefinitionError) as raised:
        coord.register(saga)
    with pytest.raises(DefinitionError):
        coord.run(saga)
    for name in names:
        assert repr(name) in str(raised.value) or name in str(raised.value)
    assert coord.list() == []
    assert RAN == []
    return raised.value


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def test_duplicate_step_names_are_refused(coord: Coordinator) -> None:
    saga = Saga("def-duplicate")
    saga.step(name="pay")(_noop)
    saga.step(name="pay")(_noop)
    error = _refused(coord, saga, "pay")
    assert "two steps are named 'pay'" in str(error)


def test_unknown_dependencies_are_refused(coord: Coordinator) -> None:
    saga = Saga("def-unknown")
    saga.step(name="reserve")(_noop)
    saga.step(name="charge", after=("reserve", "fraud_check"))(_noop)
    error = _refused(coord, saga, "charge", "fraud_check")
    assert "unknown step 'fraud_check'" in str(error)


def test_cycles_are_refused_with_their_path(coord: Coordinator) -> None:
    saga = Saga("def-cycle")
    saga.step(name="start", after=())(_noop)
    saga.step(name="a", after=("c",))(_noop)
    saga.step(name="b", after=("a",))(_noop)
    saga.step(name="c", after=("b",))(_noop)
    error = _refused(coord, saga, "a", "b", "c")
    assert "cycle" in str(error)
    path = str(error).split("cycle:")[1].strip().split(" -> ")
    assert path[0] == path[-1]
    assert sorted(path[:-1]) == ["a", "b", "c"]
    assert "start" not in path


def test_a_step_depending_on_itself_is_a_cycle(coord: Coordinator) -> None:
    saga = Saga("def-self-cycle")
    saga.step(name="loop", after=("loop",))(_noop)
    error = _refused(coord, saga, "loop")
    assert "loop -> loop" in str(error)


def test_a_valid_definition_registers_and_runs(coord: Coordinator) -> None:
    saga = Saga("def-valid")
    saga.step(name="a")(_noop)
    saga.step(name="b", after=("a",))(_noop)
    coord.register(saga)
    coord.run("def-valid")
    assert RAN == ["a", "b"]
