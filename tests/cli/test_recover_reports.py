"""What ``saga recover`` tells an operator, through the real script, on both databases:
which ``--app`` a declarative saga needs, and how many sagas it really recovered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from saga.adapters.sql import tables
from sqlalchemy import update

from saga import Coordinator
from tests.cli.conftest import World, run_saga

NAMED = (
    "no definition of saga 'cli-order' here; "
    "pass --app tests.cli.steps or run from a process that imports it"
)


def _recover(world: World, cwd: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = run_saga("--db", world.url, "recover", "--json", *args, cwd=cwd)
    return done.returncode, json.loads(done.stdout)


def _reasons(answer: dict[str, Any]) -> dict[str, str | None]:
    return {item["id"]: item["reason"] for item in answer["sagas"]}


def test_recover_without_the_definition_names_the_module_that_defines_it(
    world: World, tmp_path: Path
) -> None:
    code, planned = _recover(world, tmp_path, "--dry-run")
    assert code == 0
    assert _reasons(planned)[world.stuck] == NAMED

    done = run_saga("--db", world.url, "recover", world.stuck, cwd=tmp_path)
    assert done.returncode == 1
    assert NAMED in done.stdout


def test_a_saga_started_before_its_module_was_recorded_keeps_the_general_advice(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    engine = coord.store.engine  # type: ignore[attr-defined]
    with engine.begin() as connection:  # as a saga started by an older release was recorded
        connection.execute(
            update(tables.events)
            .where(tables.events.c.saga_id == world.stuck, tables.events.c.kind == "saga_started")
            .values(detail=None)
        )
        connection.execute(  # PostgreSQL's writer folded the start into the saga row
            update(tables.instances)
            .where(tables.instances.c.id == world.stuck)
            .values(started_module=None)
        )
    code, planned = _recover(world, tmp_path, "--dry-run")
    assert code == 0
    reason = _reasons(planned)[world.stuck]
    assert reason == "no definition of saga 'cli-order' here; pass --app MODULE"


def test_recover_counts_only_what_it_recovered(world: World, tmp_path: Path) -> None:
    done = run_saga("--db", world.url, "recover", world.stuck, cwd=tmp_path)  # no --app
    assert done.returncode == 1
    last = done.stdout.strip().splitlines()[-1]
    assert last == "recovered 0 of 1: 0 resumed, 0 compensated, 0 failed, 1 skipped"

    code, answer = _recover(world, tmp_path, world.stuck)
    assert code == 1
    assert answer["summary"] == {
        "resumed": 0,
        "compensated": 0,
        "failed": 0,
        "skipped": 1,
        "planned": 0,
    }
    assert (answer["recovered"], answer["total"], answer["ok"]) == (0, 1, False)

    code, answer = _recover(world, tmp_path, "--dry-run", world.stuck)
    assert (answer["recovered"], answer["total"]) == (0, 1)  # a dry run recovers nothing


def test_recover_counts_what_it_recovered_beside_what_it_skipped(
    world: World, tmp_path: Path
) -> None:
    app = ("--app", "tests.cli.steps")
    done = run_saga("--db", world.url, *app, "recover", world.stuck, world.completed, cwd=tmp_path)
    assert done.returncode == 1
    last = done.stdout.strip().splitlines()[-1]
    assert last == "recovered 1 of 2: 1 resumed, 0 compensated, 0 failed, 1 skipped"
