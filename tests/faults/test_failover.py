"""A primary failover, mid-saga, loses nothing: synchronous replication and a multi-host URL.

A primary and a synchronous standby (tests/faults/failover.py); sagas
finished before, sagas held in the middle of a step (plain ones, and ones
held inside their pivot) while the primary and all its backends are killed
with SIGKILL, and sagas started while no server accepts writes. The standby
is promoted; the coordinator's connections find it through the multi-host
URL (``target_session_attrs=read-write``), the store's retry waits out the
gap, and every saga ends as planned: none lost (the ones acknowledged before
the kill are on the new primary), no effect applied or undone twice, no
compensation without its action, nothing at or past a pivot undone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus, StepStatus
from tests import pgserver, postgres
from tests.faults import failover, figures, sagas, workload
from tests.faults.workload import Planned

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.timeout(240)]


@pytest.fixture
def pair() -> Iterator[failover.Pair]:
    binaries = pgserver.embedded_bindir() or pgserver.bindir()
    reason = pgserver.why_unavailable(binaries)
    if reason is not None:
        if postgres.required():
            pytest.fail(f"{reason}; {postgres.ENV_REQUIRED}=1 requires the failover test")
        pytest.skip(reason)
    with failover.synchronous_pair() as made:
        yield made


def _wait_until(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _running_at_s2(coord: Coordinator) -> int:
    return sum(
        1
        for view in coord.list(limit=100)
        for step in view.steps
        if step.name == "s2" and step.status is StepStatus.RUNNING
    )


def _held(ledger_path: str, gate: Path) -> list[Planned]:
    data = sagas.how(ledger_path, gate=str(gate), hold="s2")
    plain = [Planned(sagas.PLAIN.name, f"held-{n}", data, SagaStatus.COMPLETED) for n in range(4)]
    pivot = [
        Planned(sagas.PIVOTED.name, f"pivot-{n}", data, SagaStatus.COMPLETED) for n in range(3)
    ]
    return plain + pivot


def test_a_killed_primary_and_a_promoted_synchronous_standby_lose_nothing(
    pair: failover.Pair, ledger_path: str, tmp_path: Path
) -> None:
    url = pair.url()
    sagas.create_effects_table(url)
    before = workload.plan(ledger_path, 12, prefix="before")
    gate = tmp_path / "gate"
    held = _held(ledger_path, gate)
    late = workload.plan(ledger_path, 6, prefix="late")
    with Coordinator(url, lease_ttl=10.0) as coord:
        coord.create_schema()
        finished = workload.Runners(coord, workload.in_threads(before, 3)).start()
        finished.join(timeout=90)
        assert finished.errors == []
        runners = workload.Runners(coord, workload.in_threads(held, len(held))).start()
        _wait_until(lambda: _running_at_s2(coord) == len(held), f"{len(held)} sagas at s2")
        pair.kill_primary()
        gate.touch()  # the held steps go on with no server to write to
        started_while_down = workload.Runners(coord, workload.in_threads(late, 2)).start()
        pair.promote()
        runners.join(timeout=120)
        started_while_down.join(timeout=120)
        assert runners.errors == []
        assert started_while_down.errors == []
        workload.check_settled(coord, url, ledger_path, before + held + late)
    figures.count("failovers")
