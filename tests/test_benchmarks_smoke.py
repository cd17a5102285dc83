"""The benchmark's saga workload still runs (no timing is checked: timing belongs in benchmarks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import saga_bench, takeover
from benchmarks.common import W1, Result, dedicated_database, run_with_budget
from benchmarks.scale import GET, SCRAPE, run_scale
from tests.children import ROOT


def test_saga_workload_1_runs_and_reports_its_figures(tmp_path: Path) -> None:
    result = saga_bench.run(f"sqlite:///{tmp_path}/bench.db", W1, n=3, backend="sqlite")

    assert isinstance(result, Result)
    assert (result.system, result.backend, result.workload) == ("saga", "sqlite", "w1")
    assert result.n == 3
    assert result.concurrency == 1
    assert result.seconds > 0
    assert result.sagas_per_s > 0
    assert 0 < result.p50_ms <= result.p99_ms


SMALL = ("--sagas", "50", "--repeat", "1")


@pytest.mark.postgres
def test_the_web_list_benchmark_fills_and_fetches_the_page(postgres_server: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "benchmarks.web_list", "--postgres", postgres_server, *SMALL],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "list page with 50 finished sagas" in ran.stdout
    assert "counts, exact GROUP BY" in ran.stdout


@pytest.mark.postgres
def test_the_purge_benchmark_runs_purge_beside_the_workload(postgres_server: str) -> None:
    small = ("--sagas", "3000", "--slices", "1", "--n", "5")  # 1,560 older than an hour
    ran = subprocess.run(
        [sys.executable, "-m", "benchmarks.purge", "--postgres", postgres_server, *small],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"saga purge --pace 0.25 deleted 1,5\d\d of 3,000 sagas", ran.stdout), (
        ran.stdout
    )
    assert "workload 1 beside it" in ran.stdout


def test_the_takeover_benchmark_runs_and_reports_its_figures(tmp_path: Path) -> None:
    figures = takeover.measure(f"sqlite:///{tmp_path}/takeover.db", kills=2)

    assert len(figures) == 2
    assert all(seconds > 0 for seconds in figures)
    assert takeover.report("sqlite", figures).startswith("sqlite: 2 kills, SIGKILL to claim p50 ")


def test_the_wide_saga_reports_the_steps_it_had_in_flight_in_its_process(tmp_path: Path) -> None:
    """Counted in the child by an inline listener as each start and end is told: the
    chains after the root start together, so exactly ``max_concurrency`` (the database's
    start and finish times said 128 at 64)."""
    url, width = f"sqlite:///{tmp_path}/wide.db", 8
    outcome = run_with_budget(
        "saga",
        120,
        saga_bench.wide_child,
        (url, 120, width, "wide-smoke"),
        budget=120.0,
        progress=lambda: 0,
    )
    assert outcome.finished, outcome.note
    assert outcome.peak_in_flight == width


@pytest.mark.postgres
def test_the_scale_run_times_and_explains_every_operation_it_reports(postgres_server: str) -> None:
    with (
        dedicated_database(postgres_server, "scale") as full,
        dedicated_database(postgres_server, "empty") as empty,
    ):
        report = run_scale(full, empty, sagas=300, samples=2, w1_n=10, repeat=1, log=print)

    scrape = report.operation(SCRAPE)
    assert scrape is not None
    assert scrape.rows > 0  # the gauges' samples, read from the store
    explains = dict(report.explains)
    assert set(explains) == {op.label for op in report.operations}
    # get(id) goes through PostgreSQL's hot path (psycopg, not SQLAlchemy): still explained
    assert "saga_instances_pkey" in explains[GET]
    # the gauges count the unfinished and failed sagas alone, on the status index
    assert "'{running,compensating,failed,paused}'" in explains[SCRAPE]
    assert all("Execution Time" in text for text in explains.values())
