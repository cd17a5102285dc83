"""Two versions of one saga deployed side by side: instances started by version 1 and
killed mid-way finish by version 1, new ones run version 2, and removing version 1
while an instance still needs it is refused and listed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus, admin
from tests.cli.conftest import run_saga
from tests.upgrade import versions_v1, versions_v2
from tests.upgrade.test_from_first_release import ROOT, TIMEOUT, _ledger, _wait

pytestmark = [pytest.mark.crash, pytest.mark.slow]
V1, V2, EDITED = (f"tests.upgrade.versions_{n}" for n in ("v1", "v2", "v1_edited"))


def _saga(url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_saga("--db", url, *args, cwd=cwd)


def _start_v1_and_kill(url: str, folder: Path, count: int) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.upgrade.versions_child", url, str(folder), str(count)],
        cwd=ROOT,
        text=True,
    )
    for i in range(count):
        _wait(lambda i=i: (folder / f"reached-old-{i}").exists(), f"old-{i} to block")
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=TIMEOUT) == -signal.SIGKILL


def test_old_instances_finish_by_v1_new_ones_run_v2_and_removing_v1_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    _start_v1_and_kill(db_url, tmp_path, 3)
    (tmp_path / "release").touch()
    coord = Coordinator(db_url, lease_ttl=5.0)
    coord.register(versions_v1.transfer, versions_v2.transfer)  # v2 deployed beside v1
    try:
        fresh = coord.run("versioned-transfer", {"dir": str(tmp_path), "tag": "new"}, key="new")
        assert (fresh.version, fresh.fingerprint) == (2, versions_v2.transfer.fingerprint)
        assert _ledger(tmp_path, "new") == ["v2-debit", "v2-fee", "v2-credit"]
        old = {v.key: v for v in coord.list(status="running")}
        assert sorted(old) == ["old-0", "old-1", "old-2"]
        assert {(v.version, v.fingerprint) for v in old.values()} == {
            (1, versions_v1.transfer.fingerprint)
        }
        _wait(lambda: len(coord.list(stuck=True)) == 3, "the killed sagas' leases to expire")
        for key in ("old-0", "old-1"):  # recovered by v1, the version they started with
            assert coord.recover_saga(old[key].id).status is SagaStatus.COMPLETED
            assert _ledger(tmp_path, key) == ["v1-debit", "v1-credit"]

        # A deploy that removes v1 while old-2 still needs it: listed, and refused.
        checked = _saga(db_url, "--app", V2, "db", "check", "--json", cwd=tmp_path)
        assert checked.returncode == 1, checked.stderr
        [row] = json.loads(checked.stdout)["versions"]
        assert (row["name"], row["version"], row["instances"]) == ("versioned-transfer", 1, 1)
        assert row["state"] == "missing"
        text = _saga(db_url, "--app", V2, "db", "check", cwd=tmp_path).stdout
        assert "missing: no such version here" in text
        refused = _saga(db_url, "--app", V2, "recover", old["old-2"].id, cwd=tmp_path)
        assert refused.returncode == 1
        assert "started with definition version 1, which this process does not have " in (
            refused.stdout + refused.stderr
        )
        assert "(it has v2)" in refused.stdout + refused.stderr
        assert coord.get(old["old-2"].id).status is SagaStatus.RUNNING
        # v1 edited in place instead of versioned: listed as changed, and refused too.
        edited = _saga(db_url, "--app", EDITED, "--app", V2, "db", "check", cwd=tmp_path)
        assert edited.returncode == 1
        assert "changed in place" in edited.stdout
        both = _saga(db_url, "--app", V1, "--app", V2, "db", "check", cwd=tmp_path)
        assert both.returncode == 0, both.stdout + both.stderr

        assert coord.recover_saga(old["old-2"].id).status is SagaStatus.COMPLETED
        assert _ledger(tmp_path, "old-2") == ["v1-debit", "v1-credit"]
        assert admin.check_versions(coord).versions == ()
    finally:
        coord.close()
