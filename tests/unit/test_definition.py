"""Declarative definitions: how steps are declared, ordered and validated."""

from __future__ import annotations

import uuid

import pytest

from saga import DefinitionError, RetryPolicy, Saga, StepContext, StepKind
from saga._internal.policy import DEFAULT_RETRIABLE_RETRY, DEFAULT_STEP_RETRY


def fresh(prefix: str = "def", **options: object) -> Saga:
    """A Saga with a unique name, so tests never share the process-wide catalogue."""
    return Saga(f"{prefix}-{uuid.uuid4().hex[:8]}", **options)  # type: ignore[arg-type]


def noop(ctx: StepContext) -> None:
    return None


def test_steps_run_after_the_step_declared_before_them_by_default() -> None:
    saga = fresh()
    saga.step(name="a")(noop)
    saga.step(name="b")(noop)
    saga.step(name="c")(noop)
    saga.validate()
    assert saga.dependencies() == {"a": (), "b": ("a",), "c": ("b",)}
    assert [s.name for s in saga.order()] == ["a", "b", "c"]


def test_after_empty_tuple_makes_a_root() -> None:
    saga = fresh()
    saga.step(name="a")(noop)
    saga.step(name="b", after=())(noop)
    saga.step(name="c", after=("a", "b"))(noop)
    saga.validate()
    assert saga.dependencies() == {"a": (), "b": (), "c": ("a", "b")}


def test_order_respects_dependencies_declared_out_of_order() -> None:
    saga = fresh()
    saga.step(name="late", after=("early",))(noop)
    saga.step(name="early", after=())(noop)
    saga.validate()
    assert [s.name for s in saga.order()] == ["early", "late"]


def test_step_name_defaults_to_the_function_name() -> None:
    saga = fresh()

    @saga.step()
    def reserve(ctx: StepContext) -> None:
        return None

    assert reserve.name == "reserve"
    assert saga.by_name("reserve") is reserve
    assert saga.by_name("missing") is None


def test_bare_decorator_declares_a_step() -> None:
    saga = fresh()

    @saga.step
    def reserve(ctx: StepContext) -> int:
        return 7

    assert [s.name for s in saga.steps] == ["reserve"]
    assert reserve(None) == 7  # a Step still calls its function


def test_duplicate_step_names_are_refused() -> None:
    saga = fresh()
    saga.step(name="charge")(noop)
    saga.step(name="charge")(noop)
    with pytest.raises(DefinitionError, match="two steps are named 'charge'"):
        saga.validate()


def test_a_step_name_given_where_the_function_goes_says_how_to_name_it() -> None:
    saga = fresh()
    with pytest.raises(DefinitionError) as caught:
        saga.step("reserve")  # type: ignore[call-overload]
    expected = "@saga.step takes a function, not 'reserve'; to name it, write "
    assert expected + "@saga.step(name='reserve')" in str(caught.value)
    assert str(caught.value).startswith(f"saga {saga.name!r}: ")
    assert saga.steps == []  # nothing declared


def test_a_compensation_given_no_function_is_refused_in_one_line() -> None:
    saga = fresh()
    charge = saga.step(name="charge")(noop)
    with pytest.raises(DefinitionError, match=r"^step 'charge': @step.compensation takes a "):
        charge.compensation("refund")  # type: ignore[call-overload]
    assert charge.undo is None  # nothing attached


def test_unknown_dependency_names_both_steps() -> None:
    saga = fresh()
    saga.step(name="charge", after=("reserve",))(noop)
    with pytest.raises(DefinitionError) as caught:
        saga.validate()
    assert "'charge'" in str(caught.value)
    assert "unknown step 'reserve'" in str(caught.value)


def test_cycle_is_refused_with_its_path() -> None:
    saga = fresh()
    saga.step(name="a", after=("c",))(noop)
    saga.step(name="b", after=("a",))(noop)
    saga.step(name="c", after=("b",))(noop)
    with pytest.raises(DefinitionError, match="cycle") as caught:
        saga.validate()
    assert "a -> c -> b -> a" in str(caught.value)


def test_a_step_that_depends_on_itself_is_a_cycle() -> None:
    saga = fresh()
    saga.step(name="a", after=("a",))(noop)
    with pytest.raises(DefinitionError, match="a -> a"):
        saga.validate()


def test_pivot_with_a_compensation_is_refused() -> None:
    saga = fresh()

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> None:
        return None

    @ship.compensation
    def unship(ctx: StepContext) -> None:
        return None

    with pytest.raises(DefinitionError, match="'ship' is pivot and so cannot have a compensation"):
        saga.validate()


def test_retriable_with_a_compensation_is_refused() -> None:
    saga = fresh()
    step = saga.step(name="notify", retriable=True)(noop)
    step.compensation(noop)
    with pytest.raises(DefinitionError, match="retriable"):
        saga.validate()


def test_a_step_cannot_be_both_pivot_and_retriable() -> None:
    with pytest.raises(DefinitionError, match="both pivot and retriable"):
        fresh().step(pivot=True, retriable=True)


def test_a_second_compensation_is_refused() -> None:
    step = fresh().step(name="a")(noop)
    step.compensation(noop)
    with pytest.raises(DefinitionError, match="already has a compensation"):
        step.compensation(noop)


def test_compensation_decorator_takes_its_own_retry_policy() -> None:
    policy = RetryPolicy(max_attempts=9)
    step = fresh().step(name="a")(noop)

    @step.compensation(retry=policy)
    def undo(ctx: StepContext) -> None:
        return None

    assert step.undo is undo
    assert step.undo_retry is policy


def test_step_kinds_and_default_retry_policies() -> None:
    saga = fresh()
    plain = saga.step(name="plain")(noop)
    pivot = saga.step(name="pivot", pivot=True)(noop)
    retriable = saga.step(name="retriable", retriable=True)(noop)
    assert (plain.kind, pivot.kind, retriable.kind) == (
        StepKind.COMPENSATABLE,
        StepKind.PIVOT,
        StepKind.RETRIABLE,
    )
    assert plain.retry is DEFAULT_STEP_RETRY
    assert retriable.retry is DEFAULT_RETRIABLE_RETRY
    assert retriable.retry.max_attempts is None


def test_bad_on_crash_and_concurrency_are_refused() -> None:
    with pytest.raises(DefinitionError, match="on_crash"):
        fresh(on_crash="ignore")
    saga = fresh(max_concurrency=0)
    saga.step(name="a")(noop)
    with pytest.raises(DefinitionError, match="max_concurrency"):
        saga.validate()


def test_fingerprint_follows_the_shape_not_the_code() -> None:
    def build(second: str, body: object = None) -> str:
        saga = fresh()
        saga.step(name="a")(noop)
        saga.step(name=second)(lambda ctx: body)
        return saga.fingerprint

    assert build("b", 1) == build("b", 2)
    assert build("b") != build("c")


def test_fingerprint_changes_with_step_kind_order_and_dependencies() -> None:
    def build(**options: object) -> str:
        saga = fresh()
        saga.step(name="a")(noop)
        saga.step(name="b", **options)(noop)  # type: ignore[call-overload]
        return saga.fingerprint

    assert build() != build(pivot=True)
    assert build() != build(after=())


def test_fingerprint_changes_with_step_order() -> None:
    def build(*names: str) -> str:
        saga = fresh()
        for name in names:
            saga.step(name=name)(noop)
        return saga.fingerprint

    assert build("a", "b") != build("b", "a")


def test_a_version_is_a_whole_number_from_one() -> None:
    assert fresh().version == 1
    for bad in (0, -1, True, "2", 1.5):
        with pytest.raises(DefinitionError, match="version must be a whole number from 1"):
            fresh(version=bad)  # type: ignore[arg-type]
