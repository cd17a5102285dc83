"""``saga mark-compensated`` undoes the stack in order: only the step whose
compensation failed (the top of what is left to undo) can be marked. Through
the real script, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from saga import Coordinator, SagaStatus, StepStatus
from tests.cli.conftest import APP, World, one_error_line, run_saga


def saga(world: World, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_saga("--db", world.url, "--app", APP, *args, cwd=cwd)


def recorded(world: World, saga_id: str, cwd: Path) -> dict[str, Any]:
    """What ``show --json`` and ``history --json`` say, less the age, which moves on."""
    shown = json.loads(saga(world, "show", saga_id, "--json", cwd=cwd).stdout)
    shown.pop("age_seconds")
    return {
        "show": shown,
        "history": json.loads(saga(world, "history", saga_id, "--json", cwd=cwd).stdout),
    }


def test_a_step_below_the_failed_compensation_is_refused_and_nothing_changes(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    # The world's failed saga: pack failed, charge's refund failed for good, reserve waits below.
    before = recorded(world, world.failed, tmp_path)
    result = saga(
        world,
        "mark-compensated",
        world.failed,
        "--step",
        "reserve",
        "--reason",
        "released by hand",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    line = one_error_line(result.stderr)
    assert "step 'reserve'" in line
    assert "step 'charge', whose compensation failed, comes first" in line
    assert recorded(world, world.failed, tmp_path) == before
    view = coord.get(world.failed)
    assert view.status is SagaStatus.FAILED
    assert view.step("reserve").status is StepStatus.SUCCEEDED


def test_the_step_whose_compensation_failed_can_be_marked_then_the_rest_unwinds(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    result = saga(
        world,
        "mark-compensated",
        world.failed,
        "--step",
        "charge",
        "--reason",
        "refunded by hand",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    view = coord.get(world.failed)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("reserve").status is StepStatus.COMPENSATED
