"""Instant takeover: a saga whose process was killed is taken at once, not after its lease.

A real owner process runs a saga and is SIGKILLed as a step has started. Its lease is
600 s, so no lease running out can be what lets anyone through: a caller re-running the
saga's key (the default 30 s lease) gets the saga at once instead of ``SagaBusyError``
(a declarative saga by ``coord.run(..., key=...)``, a context-manager saga by
re-entering its block), and a running ``saga worker`` finishes it. An owner that is
alive but frozen (SIGSTOP at the same point) keeps its saga, also behind PgBouncer
after every server connection it used was closed. On PostgreSQL the owner's death is
its liveness session's end; on SQLite its pid's.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from saga import Coordinator, SagaBusyError, SagaStatus
from tests.children import log_tail, spawn, wait_until_stopped
from tests.cli.conftest import REPO, saga_command
from tests.cli.test_worker_and_demo import _wait_for
from tests.crash import takeover_child
from tests.crash.takeover_child import FAULT

OWNER_LEASE = "600"
"""The owner's lease (s): far longer than any test waits, so only its death lets a claim in."""


def _owner(kind: str, url: str, key: str, log: Path, freeze: bool) -> subprocess.Popen[str]:
    env = {"SAGA_LEASE_TTL": OWNER_LEASE}
    argv = [kind, url, key, *(["--freeze"] if freeze else [])]
    with log.open("a") as output:
        return spawn(
            "tests.crash.takeover_child",
            argv,
            faults="" if freeze else FAULT,
            env=env,
            stdout=output,
            stderr=output,
        )


@pytest.fixture
def caller(db_url: str) -> Iterator[Coordinator]:
    with Coordinator(db_url, lease_ttl=30.0) as coord:
        coord.register(takeover_child.order)
        yield coord


def _rerun(kind: str, coord: Coordinator, key: str) -> object:
    if kind == "declarative":
        view = coord.run(takeover_child.order, data={"item": key}, key=key)
        assert view.status is SagaStatus.COMPLETED
        return view.results["charge"]
    return takeover_child.trip(coord, key)


EXPECTED = {"declarative": "C-k1", "block": ("seat-k1", "paid-k1")}


@pytest.mark.parametrize("kind", ["declarative", "block"])
def test_a_killed_owners_saga_is_taken_at_once_by_its_key(
    kind: str, db_url: str, caller: Coordinator, tmp_path: Path
) -> None:
    log = tmp_path / "owner.log"
    owner = _owner(kind, db_url, "k1", log, freeze=False)
    assert owner.wait(60) == -signal.SIGKILL, log_tail(log)
    stuck = caller.get(key="k1")
    assert stuck.status is SagaStatus.RUNNING
    assert stuck.owner is not None
    assert _rerun(kind, caller, "k1") == EXPECTED[kind]  # not SagaBusyError
    history = caller.history(stuck.id)
    claims = [event for event in history if event.kind == "lease_claimed"]
    assert claims
    assert claims[-1].detail["owner"] == caller.owner


@pytest.mark.parametrize("kind", ["declarative", "block"])
def test_a_live_frozen_owner_keeps_its_saga(
    kind: str, db_url: str, caller: Coordinator, tmp_path: Path
) -> None:
    log = tmp_path / "owner.log"
    owner = _owner(kind, db_url, "k1", log, freeze=True)
    try:
        wait_until_stopped(owner)
        with pytest.raises(SagaBusyError):
            _rerun(kind, caller, "k1")
        assert caller.recover().outcomes == []  # nor does recovery take it
        assert caller.get(key="k1").status is SagaStatus.RUNNING
    finally:
        owner.kill()
        owner.wait(60)


def test_a_running_worker_takes_a_killed_owners_saga(db_url: str, tmp_path: Path) -> None:
    command = [*saga_command(), "--db", db_url, "--app", "tests.crash.takeover_child"]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("SAGA_LEASE_TTL", None)  # the worker's lease: the default 30 s
    with (tmp_path / "worker.err").open("w") as err:
        worker = subprocess.Popen(
            [*command, "worker", "--interval", "0.1s"], cwd=tmp_path, env=environment, stderr=err
        )
    try:
        log = tmp_path / "owner.log"
        owner = _owner("declarative", db_url, "k1", log, freeze=False)
        assert owner.wait(60) == -signal.SIGKILL, log_tail(log)
        with Coordinator(db_url) as reader:
            # Well inside the owner's 600 s lease: only its death lets the worker in.
            _wait_for(lambda: reader.get(key="k1").status is SagaStatus.COMPLETED, timeout=60)
            view = reader.get(key="k1")
            assert view.owner is None
            assert view.results["charge"] == "C-k1"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)


@pytest.mark.postgres
@pytest.mark.pgbouncer
def test_behind_pgbouncer_a_live_owner_is_never_taken_for_dead(
    bouncer_url: str, bounced_database: str, tmp_path: Path
) -> None:
    """The pooler's server connection an owner's session ran on may close while the owner
    lives: the owner records nothing there, so closing them all takes nothing from it."""
    log = tmp_path / "owner.log"
    owner = _owner("declarative", bouncer_url, "k1", log, freeze=True)
    try:
        wait_until_stopped(owner)
        engine = create_engine(bounced_database)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        engine.dispose()
        with Coordinator(bouncer_url) as coord:
            coord.register(takeover_child.order)
            with pytest.raises(SagaBusyError):
                coord.run(takeover_child.order, data={"item": "k1"}, key="k1")
            assert coord.recover().outcomes == []
        with engine.begin() as connection:  # it recorded nothing that could say "dead"
            assert connection.execute(text("SELECT count(*) FROM saga_owners")).scalar() == 0
        engine.dispose()
    finally:
        owner.kill()
        owner.wait(60)
