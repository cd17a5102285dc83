"""The crash matrix through the public plugin, on sagas that are right: every case passes.

The plugin is loaded by its ``pytest11`` entry point (as in a user's project);
``SAGA_TEST_DATABASE_URL`` puts the stores on PostgreSQL, else SQLite files.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from saga.testing import CrashMatrix
from tests.testing import sagas

pytestmark = pytest.mark.crash

ORDER = {"sku": "A1", "card": "tok"}
MONEY = {"from": "alice", "to": "bob", "amount": 10}


def _points(report_cases: list[object], path: str | None) -> list[str]:
    return [c.point for c in report_cases if c.failing == path and c.mode == "recover"]  # type: ignore[attr-defined]


def test_a_declarative_saga_survives_every_crash(crash_matrix: CrashMatrix) -> None:
    report = crash_matrix(sagas.order, data=ORDER, check=sagas.books_balance, fail=["charge"])
    assert report.ok, report.table()
    cases = [row.case for row in report.rows]
    assert _points(cases, None) == [
        f"{point}:{step}"
        for step in ("reserve", "charge", "ship")
        for point in ("before_start_commit", "after_start_commit", "inside_action", "after_action")
    ] + ["before_final_commit", "after_final_commit"]
    unwinding = _points(cases, "charge")[_points(cases, "charge").index("before_unwind") :]
    assert unwinding == [
        "before_unwind",
        *[f"{p}:charge" for p in ("before_undo", "after_undo")],
        "before_undo:reserve",
        "after_undo_commit:charge",  # charge's end is committed with reserve's start
        *[f"{p}:reserve" for p in ("inside_undo", "after_undo")],
        "before_final_commit",
        "after_undo_commit:reserve",  # and reserve's with the saga's end
        "after_final_commit",
    ]  # charge's own compensation reverts nothing (it never acted), so no inside_undo
    compensated = {r.case.point for r in report.rows if r.case.mode == "compensate"}
    assert "after_action:charge" in compensated
    forward = {
        r.case.point for r in report.rows if r.case.mode == "compensate" and r.status == "completed"
    }
    assert forward == {f"{p}:ship" for p in ("after_start_commit", "inside_action", "after_action")}
    assert "ship fails" not in report.table(only_failures=False)  # only the path asked for


def test_a_path_that_fails_on_its_own_is_judged_by_its_own_run(crash_matrix: CrashMatrix) -> None:
    declined = {**ORDER, "declined": True}  # charge fails with no fault injected
    report = crash_matrix(sagas.order, data=declined, check=sagas.books_balance, fail=[])
    assert report.ok, report.table()
    assert {row.case.failing for row in report.rows} == {None}
    ended = {row.status for row in report.rows if row.case.mode == "recover"}
    assert ended == {"compensated", "-"}  # "-": killed before anything was recorded
    assert "ship" not in report.table(only_failures=False)  # never reached


def test_the_same_saga_gives_the_same_matrix(crash_matrix: CrashMatrix) -> None:
    first = crash_matrix.plan(sagas.order, data=ORDER)
    assert first == crash_matrix.plan(sagas.order, data=ORDER)
    assert {c.failing for c in first} == {None, "reserve", "charge", "ship"}  # all may fail


def test_a_context_manager_saga(crash_matrix: CrashMatrix) -> None:
    report = crash_matrix(
        sagas.transfer, data=MONEY, check=sagas.money_balances, modes=["recover"], fail=["credit"]
    )
    assert report.ok, report.table()
    points = {r.case.point for r in report.rows}
    assert {"after_success_commit:debit", "inside_action:credit", "inside_undo:debit"} <= points
    # Code cannot be resumed: recovery compensates what its block did not finish.
    interrupted = [r for r in report.rows if r.case.point == "after_action:credit"]
    assert {r.status for r in interrupted} == {"compensated"}


def test_an_async_saga(crash_matrix: CrashMatrix) -> None:
    report = crash_matrix(
        sagas.transfer_async, data=MONEY, check=sagas.money_balances, modes=["recover"], fail=[]
    )
    assert report.ok, report.table()
    assert len(report.rows) >= 10


@pytest.mark.postgres
@pytest.mark.skipif(
    not os.environ.get("SAGA_TEST_DATABASE_URL"), reason="the zombie mode needs PostgreSQL"
)
def test_a_zombie_that_wakes_after_recovery_changes_nothing(crash_matrix: CrashMatrix) -> None:
    report = crash_matrix(
        sagas.transfer, data=MONEY, check=sagas.money_balances, modes=["zombie"], fail=["credit"]
    )
    assert report.ok, report.table()
    assert {r.case.mode for r in report.rows} == {"zombie"}
    assert len(report.rows) >= 15


@pytest.mark.parametrize(
    ("target", "data", "check", "fail"),
    [
        (sagas.order, ORDER, sagas.books_balance, ["charge"]),
        (sagas.transfer, MONEY, sagas.money_balances, ["credit"]),
        (sagas.transfer_async, MONEY, sagas.money_balances, []),
    ],
    ids=["declarative", "context-manager", "async"],
)
def test_a_lost_answer_to_any_commit_changes_nothing(
    crash_matrix: CrashMatrix, target: Any, data: Any, check: Any, fail: list[str]
) -> None:
    """After every point, the next commit lands and its answer is lost: the store's
    retry recognises its own write, and each path ends exactly as it does untouched."""
    report = crash_matrix(target, data=data, check=check, modes=["lost_ack"], fail=fail)
    assert report.ok, report.table()
    assert {r.case.mode for r in report.rows} == {"lost_ack"}
    assert len(report.rows) >= 8
    for row in report.rows:
        assert row.status == ("completed" if row.case.failing is None else "compensated"), row
