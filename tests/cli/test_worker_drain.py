"""SIGTERM to a worker in the middle of a saga: the step in progress ends, the saga is
handed back before its next step, and another process takes it at once (the worker's
lease had 30 s to run), through the real console script."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.cli import drain_steps
from tests.cli.conftest import REPO, expire, saga_command
from tests.cli.test_worker_and_demo import _wait_for


def test_sigterm_mid_saga_hands_the_lease_back_at_the_next_step(
    db_url: str, tmp_path: Path
) -> None:
    files = {name: str(tmp_path / name) for name in ("inside", "go", "second")}
    with Coordinator(db_url) as coord:
        with pytest.raises(drain_steps.SimulatedCrash):
            coord.run(drain_steps.slow, data=files, key="w-1")
        saga_id = coord.get(key="w-1").id
        expire(coord, saga_id)
    command = [*saga_command(), "--db", db_url, "--app", "tests.cli.drain_steps", "worker"]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("SAGA_LEASE_TTL", None)  # the default 30 s lease
    log = tmp_path / "worker.err"
    with log.open("w") as err:
        worker = subprocess.Popen(
            [*command, "--interval", "0.1s"], cwd=tmp_path, env=environment, stderr=err
        )
    try:
        _wait_for(lambda: Path(files["inside"]).exists())
        worker.send_signal(signal.SIGTERM)
        _wait_for(lambda: "SIGTERM: handing the sagas in hand back" in log.read_text())
        Path(files["go"]).touch()  # only now may the step in progress end
        worker.wait(timeout=60)
    finally:
        worker.kill()
    stderr = log.read_text()
    assert worker.returncode == 0, stderr
    assert f"saga {saga_id} (drain-worker): handed back while running" in stderr
    assert "stopped after recovering 0 saga(s), handing 1 back" in stderr
    with Coordinator(db_url) as taker:
        view = taker.get(saga_id)
        assert (view.status, view.owner) == (SagaStatus.RUNNING, None)
        assert [step.name for step in view.steps] == ["first"]  # second never started there
        taker.register(drain_steps.slow)
        (outcome,) = taker.recover().outcomes  # at once: no lease left to wait out
        assert outcome.status is SagaStatus.COMPLETED
    assert Path(files["second"]).read_text() == str(os.getpid())
