"""Exit codes of the real ``saga`` script where they once said "done" wrongly, on
SQLite and PostgreSQL: 0 done, 1 the operation failed or was refused, 2 usage.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

from saga import Coordinator, SagaStatus
from tests.cli.conftest import APP, REPO, World, run_saga, saga_command


def saga(world: World, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_saga("--db", world.url, "--app", APP, *args, cwd=cwd)


def test_recover_exits_1_when_a_saga_it_was_given_is_skipped(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    result = saga(world, "recover", world.stuck, world.completed, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"skipped      {world.completed} (cli-order): already completed" in result.stdout
    assert coord.get(world.stuck).status is SagaStatus.COMPLETED  # the other one was done


def test_recover_exits_1_when_it_skips_every_stuck_saga(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    before = {i: coord.get(i).epoch for i in (world.stuck, world.stuck_imperative)}
    result = run_saga("--db", world.url, "recover", "--json", cwd=tmp_path)  # no --app
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["skipped"] == 2
    assert report["ok"] is False
    assert {i: coord.get(i).epoch for i in before} == before  # nothing was claimed


def test_recover_exits_0_when_every_saga_is_recovered_and_when_none_is_stuck(
    world: World, tmp_path: Path
) -> None:
    done = saga(world, "recover", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    nothing = saga(world, "recover", cwd=tmp_path)
    assert nothing.returncode == 0, nothing.stdout + nothing.stderr
    assert nothing.stdout.strip() == "no stuck sagas"


def test_recover_dry_run_exits_0_even_when_it_would_skip(world: World, tmp_path: Path) -> None:
    result = run_saga("--db", world.url, "recover", "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["skipped"] == 2
    assert report["ok"] is False  # what a real run would report


def test_recover_records_its_claim_as_lease_claimed_naming_the_operator(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    result = saga(world, "recover", world.stuck, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    events = coord.history(world.stuck)
    assert [e.detail for e in events if e.kind == "operator_action"] == []
    (claim,) = [e for e in events if e.kind == "lease_claimed"]
    assert claim.detail is not None
    assert claim.detail["why"] == "operator recover"
    assert claim.detail["by"]
    assert claim.detail["host"]
    assert claim.detail["owner"]
    assert claim.epoch == 2
    history = saga(world, "history", world.stuck, cwd=tmp_path)
    who = f"{claim.detail['by']}@{claim.detail['host']}"
    line = f"lease claimed by {claim.detail['owner']} to operator recover (by {who}, epoch 2)"
    assert line in history.stdout


def test_db_without_a_subcommand_prints_usage_and_exits_2(world: World, tmp_path: Path) -> None:
    result = saga(world, "db", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "Usage: saga db [OPTIONS] COMMAND [ARGS]...",
        "saga: error: missing command: status, upgrade, downgrade or check (see `saga db --help`)",
    ]
    assert result.stdout == ""


def test_purge_declined_deletes_nothing_and_exits_1(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    before = {view.id for view in coord.list()}
    result = _answered("n", "--db", world.url, "purge", "--older-than", "0s", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Delete every completed, compensated saga" in result.stdout
    assert result.stderr.strip() == "saga: aborted"
    assert {view.id for view in coord.list()} == before


def _answered(answer: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real script with a terminal for stdin (purge asks only there), answered ``answer``."""
    controller, terminal = pty.openpty()
    try:
        os.write(controller, f"{answer}\n".encode())  # waits in the terminal until read
        return subprocess.run(
            [*saga_command(), *args],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)
