"""The benchmark's saga workload still runs (no timing is checked: timing belongs in benchmarks)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import saga_bench
from benchmarks.common import W1, Result


def test_saga_workload_1_runs_and_reports_its_figures(tmp_path: Path) -> None:
    result = saga_bench.run(f"sqlite:///{tmp_path}/bench.db", W1, n=3, backend="sqlite")

    assert isinstance(result, Result)
    assert (result.system, result.backend, result.workload) == ("saga", "sqlite", "w1")
    assert result.n == 3
    assert result.concurrency == 1
    assert result.seconds > 0
    assert result.sagas_per_s > 0
    assert 0 < result.p50_ms <= result.p99_ms
