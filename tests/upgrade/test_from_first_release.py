"""A database the first release made, sagas in every state and some of them killed
mid-way, upgraded by ``saga db upgrade`` and finished by this release."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from saga.adapters.sql import revisions

from saga import Coordinator, SagaStatus, SchemaVersionError, admin
from tests.cli.conftest import invoke
from tests.upgrade import sagas

ROOT = Path(__file__).resolve().parents[2]
FIRST_RELEASE = "e1266f4"  # the first release's code, before schema version 2
TIMEOUT = 20.0

pytestmark = [pytest.mark.crash, pytest.mark.slow]


@pytest.fixture(scope="session")
def first_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first release's ``saga`` package, importable from the returned folder."""
    folder = tmp_path_factory.mktemp("first-release")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", FIRST_RELEASE, "saga", "adapters"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    # setuptools installs adapters/ as saga.adapters: the same, by a link.
    (folder / "saga" / "adapters").symlink_to(folder / "adapters", target_is_directory=True)
    return folder


def _old(first_release: Path, url: str, folder: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(first_release), str(ROOT)])}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.upgrade.old_child", url, str(folder), mode],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait(condition: Callable[[], bool], what: str, last: Callable[[], object] = str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {last()}")
        time.sleep(0.05)


def _ledger(folder: Path, tag: str) -> list[str]:
    lines = (folder / "ledger").read_text().splitlines()
    return [line.split()[1] for line in lines if line.split()[0] == tag]


def _statuses(coord: Coordinator) -> dict[str, SagaStatus]:
    return {view.key or "": view.status for view in coord.list(limit=100)}


def test_a_first_release_database_is_upgraded_and_every_saga_finished(
    db_url: str, first_release: Path, tmp_path: Path
) -> None:
    finished = _old(first_release, db_url, tmp_path, "finished")
    output, _ = finished.communicate(timeout=TIMEOUT)
    assert finished.returncode == 0, output
    assert f"saga from {first_release}" in output  # the old code ran, not this one
    blocked = _old(first_release, db_url, tmp_path, "blocked")
    for tag in ("running", "compensating", "manual"):
        _wait(lambda tag=tag: (tmp_path / f"reached-{tag}").exists(), f"{tag} to block")
    blocked.send_signal(signal.SIGKILL)
    blocked.communicate(timeout=TIMEOUT)
    assert blocked.returncode == -signal.SIGKILL

    coord = Coordinator(db_url, lease_ttl=5.0)
    coord.register(sagas.transfer)
    try:
        with pytest.raises(SchemaVersionError, match="run `saga db upgrade` first"):
            coord.list()
        status = invoke(db_url, "db", "status")
        assert "version 1 of a release before migrations (revision 0001)" in status.stdout
        upgraded = invoke(db_url, "db", "upgrade")
        assert upgraded.exit_code == 0, upgraded.stderr
        assert "applied 0002, 0003" in upgraded.stdout
        trusted = ["tests.upgrade.sagas"]  # the context-manager saga's compensations
        _finish_everything(Coordinator(db_url, lease_ttl=5.0, trusted_modules=trusted), tmp_path)
    finally:
        coord.close()


def _finish_everything(coord: Coordinator, folder: Path) -> None:
    coord.register(sagas.transfer)
    (folder / "release").touch()  # the killed steps do not block again
    (folder / "refund-broken-failed").unlink()
    try:
        assert coord.store.schema_version() == revisions.HEAD
        before = _statuses(coord)
        assert before == {
            "completed": SagaStatus.COMPLETED,
            "compensated": SagaStatus.COMPENSATED,
            "failed": SagaStatus.FAILED,
            "cancelled": SagaStatus.CANCELLED,
            "running": SagaStatus.RUNNING,
            "compensating": SagaStatus.COMPENSATING,
            "manual": SagaStatus.RUNNING,
        }

        reports = []

        def recovered() -> bool:
            reports.append(coord.recover())  # claims each killed saga once its lease expired
            return not coord.list(status=["running", "compensating"])

        _wait(recovered, "the killed sagas to be recovered", lambda: reports[-1])
        failed = next(v for v in coord.list(status="failed"))
        admin.retry_compensation(coord, failed.id)
        fresh = coord.run(sagas.transfer, {"dir": str(folder), "tag": "new"}, key="new")
        assert fresh.status is SagaStatus.COMPLETED
        assert _statuses(coord) == {
            "completed": SagaStatus.COMPLETED,
            "compensated": SagaStatus.COMPENSATED,
            "failed": SagaStatus.COMPENSATED,
            "cancelled": SagaStatus.CANCELLED,
            "running": SagaStatus.COMPLETED,  # resumed forward: on_crash="resume"
            "compensating": SagaStatus.COMPENSATED,
            "manual": SagaStatus.COMPENSATED,  # only its own code could have continued it
            "new": SagaStatus.COMPLETED,
        }
        assert _ledger(folder, "running") == ["debit", "hold", "credit"]
        assert _ledger(folder, "compensating") == ["debit", "hold", "unhold", "refund"]
        assert _ledger(folder, "failed") == ["debit", "hold", "unhold", "refund"]
        assert _ledger(folder, "manual") == ["reserve", "unreserve"]
        assert _ledger(folder, "cancelled") == ["debit", "hold", "unhold", "refund"]
    finally:
        coord.close()
