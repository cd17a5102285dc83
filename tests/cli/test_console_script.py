"""Every command once through the real ``saga`` console script, in a child process.

The in-process tests run every command on SQLite and PostgreSQL; these check
the script itself (arguments, exit codes, output when piped), so SQLite is
enough for them. The worker and the demo, which only run as processes, are in
test_worker_and_demo.py on both databases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.cli.conftest import APP, REPO, World, one_error_line, run_saga


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def saga(world: World, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_saga("--db", world.url, "--app", APP, *args, cwd=cwd)


def test_read_commands(world: World, tmp_path: Path) -> None:
    listed = saga(world, "list", "--stuck", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert {row["id"] for row in json.loads(listed.stdout)["sagas"]} == {
        world.stuck,
        world.stuck_imperative,
    }
    shown = saga(world, "show", world.stuck, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "IN DOUBT" in shown.stdout
    assert "\x1b[" not in shown.stdout  # no colour codes when not on a terminal
    history = saga(world, "history", world.completed, cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    assert history.stdout.splitlines()[-1].endswith("saga completed")
    diff = saga(world, "diff", world.completed, world.compensated, "--json", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert json.loads(diff.stdout)["only_left"] == ["pack", "ship"]


def test_recover_then_nothing_is_stuck(world: World, coord: Coordinator, tmp_path: Path) -> None:
    result = saga(world, "recover", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "recovered 2 of 2: 1 resumed, 1 compensated, 0 failed, 0 skipped" in result.stdout
    assert coord.get(world.stuck).status is SagaStatus.COMPLETED
    again = saga(world, "recover", "--dry-run", cwd=tmp_path)
    assert again.stdout.strip() == "no stuck sagas"


def test_recover_without_app_skips_sagas_it_cannot_run(world: World, tmp_path: Path) -> None:
    result = run_saga("--db", world.url, "recover", "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    reasons = {item["id"]: item["reason"] for item in json.loads(result.stdout)["sagas"]}
    assert "pass --app tests.cli.steps or run from" in reasons[world.stuck]
    assert "pass --app tests.cli.steps" in reasons[world.stuck_imperative]


def test_operator_actions(world: World, coord: Coordinator, tmp_path: Path) -> None:
    assert saga(world, "resume", world.stuck, cwd=tmp_path).returncode == 0
    assert coord.get(world.stuck).status is SagaStatus.COMPLETED
    assert saga(world, "compensate", world.stuck_imperative, cwd=tmp_path).returncode == 0
    assert coord.get(world.stuck_imperative).status is SagaStatus.COMPENSATED
    refused = saga(world, "cancel", world.completed, cwd=tmp_path)
    assert refused.returncode == 1
    assert "only a running saga can be cancelled" in one_error_line(refused.stderr)


def test_cancel_of_a_stuck_saga(world: World, coord: Coordinator, tmp_path: Path) -> None:
    result = saga(world, "cancel", world.stuck, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert coord.get(world.stuck).status is SagaStatus.CANCELLED


def test_ways_out_of_failed(world: World, coord: Coordinator, tmp_path: Path) -> None:
    blocked = saga(world, "retry-compensation", world.failed, cwd=tmp_path)
    assert blocked.returncode == 1
    assert "payment provider unreachable" in one_error_line(blocked.stderr)
    marked = saga(
        world,
        "mark-compensated",
        world.failed,
        "--step",
        "charge",
        "--reason",
        "refunded",
        cwd=tmp_path,
    )
    assert marked.returncode == 0, marked.stderr
    assert coord.get(world.failed).status is SagaStatus.COMPENSATED


def test_retry_compensation_after_the_cause_is_fixed(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    world.refund_blocker.unlink()
    result = saga(world, "retry-compensation", world.failed, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert coord.get(world.failed).status is SagaStatus.COMPENSATED


def test_purge_and_db(world: World, coord: Coordinator, tmp_path: Path) -> None:
    assert saga(world, "db", "upgrade", cwd=tmp_path).returncode == 0
    status = saga(world, "db", "status", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "up to date" in status.stdout
    unconfirmed = saga(world, "purge", "--older-than", "0s", cwd=tmp_path)
    assert unconfirmed.returncode == 2
    assert "--yes" in one_error_line(unconfirmed.stderr)
    purged = saga(
        world, "purge", "--older-than", "0s", "--status", "completed", "--yes", cwd=tmp_path
    )
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == "deleted 1 saga(s)"
    assert world.completed not in {view.id for view in coord.list()}


def test_python_dash_m_and_usage_errors_are_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "saga.cli", "show"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    # Before the database is looked at (there is none here): the saga was not named.
    assert "name the saga: an ID (or its first characters) or --key" in one_error_line(
        result.stderr
    )
