"""Each example runs, with one command, on the embedded default and on PostgreSQL.

The examples check their own outcome (money conserved, everything
cancelled, one saga per key ...) and exit non-zero when it is not what they
promise; these tests run them in a subprocess and read that verdict.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import postgres

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(script: str, *args: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("SAGA_FAULTS", "SAGA_DATABASE_URL")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{output}"
    return output


@pytest.fixture(params=["embedded", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_args(request: pytest.FixtureRequest) -> list[str]:
    """No --db (the embedded default, in the test's directory), or --db on a fresh schema."""
    if request.param == "embedded":
        return []
    return ["--db", str(request.getfixturevalue("pg_url"))]


def test_order_placement(db_args: list[str], tmp_path: Path) -> None:
    output = run_example("order_placement.py", *db_args, cwd=tmp_path)

    assert "ok: order 1 completed, order 2 compensated, stock restored" in output
    assert "notify_customer  succeeded    attempts=3" in output


def test_trip_booking(db_args: list[str], tmp_path: Path) -> None:
    output = run_example("trip_booking.py", *db_args, cwd=tmp_path)

    assert "trip compensated: car failed" in output
    assert "ok: everything booked was cancelled" in output


def test_fastapi_app(db_args: list[str], tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="fastapi is not installed (pip install saga[examples])")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install saga[examples])")

    output = run_example("fastapi_app.py", *db_args, "demo", cwd=tmp_path)

    assert "ok: one saga per idempotency key" in output


@pytest.fixture(params=["embedded", pytest.param("postgres", marks=pytest.mark.postgres)])
def banks(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Two SQLite files (the default), or two fresh PostgreSQL databases."""
    if request.param == "embedded":
        yield []
        return
    server = str(request.getfixturevalue("postgres_server"))
    with postgres.isolated_database(server) as bank_a, postgres.isolated_database(server) as b:
        yield ["--db", bank_a, "--bank-b", b]


def test_money_transfer_survives_sigkill_and_saga_recover(banks: list[str], tmp_path: Path) -> None:
    output = run_example("money_transfer.py", *banks, "demo", cwd=tmp_path)

    assert "killed the transferring process" in output
    assert "the saga command is missing or failed" not in output, "saga recover did not work"
    assert "money conserved: 8000 == 8000" in output.rsplit("after recovery:", 1)[1]
    if not banks:
        assert (tmp_path / "bank_a.db").exists()
        assert (tmp_path / "bank_b.db").exists()
