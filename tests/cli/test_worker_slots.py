"""``saga worker`` while a saga in hand blocks: a free slot still recovers, and the
probes still answer (the real script, a step held on a file the test controls); a
worker on a schema of a newer release is refused at once."""

from __future__ import annotations

import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from saga.adapters.sql import revisions
from sqlalchemy import text

from saga import Coordinator, SagaStatus
from tests.cli import drain_steps
from tests.cli.conftest import REPO, expire, one_error_line, run_saga, saga_command
from tests.cli.steps import SimulatedCrash
from tests.cli.test_worker_and_demo import _read_line, _started, _wait_for

APP = "tests.cli.drain_steps"
PROBE_TIMEOUT = 1.0  # what a Kubernetes probe allows by default


def _stuck(coord: Coordinator, folder: Path, key: str) -> tuple[str, dict[str, str]]:
    """A ``drain-worker`` saga whose first owner died in its first step, lease expired:
    in the worker its step touches ``inside`` and waits for ``go``."""
    data = {name: str(folder / f"{key}-{name}") for name in ("inside", "go", "second")}
    with pytest.raises(SimulatedCrash):
        coord.run(drain_steps.slow, data=data, key=key)
    record = coord.store.find(drain_steps.slow.name, key)
    assert record is not None
    expire(coord, record.id)
    return record.id, data


def _worker(url: str, *options: str) -> list[str]:
    return [*saga_command(), "--db", url, "--app", APP, "worker", "--interval", "0.1s", *options]


def _probe(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_free_slot_recovers_while_another_saga_blocks(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url, lease_ttl=600) as coord:
        blocked, first = _stuck(coord, tmp_path, "first")
        with _started(_worker(db_url), REPO) as worker:
            _wait_for(lambda: Path(first["inside"]).exists(), timeout=120)
            # Stuck only now, while the worker's first pass holds the blocked saga.
            later, second = _stuck(coord, tmp_path, "later")
            Path(second["go"]).touch()
            _wait_for(lambda: coord.get(later).status is SagaStatus.COMPLETED, timeout=60)
            held = coord.get(blocked)
            assert held.status is SagaStatus.RUNNING
            assert not Path(first["second"]).exists()  # still inside its first step
            Path(first["go"]).touch()
            _wait_for(lambda: coord.get(blocked).status is SagaStatus.COMPLETED, timeout=120)
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=60)
        assert worker.returncode == 0, stderr
        assert coord.get(later).epoch == 2  # claimed once, by the worker
        assert "stopped after recovering 2 saga(s)" in stderr


def test_probes_answer_while_a_pass_is_busy(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url, lease_ttl=600) as coord:
        blocked, first = _stuck(coord, tmp_path, "first")
        command = _worker(db_url, "--metrics-port", "0")
        with _started(command, REPO) as worker:
            lines: list[str] = []
            _wait_for(lambda: "/metrics" in _read_line(worker, lines))
            base = lines[-1].split(" metrics on ")[1].strip().removesuffix("/metrics")
            _wait_for(lambda: Path(first["inside"]).exists(), timeout=120)
            # The saga in hand blocks for as long as the test wants: longer than a probe.
            _wait_for(lambda: _probe(base + "/readyz") == 200)  # its first pass is over
            for path in ("/livez", "/healthz"):
                assert _probe(base + path) == 200, path
            worker.send_signal(signal.SIGTERM)  # stopping: no longer ready, still alive
            _wait_for(lambda: "SIGTERM" in _read_line(worker, lines))
            _wait_for(lambda: _probe(base + "/readyz") == 503)
            assert _probe(base + "/livez") == 200
            assert coord.get(blocked).status is SagaStatus.RUNNING
            Path(first["go"]).touch()  # its step ends; the saga is handed back
            _, stderr = worker.communicate(timeout=60)
        assert worker.returncode == 0, stderr
        said = "".join(lines) + stderr
        assert f"saga {blocked} (drain-worker): handed back while running" in said


def test_a_worker_refuses_a_schema_of_a_newer_release(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url) as maker:
        maker.create_schema()
        with maker.store.engine.begin() as connection:  # type: ignore[attr-defined]
            connection.execute(text(f"UPDATE {revisions.VERSION_TABLE} SET version_num = '9001'"))
    result = run_saga("--db", db_url, "worker", "--interval", "0.1s", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "database unavailable" not in result.stderr
    assert " ready" not in result.stderr
    error = one_error_line(lines[-1])
    assert "at 9001, newer than this release of saga knows" in error
    assert f"(its newest is {revisions.HEAD}" in error
