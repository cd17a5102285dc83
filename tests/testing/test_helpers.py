"""saga.testing's parts on their own: the ledger double, fail_step / slow_step, the plan,
the report, the assertion helpers, and the errors for what a child could not import."""

from __future__ import annotations

from pathlib import Path

import pytest

import saga.testing
from saga import ConfigurationError, Coordinator, Saga, SagaFailed, StepContext
from saga.testing import (
    CrashMatrix,
    Ledger,
    StepFailure,
    assert_compensated,
    assert_completed,
    fail_step,
    slow_step,
)
from saga.testing.plan import Path as RunPath
from saga.testing.plan import cases, specs
from saga.testing.report import Case, Report, Row
from saga.testing.targets import target_of
from tests.testing import sagas


def test_the_public_names_are_sorted_and_exist() -> None:
    assert saga.testing.__all__ == sorted(saga.testing.__all__)
    assert all(getattr(saga.testing, name, None) is not None for name in saga.testing.__all__)


# -- the ledger ---------------------------------------------------------------------------------


def test_the_ledger_applies_and_reverts_at_most_once_per_key(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db").create()
    assert book.apply("charge", "s1:charge", 80) is True
    assert book.apply("charge", "s1:charge", 80) is False  # the same key: nothing new
    assert book.applied("charge", saga="s1") == 1
    assert book.revert("charge", "s1:charge") is True
    assert book.revert("charge", "s1:charge") is False
    assert book.apply("charge", "s1:charge") is False  # refunded: never charged again
    assert (book.applied("charge"), book.count("charge"), book.count("charge", op="revert")) == (
        0,
        1,
        1,
    )
    assert len(book.calls("charge")) == 5


def test_a_revert_before_the_apply_leaves_a_tombstone(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db").create()
    assert book.revert("book", "s2:book") is False  # nothing to undo yet
    assert book.apply("book", "s2:book") is False  # a zombie's late call changes nothing
    assert book.applied("book") == 0


def test_record_counts_every_call_and_sagas_are_kept_apart(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db").create()
    book.record("refund", "s1:charge")
    book.record("refund", "s1:charge")
    book.record("refund", "s10:charge")
    assert book.count("refund", saga="s1", op="record") == 2  # s10 is another saga
    assert book.count("refund", key="s10:charge", op="record") == 1


def test_a_ledger_without_a_file_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAGA_TEST_LEDGER", raising=False)
    with pytest.raises(ConfigurationError, match=r"SAGA_TEST_LEDGER"):
        Ledger().apply("x", "k")


# -- misbehaving steps ------------------------------------------------------------------------


def test_fail_step_fails_n_times_then_lets_the_step_run(
    saga_coordinator: Coordinator, saga_ledger: Ledger
) -> None:
    original = sagas.order.steps[1].fn
    with fail_step(sagas.order, "charge", times=1) as charge:
        with pytest.raises(SagaFailed) as failed:
            saga_coordinator.run(sagas.order, data={"sku": "A1", "card": "tok"})
        assert isinstance(failed.value.__cause__, StepFailure)
        assert_compensated(saga_coordinator.get(failed.value.saga_id), steps=["reserve", "charge"])
        assert_completed(saga_coordinator.run(sagas.order, data={"sku": "A1", "card": "tok"}))
    assert charge.calls == 2
    assert sagas.order.steps[1].fn is original  # put back


def test_slow_step_wraps_and_restores_a_context_manager_saga_action() -> None:
    with slow_step(sagas.transfer, "credit", seconds=0.0) as slow:
        assert sagas.credit.__wrapped__ is not None  # type: ignore[attr-defined]
        assert sagas.credit.__name__ == "credit"
    assert slow.calls == 0
    assert not hasattr(sagas.credit, "__wrapped__")  # put back


def test_fail_step_refuses_an_unknown_step() -> None:
    with pytest.raises(ConfigurationError, match=r"has no step 'pay' \(it has reserve"):
        fail_step(sagas.order, "pay").__enter__()
    with pytest.raises(ConfigurationError, match=r"no function 'nothing'"):
        fail_step(sagas.transfer, "nothing").__enter__()


def test_what_a_child_could_not_import_is_refused() -> None:
    local = Saga("local-only")

    @local.step()
    def act(ctx: StepContext) -> None: ...

    with pytest.raises(ConfigurationError, match=r"not a module-level name"):
        target_of(local)
    with pytest.raises(ConfigurationError, match=r"neither a Saga nor a module-level function"):
        target_of(lambda coord, data, key: None)
    assert target_of(sagas.order).ref == "tests.testing.sagas:order"
    assert target_of(sagas.transfer_async).asynchronous


def test_the_zombie_mode_on_sqlite_says_it_needs_postgresql(tmp_path: Path) -> None:
    matrix = CrashMatrix(pool=None, workdir=tmp_path, database=None, ledger=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"zombie mode needs PostgreSQL"):
        matrix(sagas.order, modes=["zombie"])


# -- plan and report ------------------------------------------------------------------------------


def test_points_reached_again_are_numbered() -> None:
    trace = ["after_start_commit:a", "after_start_commit:a", "after_action:a"]
    assert specs(trace) == ("after_start_commit:a", "after_start_commit:a#2", "after_action:a")


def test_modes_run_only_where_they_mean_something() -> None:
    points = ("before_start_commit:a", "after_action:a", "before_unwind", "after_final_commit")
    planned = cases([RunPath(None, points, "completed")], ["recover", "compensate", "zombie"])
    assert [(c.point, c.mode) for c in planned] == [
        ("before_start_commit:a", "recover"),
        ("after_action:a", "recover"),
        ("after_action:a", "compensate"),
        ("after_action:a", "zombie"),
        ("before_unwind", "recover"),
        ("before_unwind", "zombie"),
        ("after_final_commit", "recover"),
    ]
    with pytest.raises(ValueError, match=r"unknown mode 'forward'"):
        cases([], ["forward"])


def test_no_commit_follows_the_points_after_the_final_commit() -> None:
    # The last compensation's end is committed with the saga's: its point comes after.
    points = ("after_undo:a", "before_final_commit", "after_undo_commit:a", "after_final_commit")
    planned = cases([RunPath("b", points, "compensated")], ["recover", "zombie", "lost_ack"])
    assert [(c.point, c.mode) for c in planned] == [
        ("after_undo:a", "recover"),
        ("after_undo:a", "lost_ack"),  # not zombie: nothing is recorded yet at the first
        ("before_final_commit", "recover"),
        ("before_final_commit", "zombie"),
        ("before_final_commit", "lost_ack"),
        ("after_undo_commit:a", "recover"),
        ("after_final_commit", "recover"),
    ]


def test_the_table_shows_the_failures_by_point() -> None:
    good = Row(Case("after_action:a", None, "recover"), "completed", "a b", ())
    bad = Row(Case("after_undo:a", "b", "recover"), "compensated", "a b! ~a", ("check: twice",))
    report = Report("m:s", (good, bad))
    assert not report.ok
    assert report.failures == [bad]
    lines = report.table().splitlines()
    assert lines[0] == "crash matrix of m:s: 1 of 2 cases passed"
    assert lines[2] == "after_undo:a  b fails  recover  compensated  a b! ~a  FAIL: check: twice"
    assert len(report.table(only_failures=False).splitlines()) == 4
    assert repr(report) == "<Report m:s: 1 of 2 cases failed>"
    assert not Report("m:s", ()).ok  # no case is no pass


def test_fail_step_and_slow_step_keep_a_coroutine_step_a_coroutine(
    saga_database_url: str, saga_ledger: Ledger
) -> None:
    import asyncio
    import inspect

    from saga import AsyncCoordinator

    async def run() -> SagaFailed:
        async with AsyncCoordinator(saga_database_url) as coord:
            with pytest.raises(SagaFailed) as failed:
                await coord.run(sagas.paid)
            return failed.value

    with slow_step(sagas.paid, "pay", seconds=0.0), fail_step(sagas.paid, "pay", times=1) as pay:
        assert inspect.iscoroutinefunction(sagas.paid.steps[0].fn)
        failure = asyncio.run(run())
    assert isinstance(failure.__cause__, StepFailure)
    assert pay.calls == 1
    assert saga_ledger.applied("pay") == 0
