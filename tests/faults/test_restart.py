"""PostgreSQL stopped with ``pg_ctl -m immediate`` (a crash) and started again, mid-saga.

On a cluster the test creates (initdb on a free port), the server is killed
while sagas are in the middle of a step, in the middle of a compensation,
and in the middle of a recovery of 200 sagas left by a process killed with
SIGKILL. Sagas are also started while it is down. It comes back a second
later; the store's retry (up to 30 s) waits it out and everything finishes
as planned, with the ledger invariants.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus, StepStatus
from tests import postgres
from tests.children import recover_until_settled
from tests.faults import figures, sagas, workload
from tests.faults.child import recoverer
from tests.faults.cluster import Cluster, throwaway_cluster, why_unavailable
from tests.faults.workload import Planned

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.timeout(240)]

DOWN = 1.0
"""How long the server stays down (s): well within the store's 30 s of retries."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = why_unavailable()
    if reason is not None:
        if postgres.required():
            pytest.fail(f"{reason}; {postgres.ENV_REQUIRED}=1 requires the restart tests")
        pytest.skip(reason)
    with throwaway_cluster() as made:
        yield made


def _wait_until(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _at_step(coord: Coordinator, step: str, status: StepStatus) -> int:
    return sum(
        1
        for view in coord.list(limit=100)
        for s in view.steps
        if s.name == step and s.status is status
    )


def _held(ledger_path: str, gate: Path, count: int, prefix: str, **misbehave: str) -> list[Planned]:
    expected = SagaStatus.COMPENSATED if "fail" in misbehave else SagaStatus.COMPLETED
    data = sagas.how(ledger_path, gate=str(gate), **misbehave)
    return [Planned(sagas.PLAIN.name, f"{prefix}-{n}", data, expected) for n in range(count)]


@pytest.mark.parametrize(
    ("where", "misbehave", "step", "status"),
    [
        ("mid-forward", {"hold": "s2"}, "s2", StepStatus.RUNNING),
        ("mid-compensation", {"fail": "s3", "hold_undo": "s2"}, "s2", StepStatus.COMPENSATING),
    ],
)
def test_a_server_crash_in_the_middle_of_sagas_is_waited_out(
    cluster: Cluster,
    ledger_path: str,
    tmp_path: Path,
    where: str,
    misbehave: dict[str, str],
    step: str,
    status: StepStatus,
) -> None:
    url = cluster.database()
    gate = tmp_path / "gate"
    held = _held(ledger_path, gate, 6, where, **misbehave)
    late = [
        Planned(sagas.PLAIN.name, f"late-{n}", sagas.how(ledger_path), SagaStatus.COMPLETED)
        for n in range(3)
    ]
    with Coordinator(url, lease_ttl=10.0) as coord:
        coord.create_schema()
        runners = workload.Runners(coord, workload.in_threads(held, len(held))).start()
        _wait_until(lambda: _at_step(coord, step, status) == len(held), f"6 sagas at {step}")
        cluster.stop("immediate")
        gate.touch()  # the held steps go on while the server is down: their writes must wait
        started_while_down = workload.Runners(coord, [late]).start()
        time.sleep(DOWN)
        cluster.start()
        runners.join(timeout=90)
        started_while_down.join(timeout=90)
        assert runners.errors == []
        assert started_while_down.errors == []
        workload.check_settled(coord, url, ledger_path, held + late)
    figures.count("restarts")


def test_a_server_crash_in_the_middle_of_a_recovery_is_waited_out(
    cluster: Cluster, ledger_path: str, tmp_path: Path
) -> None:
    url = cluster.database()
    workload.seed(url, ledger_path, 150, tmp_path, cm=50)
    seeded = workload.seeded_plans(ledger_path, 150, cm=50)
    errors: list[str] = []
    with recoverer(url) as coord:

        def recover() -> None:
            try:
                recover_until_settled(coord, timeout=120)
            except BaseException as error:  # reported by the test
                errors.append(f"{type(error).__name__}: {error}")

        thread = threading.Thread(target=recover, daemon=True)
        thread.start()
        _wait_until(
            lambda: len(coord.list(status=SagaStatus.COMPLETED, limit=60)) >= 60,
            "60 sagas recovered",
        )
        cluster.crash_and_restart(DOWN)
        thread.join(150)
        assert not thread.is_alive(), "the recovery never finished"
        assert errors == []
        workload.check_settled(coord, url, ledger_path, seeded)
