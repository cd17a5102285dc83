"""Settings by environment, as a twelve-factor deployment gives them (saga.settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from saga import ConfigurationError, Coordinator
from tests.cli.conftest import World, one_error_line, run_saga


def test_the_lease_comes_from_saga_lease_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    monkeypatch.setenv("SAGA_LEASE_TTL", "45s")
    with Coordinator(url) as coord:
        assert coord.lease_ttl == 45.0
    with Coordinator(url, lease_ttl=7) as coord:  # an argument wins
        assert coord.lease_ttl == 7.0
    monkeypatch.setenv("SAGA_LEASE_TTL", "2d")
    with pytest.raises(ConfigurationError, match="SAGA_LEASE_TTL 172800s is out of range"):
        Coordinator(url)
    monkeypatch.setenv("SAGA_LEASE_TTL", "soon")
    with pytest.raises(ConfigurationError, match="SAGA_LEASE_TTL 'soon' is not a duration"):
        Coordinator(url)
    monkeypatch.delenv("SAGA_LEASE_TTL")
    with Coordinator(url) as coord:
        assert coord.lease_ttl == 30.0


def test_the_worker_and_the_app_come_from_the_environment(world: World, tmp_path: Path) -> None:
    refused = run_saga("--db", world.url, "worker", cwd=tmp_path, env={"SAGA_LEASE_TTL": "50ms"})
    assert refused.returncode == 2
    assert "SAGA_LEASE_TTL 0.05s is out of range" in one_error_line(refused.stderr)
    shown = run_saga(
        "--db", world.url, "show", world.failed, cwd=tmp_path, env={"SAGA_APP": "tests.cli.steps"}
    )
    assert shown.returncode == 0, shown.stderr
    assert "ship" in shown.stdout  # a step not started: listed because the app is known
