"""Fixtures for the admin command: a database holding sagas in every interesting state."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from saga.adapters.sql import tables
from sqlalchemy import update
from typer.testing import CliRunner, Result

from saga import Coordinator, SagaFailed, SagaScope, SagaStatus
from saga._internal.ports import Commit, Event, SagaRecord
from saga.cli import app
from tests.cli import steps

REPO = Path(__file__).resolve().parents[2]
APP = "tests.cli.steps"


@dataclasses.dataclass(frozen=True)
class World:
    """One saga per state the operator meets, on one database."""

    url: str
    completed: str
    compensated: str
    failed: str
    stuck: str
    stuck_imperative: str
    refund_blocker: Path


def order(**steering: object) -> dict[str, object]:
    return {"sku": "A1", "amount": 42, **steering}


def crashed(coord: Coordinator, *, expired: bool = True, **steering: object) -> str:
    """A saga whose process "died" inside the charge step (its lease expired, unless not)."""
    key = f"stuck-{os.urandom(4).hex()}"
    with pytest.raises(steps.SimulatedCrash):
        coord.run(steps.ORDER, data=order(crash_at="charge", **steering), key=key)
    record = coord.store.find(steps.ORDER.name, key)
    assert record is not None
    if expired:
        expire(coord, record.id)
    return record.id


def crashed_imperative(coord: Coordinator) -> str:
    """A context-manager saga whose process "died" after its first step."""
    scope = coord.saga("cli-transfer", key="t-1")
    with pytest.raises(steps.SimulatedCrash):
        _debit_then_crash(scope)
    expire(coord, scope.id)
    return scope.id


def _debit_then_crash(scope: SagaScope) -> None:
    with scope:
        scope.step(steps.debit, "alice", 10, compensate=steps.credit_back)
        raise steps.SimulatedCrash("between steps")


def expire(coord: Coordinator, saga_id: str) -> None:
    """Make the lease look long expired, as if its process had died an hour ago."""
    engine = coord.store.engine  # type: ignore[attr-defined]
    with engine.begin() as connection:
        connection.execute(
            update(tables.instances)
            .where(tables.instances.c.id == saga_id)
            .values(lease_expires_at=0.0)
        )


def bare(coord: Coordinator, saga_id: str, name: str, key: str | None = None) -> None:
    """A saga with a chosen id (as any uuid4 could be), started and left running."""
    record = SagaRecord(saga_id, name, key, "imperative", SagaStatus.RUNNING, None, None, "x", 1)
    coord.store.create(record, Commit(saga_id, 1, events=(Event("saga_started"),)), 30.0)


def failed_saga(coord: Coordinator, blocker: Path) -> str:
    """pack fails; charge's refund fails too: the saga is ``failed`` with reserve still held."""
    blocker.touch()
    with pytest.raises(SagaFailed) as failure:
        coord.run(steps.ORDER, data=order(fail_at="pack", refund_blocked=str(blocker)), key="f-1")
    return failure.value.saga_id


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    coord = Coordinator(db_url, lease_ttl=5.0)
    try:
        completed = coord.run(steps.ORDER, data=order(), key="ok-1").id
        with pytest.raises(SagaFailed) as declined:
            coord.run(steps.ORDER, data=order(fail_at="charge"), key="no-1")
        blocker = tmp_path / "refund-blocked"
        yield World(
            url=db_url,
            completed=completed,
            compensated=declined.value.saga_id,
            failed=failed_saga(coord, blocker),
            stuck=crashed(coord),
            stuck_imperative=crashed_imperative(coord),
            refund_blocker=blocker,
        )
    finally:
        coord.close()


@pytest.fixture
def coord(world: World) -> Iterator[Coordinator]:
    """A second coordinator on the world's database, to check what the command did."""
    coordinator = Coordinator(world.url, lease_ttl=5.0)
    try:
        yield coordinator
    finally:
        coordinator.close()


def invoke(url: str, *args: str) -> Result:
    """``saga --db URL --app tests.cli.steps ARGS`` in this process."""
    return CliRunner().invoke(app, ["--db", url, "--app", APP, *args])


def saga_command() -> list[str]:
    """The installed console script next to this Python, else ``python -m saga.cli``."""
    script = Path(sys.executable).parent / "saga"
    return [str(script)] if script.exists() else [sys.executable, "-m", "saga.cli"]


def run_saga(
    *args: str, cwd: Path, timeout: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real ``saga`` command in a child process (the repository importable for --app)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    environment.pop("SAGA_FAULTS", None)
    return subprocess.run(
        [*saga_command(), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_error_line(stderr: str) -> str:
    """The single line an error must be, with no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("saga: error: ")
    return lines[0]
