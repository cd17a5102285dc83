"""The recovery worker and the demo, through the real console script, on both databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import tenacity

from saga import Coordinator, SagaStatus
from tests.cli.conftest import APP, REPO, World, run_saga, saga_command

UNREACHABLE = "postgresql+psycopg://postgres:s3cr3t@127.0.0.1:1/x"


def test_worker_recovers_stuck_sagas_and_stops_on_sigterm(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    command = [*saga_command(), "--db", world.url, "--app", APP, "worker", "--interval", "0.1s"]
    with _started(command, tmp_path) as worker:
        _wait_for(lambda: coord.get(world.stuck).status is SagaStatus.COMPLETED)
        _wait_for(lambda: coord.get(world.stuck_imperative).status is SagaStatus.COMPENSATED)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    assert "SIGTERM: handing the sagas in hand back at their next step, then stopping" in stderr
    assert "stopped after recovering 2 saga(s)" in stderr
    assert coord.list(stuck=True) == []


def test_worker_logs_json_lines_to_a_file_with_every_saga_event(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    command = [*saga_command(), "--db", world.url, "--app", APP, "worker", "--interval", "0.1s"]
    command += ["--log-format", "json", "--log-file", str(log)]
    with _started(command, tmp_path) as worker:
        _wait_for(lambda: coord.get(world.stuck).status is SagaStatus.COMPLETED)
        _wait_for(lambda: coord.get(world.stuck_imperative).status is SagaStatus.COMPENSATED)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    told = {(line.get("saga_id"), line.get("event")) for line in lines}
    assert (world.stuck, "lease_claimed") in told
    assert (world.stuck, "saga_completed") in told
    assert (world.stuck_imperative, "saga_compensated") in told
    said = [line["message"] for line in lines if line["logger"] == "saga.worker"]
    assert any("stopped after recovering 2 saga(s)" in text for text in said)
    assert all(line["level"] in ("INFO", "WARNING", "ERROR") for line in lines)


def test_worker_backs_off_while_the_database_is_down_and_stops_on_sigint(tmp_path: Path) -> None:
    command = [*saga_command(), "--db", UNREACHABLE, "worker", "--interval", "0.1s"]
    with _started(command, tmp_path) as worker:
        lines: list[str] = []
        assert worker.stderr is not None
        _wait_for(lambda: "database unavailable" in _read_line(worker, lines))
        worker.send_signal(signal.SIGINT)
        _, rest = worker.communicate(timeout=30)
    assert worker.returncode == 0, rest
    assert "Traceback" not in rest
    assert "s3cr3t" not in "".join(lines) + rest


def test_demo_runs_and_tells_each_scenario(db_url: str, tmp_path: Path) -> None:
    result = run_saga("--db", db_url, "demo", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "=> completed: card charged 59.90 once" in result.stdout
    assert "=> compensated (failed at charge_card)" in result.stdout
    assert "killed by SIGKILL" in result.stdout
    assert "step charge_card in doubt (attempt 1)" in result.stdout
    assert "charged the card once" in result.stdout


def test_demo_runs_twice_on_the_embedded_default_database(tmp_path: Path) -> None:
    for _ in range(2):
        result = run_saga("demo", cwd=tmp_path, env={"SAGA_DATABASE_URL": ""})
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.startswith("saga demo on sqlite:///saga.db")
    assert (tmp_path / "saga.db").exists()


# -- helpers --------------------------------------------------------------------------------


class _started:
    """A child process that is killed if the test leaves without stopping it."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )

    def __enter__(self) -> subprocess.Popen[str]:
        return self.process

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)


def _read_line(process: subprocess.Popen[str], lines: list[str]) -> str:
    assert process.stderr is not None
    lines.append(process.stderr.readline())
    return lines[-1]


def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds (a wait for an event, not a timing assertion)."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda held: not held),
        wait=tenacity.wait_fixed(0.05),
        stop=tenacity.stop_after_delay(timeout),
        reraise=True,
    )
    try:
        retrying(condition)
    except tenacity.RetryError:
        pytest.fail(f"condition never held within {timeout}s")
