"""An operator's bulk compensate killed with SIGKILL half-way, then run again.

Three stuck ``cli-order`` sagas (tests/cli/steps.py). The real ``saga`` command
compensates them in batches of two and is killed (``SAGA_FAULTS``) right after the
second saga has durably turned compensating, before its first compensation starts: one
saga is compensated, one is left compensating under the dead process's lease, one
untouched. (Not between its two compensations: the end of one is committed with the
start of the next, and a started compensation whose policy allows one attempt
(``ONCE``) has spent it: a crash there leaves the saga failed, for an operator.)
Once that lease runs out (by the database clock), the same command run again finishes
the other two, and nothing is compensated twice.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.children import log_tail, spawn, wait_until_claimable
from tests.cli import steps
from tests.cli.conftest import APP, crashed, run_saga
from tests.crash.invariants import check_history

pytestmark = pytest.mark.crash

FAULT = "before_undo:charge#2"
"""The second saga is durably compensating; none of its compensations has started."""
LEASE = "2"
"""The command's lease (s): the dead process's claim runs out soon, and is waited for."""


def bulk_compensate(url: str) -> list[str]:
    return [
        *("--db", url, "--app", APP, "compensate"),
        *("--name", steps.ORDER.name, "--status", "running,compensating"),
        *("--batch-size", "2", "--yes", "--json"),
    ]


def test_a_bulk_action_killed_half_way_is_finished_by_running_it_again(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        stuck = [crashed(coord) for _ in range(3)]
        log = tmp_path / "bulk.log"
        with log.open("a") as output:
            child = spawn(
                "saga.cli",
                bulk_compensate(db_url),
                faults=FAULT,
                env={"SAGA_LEASE_TTL": LEASE},
                stdout=output,
                stderr=output,
            )
            assert child.wait(120) == -signal.SIGKILL, log_tail(log)
        statuses = Counter(coord.get(saga_id).status for saga_id in stuck)
        assert statuses == {
            SagaStatus.COMPENSATED: 1,
            SagaStatus.COMPENSATING: 1,
            SagaStatus.RUNNING: 1,
        }, log_tail(log)
        wait_until_claimable(coord)
        again = run_saga(*bulk_compensate(db_url), cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        report = json.loads(again.stdout)
        assert {item["result"] for item in report["sagas"]} == {"done"}
        assert report["total"] == 2  # the one finished before the kill no longer matches
        for saga_id in stuck:
            view = coord.get(saga_id)
            assert view.status is SagaStatus.COMPENSATED
            events = coord.store.events(saga_id)
            done = Counter(e.step for e in events if e.kind == "compensation_done")
            assert done == {"charge": 1, "reserve": 1}, f"{saga_id}: {done}"
            check_history(view, events)
