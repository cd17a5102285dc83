"""``saga recover --dry-run`` plans exactly what ``saga recover`` then does.

A saga with a pivot is killed (SIGKILL, by the crash tests' fault points) at
every durable point of its run, one saga per point, all on one database.
Then the real ``saga`` script plans their recovery (``--dry-run``) and
carries it out; each saga's plan must name how its recovery went: ``resume``
ends ``resumed``, ``compensate`` and ``continue-compensating`` end
``compensated``. Before the planner and the coordinator shared one rule, a
saga killed just after its pivot's start commit was planned "compensate"
under ``--compensate`` (or ``on_crash="compensate"``) and was then resumed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from saga import Coordinator
from tests.children import ForkServer, log_tail, wait_until_claimable
from tests.cli.conftest import run_saga
from tests.crash.child import MODULE, Case
from tests.crash.matrix import fault_specs

OUTCOME = {"resume": "resumed", "compensate": "compensated", "continue-compensating": "compensated"}

SHAPES = (
    Case("declarative", 3, pivot=True),
    Case("declarative", 3, pivot=True, on_crash="compensate"),
)


def _crash_at_every_point(fork_server: ForkServer, url: str, ledger: str, logs: Path) -> int:
    """One saga per (shape, fault point), each killed there; how many were killed."""
    killed = 0
    for shape in SHAPES:
        for spec in fault_specs(shape):
            key = f"{shape.on_crash}-{spec}"
            case = dataclasses.replace(shape, faults=spec, url=url, ledger=ledger, key=key)
            log = logs / f"{key.replace(':', '-')}.log"
            ended = fork_server.run(case, log)
            assert ended.killed, f"the child did not die at {spec}: {ended}\n{log_tail(log)}"
            killed += 1
    return killed


def _recover(url: str, cwd: Path, *flags: str) -> dict[str, Any]:
    done = run_saga("--db", url, "--app", MODULE, "recover", "--json", *flags, cwd=cwd)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.parametrize("compensate", [False, True], ids=["plain", "compensate"])
def test_dry_run_plans_what_recovery_does_at_every_crash_point(
    db_url: str, compensate: bool, fork_server: ForkServer, ledger_path: str, tmp_path: Path
) -> None:
    assert _crash_at_every_point(fork_server, db_url, ledger_path, tmp_path) > 10
    with Coordinator(db_url) as coord:
        wait_until_claimable(coord)
    flags = ("--compensate",) if compensate else ()

    planned = _recover(db_url, tmp_path, "--dry-run", *flags)
    done = _recover(db_url, tmp_path, *flags)

    plans = {item["id"]: item["plan"] for item in planned["sagas"]}
    results = {item["id"]: item["result"] for item in done["sagas"]}
    assert plans.keys() == results.keys()
    assert set(plans.values()) >= {"resume", "compensate"}, plans  # both ways are exercised
    wrong = {
        saga_id: f"planned {plans[saga_id]}, then {results[saga_id]}"
        for saga_id in plans
        if OUTCOME.get(plans[saga_id]) != results[saga_id]
    }
    assert not wrong, wrong
