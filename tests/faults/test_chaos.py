"""Connection chaos on PostgreSQL: every backend terminated every 50-500 ms.

While a thread terminates every other connection to the test's own database,
sagas go forward and compensate (declarative, transactional and
context-manager ones, their steps long enough for lease renewals), a
recoverer claims and finishes sagas left by a process killed with SIGKILL,
and the admin command reads (``saga list`` / ``saga show`` with ``--json``).
No saga may end ``failed`` or otherwise than planned because of it, nothing
may hang (every wait is bounded), and the ledger invariants hold. Once with
the store's default pools, once with pools of a single connection.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from saga.adapters.sql.postgres import PostgresDialect
from saga.adapters.sql.store import SqlSagaStore

from saga import Coordinator
from tests.children import ROOT, child_env, recover_until_settled
from tests.faults import figures, sagas, workload
from tests.faults.chaos import Terminator
from tests.faults.child import recoverer

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.timeout(240)]

OWNER_LEASE_TTL = 1.5
"""Owners renew every 0.5 s, so renewals happen while steps nap (and get terminated)."""

CLI_TIMEOUT = 90.0


def _recovering(coord: Coordinator, stop: threading.Event, errors: list[str]) -> None:
    """Claim and finish expired sagas until told to stop."""
    while not stop.wait(0.1):
        try:
            coord.recover()
        except Exception as error:  # reported by the test
            errors.append(f"recover: {type(error).__name__}: {error}")


SAGA = str(Path(sys.executable).parent / "saga")
"""The admin command, as installed next to this interpreter."""


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [SAGA, "--db", url, "--json", *args]
    return subprocess.run(
        command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=CLI_TIMEOUT
    )


def cli_works(tmp_path: Path) -> bool:
    """Whether ``saga --db URL list`` works here (the admin command is optional to this test)."""
    try:
        probe = _cli(f"sqlite:///{tmp_path}/probe.db", "list")
    except OSError:
        return False
    return probe.returncode == 0


def _reading(url: str, stop: threading.Event, errors: list[str], runs: list[int]) -> None:
    """``saga list`` and ``saga show`` under chaos: exit 0 and valid JSON every time."""
    while not stop.is_set() and len(runs) < 3:
        listed = _cli(url, "list", "--limit", "5")
        if listed.returncode != 0:
            errors.append(f"saga list exited {listed.returncode}: {listed.stderr[-500:]}")
            return
        shown = json.loads(listed.stdout)["sagas"]
        if shown:
            show = _cli(url, "show", shown[0]["id"])
            if show.returncode != 0:
                errors.append(f"saga show exited {show.returncode}: {show.stderr[-500:]}")
                return
            json.loads(show.stdout)
        runs.append(1)


def _coordinator(url: str, pool_size: int | None) -> Coordinator:
    store = SqlSagaStore(url, PostgresDialect(pool_size=pool_size))
    return Coordinator(store=store, lease_ttl=OWNER_LEASE_TTL, trusted_modules=[sagas.__name__])


@pytest.mark.parametrize("pool_size", [None, 1], ids=["default-pools", "pool-of-one"])
def test_connection_chaos_fails_no_saga_and_hangs_nothing(
    pg_database: str, ledger_path: str, tmp_path: Path, pool_size: int | None
) -> None:
    url = pg_database
    sagas.create_effects_table(url)
    workload.seed(url, ledger_path, 18, tmp_path, cm=6)
    seeded = workload.seeded_plans(ledger_path, 18, cm=6)
    planned = workload.plan(ledger_path, 24, nap=0.12)
    stop = threading.Event()
    errors: list[str] = []
    cli_runs: list[int] = []
    with_cli = cli_works(tmp_path)
    with _coordinator(url, pool_size) as coord:
        background = [threading.Thread(target=_recovering, args=(coord, stop, errors), daemon=True)]
        if with_cli:
            reader = threading.Thread(target=_reading, args=(url, stop, errors, cli_runs))
            background.append(reader)
        with Terminator(url) as chaos:
            runners = workload.Runners(coord, workload.in_threads(planned, 4)).start()
            for thread in background:
                thread.start()
            runners.join(timeout=120)
            stop.set()
            for thread in background:
                thread.join(CLI_TIMEOUT + 10)
                assert not thread.is_alive(), f"{thread.name} still running"
        assert chaos.terminated > 0, "the chaos thread terminated nothing"
        assert runners.errors == [], runners.errors
        assert errors == [], errors
        assert len(cli_runs) >= 1 or not with_cli, "the admin command never got to read"
    figures.count("admin command reads under chaos", len(cli_runs))
    if not with_cli:
        figures.count("chaos runs without the admin command (saga list did not work)")
    with recoverer(url) as calm:  # sagas whose lease ran out under chaos are finished here
        recover_until_settled(calm, timeout=60)
        workload.check_settled(calm, url, ledger_path, planned + seeded)
    figures.count("sagas taken over under chaos", runners.outcomes.count("lease lost"))
