"""``saga worker --metrics-port``: the real endpoint of a running worker, scraped while
it recovers a saga whose process died by SIGKILL, a retry and a compensation among it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from saga import Coordinator, SagaStatus
from tests.cli.conftest import APP, REPO, World, expire, invoke, one_error_line, saga_command
from tests.cli.test_worker_and_demo import _read_line, _started, _wait_for

_KILLED = """
import sys
from saga import Coordinator
from tests.cli import steps
data = {"sku": "K1", "amount": 7, "kill_at": "charge", "fail_attempts": {"charge": [2]}}
Coordinator(sys.argv[1], lease_ttl=600).run(steps.ORDER, data=data, key="killed-1")
"""


def _killed_saga(world: World, coord: Coordinator) -> str:
    """A saga whose process died by a real SIGKILL inside its charge step."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run([sys.executable, "-c", _KILLED, world.url], env=env, check=False)
    assert child.returncode == -signal.SIGKILL
    record = coord.store.find("cli-order", "killed-1")
    assert record is not None
    expire(coord, record.id)
    return record.id


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_workers_metrics_tell_what_it_recovered(
    world: World, coord: Coordinator, tmp_path: object
) -> None:
    killed = _killed_saga(world, coord)
    command = [*saga_command(), "--db", world.url, "--app", APP, "worker", "--interval", "0.1s"]
    command += ["--metrics-port", "0"]
    with _started(command, REPO) as worker:
        lines: list[str] = []
        _wait_for(lambda: "/metrics" in _read_line(worker, lines))
        endpoint = lines[-1].split(" metrics on ")[1].strip()
        _wait_for(lambda: coord.get(killed).status is SagaStatus.COMPLETED)
        _wait_for(lambda: coord.get(world.stuck).status is SagaStatus.COMPLETED)
        _wait_for(lambda: coord.get(world.stuck_imperative).status is SagaStatus.COMPENSATED)
        values = _samples(endpoint)
        # Ready once its first pass is over, which may end after the sagas it recovered.
        _wait_for(lambda: _health(endpoint.replace("/metrics", "/healthz")) == 200)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr

    def value(name: str, **labels: str) -> float | None:
        return values.get((name, tuple(sorted(labels.items()))))

    assert value("saga_claims_total", saga="cli-order", claimed_for="recovery") == 2
    assert value("saga_claims_total", saga="cli-transfer", claimed_for="recovery") == 1
    assert value("saga_sagas_ended_total", saga="cli-order", outcome="completed") == 2
    assert value("saga_sagas_ended_total", saga="cli-transfer", outcome="compensated") == 1
    # The killed saga's charge failed once more in the worker, and was retried there.
    assert (
        value("saga_step_attempts_total", saga="cli-order", step="charge", outcome="retried") == 1
    )
    assert value("saga_retries_total", saga="cli-order", step="charge", of="step") == 1
    assert (
        value("saga_step_attempts_total", saga="cli-order", step="ship", outcome="succeeded") == 2
    )
    assert value("saga_compensations_total", saga="cli-transfer", step="debit", outcome="done") == 1
    assert value("saga_recovery_wait_seconds_count", saga="cli-order") == 2
    # Gauges, read from the database: nothing in flight or stuck; the failed saga waits.
    assert value("saga_in_flight") == 0
    assert value("saga_stuck") == 0
    assert value("saga_failed") == 1
    assert value("saga_listener_errors_total") == 0
    assert not [key for key in values if "id" in dict(key[1]) or "key" in dict(key[1])]


def test_metrics_port_in_use_is_one_line(world: World) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke(world.url, "--app", APP, "worker", "--metrics-port", str(port))
    assert result.exit_code == 2, result.output
    assert f"--metrics-port {port}: Address already in use" in one_error_line(result.stderr)
