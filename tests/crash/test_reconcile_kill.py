"""A process killed with SIGKILL inside a reconcilable step, its saga then recovered.

tests/crash/reconcile_app.py charges a ledger (a SQLite file, outside the saga's
database) by idempotency key, and its reconcile function looks the charge up there.
Killed right after the charge reached the ledger, recovery records the step done
with the ledger's answer and does not charge again; killed after the start was
recorded but before the charge, recovery charges once. A pivot killed before it
acted, with one attempt allowed, is unwound: no person needs to mark it.
"""

from __future__ import annotations

import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus, StepStatus
from tests.children import log_tail, spawn
from tests.crash import reconcile_app
from tests.crash.invariants import check_history
from tests.integration.support import expire_lease

pytestmark = pytest.mark.crash


def killed_run(url: str, ledger: Path, kind: str, fault: str, log: Path) -> None:
    with log.open("a") as output:
        child = spawn(
            "tests.crash.reconcile_app",
            [url, str(ledger), kind],
            faults=fault,
            stdout=output,
            stderr=output,
        )
        assert child.wait(120) == -signal.SIGKILL, log_tail(log)


def charges(ledger: Path) -> int:
    with closing(sqlite3.connect(ledger)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, amount INT)")
        return int(db.execute("SELECT count(*) FROM charges").fetchone()[0])


@pytest.mark.parametrize(
    ("fault", "reconciled"),
    [("after_action:charge", "done"), ("after_start_commit:charge", "not_done")],
)
def test_recovery_asks_the_ledger_and_charges_once(
    db_url: str, tmp_path: Path, fault: str, reconciled: str
) -> None:
    ledger = tmp_path / "ledger.db"
    killed_run(db_url, ledger, "plain", fault, tmp_path / "run.log")
    with Coordinator(db_url) as coord:
        coord.register(reconcile_app.ORDER)
        (view,) = coord.list()
        assert view.step("charge").status is StepStatus.RUNNING
        expire_lease(coord, view.id)

        assert coord.recover().ok

        done = coord.get(view.id)
        assert done.status is SagaStatus.COMPLETED
        assert charges(ledger) == 1
        assert done.step("charge").result == {"charged": 42}
        events = coord.store.events(view.id)
        answers = [
            (e.detail or {}).get("reconciled") or (e.detail or {}).get("outcome")
            for e in events
            if e.step == "charge" and e.kind in ("step_reconciled", "step_succeeded")
        ]
        assert answers[0] == reconciled
        check_history(done, events)


def test_a_pivot_killed_before_it_acted_is_unwound_without_a_person(
    db_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    killed_run(db_url, ledger, "pivot", "after_start_commit:charge", tmp_path / "run.log")
    with Coordinator(db_url) as coord:
        coord.register(reconcile_app.PIVOT_ORDER)
        (view,) = coord.list()
        expire_lease(coord, view.id)

        coord.recover()

        done = coord.get(view.id)
        assert done.status is SagaStatus.COMPENSATED
        assert done.step("charge").status is StepStatus.FAILED  # known not to have acted
        assert done.step("reserve").status is StepStatus.COMPENSATED
        assert charges(ledger) == 0
        check_history(done, coord.store.events(view.id))
