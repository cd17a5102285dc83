"""``saga worker --concurrency``: several stuck sagas finished at once, not one by one."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.cli import steps
from tests.cli.conftest import APP, REPO, expire, invoke, one_error_line, saga_command
from tests.cli.test_worker_and_demo import _read_line, _started, _wait_for

PARTIES = 4


def test_the_worker_finishes_stuck_sagas_side_by_side(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url, lease_ttl=600) as coord:
        ids = []
        for n in range(PARTIES):
            with pytest.raises(steps.SimulatedCrash):
                coord.run(steps.GATHERED, data={"parties": PARTIES}, key=f"g-{n}")
            record = coord.store.find("cli-gathered", f"g-{n}")
            assert record is not None
            expire(coord, record.id)
            ids.append(record.id)
        command = [*saga_command(), "--db", db_url, "--app", APP, "worker", "--interval", "0.1s"]
        command += ["--concurrency", str(PARTIES)]
        with _started(command, REPO) as worker:
            lines: list[str] = []
            _wait_for(lambda: " ready" in _read_line(worker, lines), timeout=120)
            # Each saga's step returns only once all four run it together.
            for saga_id in ids:
                _wait_for(lambda i=saga_id: coord.get(i).status is SagaStatus.COMPLETED, 180)
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=60)
        assert worker.returncode == 0, stderr
        assert "4 saga(s) at a time" in lines[0]
        assert "stopped after recovering 4 saga(s)" in stderr


def test_concurrency_must_be_at_least_one(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url):
        pass  # the tables exist
    result = invoke(db_url, "worker", "--concurrency", "0")
    assert result.exit_code == 2, result.output
    assert "--concurrency must be at least 1, not 0" in one_error_line(result.stderr)
