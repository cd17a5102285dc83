"""Instant takeover: a saga whose process was killed is taken at once, not after its lease.

A real owner process runs a saga with the default 30 s lease and is SIGKILLed as a step
has started; a caller re-running the saga's key (with a 600 s lease of its own, so that
no lease can be what let it through) gets the saga at once instead of ``SagaBusyError``:
a declarative saga by ``coord.run(..., key=...)``, a context-manager saga by re-entering
its block. An owner that is alive but frozen (SIGSTOP at the same point) keeps its saga.
On PostgreSQL the owner's death is its liveness session's end; on SQLite its pid's.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga import Coordinator, SagaBusyError, SagaStatus
from tests.children import log_tail, spawn, wait_until_stopped
from tests.crash import takeover_child
from tests.crash.takeover_child import FAULT

LONG_LEASE = 600.0
"""The caller's own lease: it has nothing to do with the owner's, which is 30 s."""


def _owner(kind: str, url: str, key: str, log: Path, freeze: bool) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "SAGA_LEASE_TTL"}  # the default 30 s
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
    with Coordinator(db_url, lease_ttl=LONG_LEASE) as coord:
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
    assert stuck.status is SagaStatus.RUNNING and stuck.owner is not None
    assert _rerun(kind, caller, "k1") == EXPECTED[kind]  # not SagaBusyError
    history = caller.history(stuck.id)
    claims = [event for event in history if event.kind == "lease_claimed"]
    assert claims and claims[-1].detail["owner"] == caller.owner


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
