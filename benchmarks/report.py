"""What a run collected, the targets it is checked against, and the Markdown report."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import math
import os
import platform
import sqlite3
import statistics
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    W1,
    W2,
    W3,
    W4,
    WORKLOADS,
    Budgeted,
    Result,
    Summary,
    Workload,
    median_ratio,
    server_facts,
    summarise,
)
from benchmarks.scale import GET, SCRAPE, ScaleReport

SYSTEMS = ("saga", "dbos", "floor", "floor-1")
TITLES = {
    "saga": "saga",
    "dbos": "DBOS",
    "floor": "floor (n+1 commits)",
    "floor-1": "floor (1 commit)",
}
BACKENDS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}
STUCK_SCAN, RECOVER_SCAN = "list(stuck=True)", "claim_expired (claims 1)"


@dataclasses.dataclass
class Collected:
    """Everything one run measured."""

    command: str
    started: str
    repeat: int
    machine: dict[str, str] = dataclasses.field(default_factory=dict)
    plan: dict[str, Any] = dataclasses.field(default_factory=dict)
    results: dict[tuple[str, str, str], list[Result]] = dataclasses.field(default_factory=dict)
    commits: dict[tuple[str, str, str], dict[str, float]] = dataclasses.field(default_factory=dict)
    wide: list[Budgeted] = dataclasses.field(default_factory=list)
    bursts: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    scale: ScaleReport | None = None
    profile: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def runs(self, backend: str, workload: str, system: str) -> list[Result]:
        return self.results.get((backend, workload, system), [])

    def summary(self, backend: str, workload: str, system: str) -> Summary | None:
        runs = self.runs(backend, workload, system)
        return summarise(runs) if runs else None

    def ratio(self, backend: str, workload: str, system: str, other: str) -> float | None:
        mine, theirs = self.runs(backend, workload, system), self.runs(backend, workload, other)
        if not mine or not theirs:
            return None
        return median_ratio(mine, theirs)

    def finished_wide(self, system: str) -> list[Budgeted]:
        return [w for w in self.wide if w.system == system and w.finished]

    def first_wide(self, system: str) -> Budgeted | None:
        return next((w for w in self.wide if w.system == system), None)

    @property
    def wide_width(self) -> int:
        """The wide saga's parallel branches (and ``max_concurrency``) in this run."""
        return int(self.plan.get("wide_width", 64))


# -- the machine -------------------------------------------------------------------------


def describe_machine(postgres: str | None) -> dict[str, str]:
    facts = {
        "CPU": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": _memory(),
        "OS": platform.platform(),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "SQLite": sqlite3.sqlite_version,
        "saga": f"{_version('saga')} ({_git_revision()})",
        "DBOS": _version("dbos"),
        "SQLAlchemy": _version("sqlalchemy"),
        "psycopg": _version("psycopg"),
    }
    if postgres:
        server = server_facts(postgres)
        version = server.pop("server_version")
        settings = ", ".join(f"{k}={v}" for k, v in server.items())
        facts["PostgreSQL"] = f"{version} on the same machine ({settings})"
    return facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "unknown"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git_revision() -> str:
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    revision = git("rev-parse", "--short", "HEAD") or "no git"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "saga", "adapters")
    return revision + (" + uncommitted changes in saga/ or adapters/" if dirty else "")


# -- targets -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    label: str
    measured: str
    verdict: str  # PASS, MISS or NOT RUN


def _check(label: str, value: float | None, passes: Callable[[float], bool], shown: str) -> Target:
    if value is None or math.isnan(value):
        return Target(label, "not measured", "NOT RUN")
    return Target(label, shown, "PASS" if passes(value) else "MISS")


def targets(run: Collected) -> list[Target]:
    """The open performance issue's targets (round two) this run can check, then the
    earlier round's that still hold (n+1 commits, the 1M-row scale checks, SQLite)."""
    pg = "postgresql"
    found = [_dbos_target(run, workload) for workload in (W1, W2, W4)]
    floor = ((W1, 0.70, "sequential"), (W3, 0.70, "sequential"), (W2, 0.50, "8 callers"))
    found += [_floor_target(run, workload, share, how) for workload, share, how in floor]
    for workload in WORKLOADS:
        counted = run.commits.get((pg, workload.key, "saga"))
        commits = counted["commits"] if counted else None
        if workload.fail_at is None and workload.concurrency == 1:
            n = workload.steps
            found.append(
                _check(
                    f"n+1 commits for an n-step saga: {n} steps -> {n + 1}",
                    commits,
                    functools.partial(_within, limit=n + 1 + 0.05),
                    f"{commits or 0:.2f} commits/saga",
                )
            )
    found.extend(_scale_targets(run.scale))
    ratio = run.ratio("sqlite", "w1", "saga", "dbos")
    found.append(
        _check(
            "SQLite: saga >= 2x DBOS on SQLite, workload 1",
            ratio,
            lambda v: v >= 2.0,
            f"{ratio or 0:.2f}x",
        )
    )
    w5 = run.summary(pg, "w5", "saga")
    seconds = w5.p50_ms / 1000 if w5 else None
    found.append(
        _check(
            "100-step saga under 0.1 s (PostgreSQL)",
            seconds,
            lambda v: v < 0.1,
            f"{seconds or 0:.3f} s",
        )
    )
    found.append(_wide_target(run))
    return found


_TARGETS_NOTE = (
    "Performance round two's targets (the open performance issue) this run checks, then "
    "the earlier round's that still hold. Round two's client CPU, WAL and bytes per saga "
    "are measured by `python -m benchmarks.where_time_goes`, its async and recovery "
    "figures by `benchmarks.async_wide` and `benchmarks.recovery` (docs/performance.md)."
)


def _dbos_target(run: Collected, workload: Workload) -> Target:
    ratio = run.ratio("postgresql", workload.key, "saga", "dbos")
    label = f"saga >= 6x DBOS sagas/s, workload {workload.key[1:]} (PostgreSQL)"
    return _check(label, ratio, lambda v: v >= 6.0, f"{ratio or 0:.2f}x")


def _floor_target(run: Collected, workload: Workload, share: float, how: str) -> Target:
    ratio = run.ratio("postgresql", workload.key, "saga", "floor")
    label = (
        f"saga >= {share:.0%} of the raw-psycopg floor (n+1 commits), "
        f"workload {workload.key[1:]} ({how})"
    )
    return _check(label, ratio, lambda v: v >= share, f"{(ratio or 0) * 100:.0f} %")


def _within(value: float, limit: float) -> bool:
    return value <= limit


def _wide_target(run: Collected) -> Target:
    label = (
        f"10,000-step saga ({run.wide_width} parallel branches,"
        f" max_concurrency={run.wide_width}) under 2 s (PostgreSQL)"
    )
    finished = run.finished_wide("saga")
    if finished:
        seconds = statistics.median(w.seconds for w in finished)
        verdict = "PASS" if seconds < 2.0 else "MISS"
        return Target(label, f"{seconds:.2f} s", verdict)
    first = run.first_wide("saga")
    if first is None:
        return Target(label, "not measured", "NOT RUN")
    progress = (
        f"not finished in {first.seconds:.0f} s: {first.steps_done:,} steps done"
        f" (about {first.extrapolated:.0f} s for all at that rate)"
    )
    return Target(label, progress, "MISS")


def _scale_targets(scale: ScaleReport | None) -> list[Target]:
    labels = {
        STUCK_SCAN: "list --stuck",
        RECOVER_SCAN: "the recover() scan (claim_expired)",
        GET: "get(id)",
        SCRAPE: "a metrics scrape (its gauges read from the store)",
    }
    found = []
    for key, name in labels.items():
        op = scale.operation(key) if scale else None
        found.append(
            _check(
                f"at 1M finished sagas: {name} under 50 ms",
                op.median_ms if op else None,
                lambda v: v < 50.0,
                f"{op.median_ms if op else 0:.1f} ms median ({op.max_ms if op else 0:.1f} max)",
            )
        )
    ratio = median_ratio(scale.full_w1, scale.empty_w1) if scale and scale.full_w1 else None
    found.append(
        _check(
            "at 1M finished sagas: workload 1 within 10 % of the empty-table figure",
            ratio,
            lambda v: v >= 0.9,
            f"{(ratio or 0) * 100:.0f} % of empty",
        )
    )
    return found


# -- rendering ---------------------------------------------------------------------------


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def _ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def _rate_range(summary: Summary) -> str:
    low, high = _rate(summary.min_rate), _rate(summary.max_rate)
    return f"{_rate(summary.sagas_per_s)} ({low}-{high})"


def _latencies(summary: Summary | None) -> str:
    return "-" if summary is None else f"{_ms(summary.p50_ms)} / {_ms(summary.p99_ms)}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _throughput(run: Collected, backend: str) -> list[str]:
    rows = []
    for workload in WORKLOADS:
        cells = [f"{workload.key}: {workload.title}"]
        for system in SYSTEMS:
            summary = run.summary(backend, workload.key, system)
            cells.append("-" if summary is None else _rate_range(summary))
        for other in ("dbos", "floor", "floor-1"):
            ratio = run.ratio(backend, workload.key, "saga", other)
            cells.append("-" if ratio is None else f"**{ratio:.2f}**")
        rows.append(cells)
    header = [
        "workload",
        *(f"{TITLES[s]} sagas/s" for s in SYSTEMS),
        "saga / DBOS",
        "saga / floor(n+1)",
        "saga / floor(1)",
    ]
    return _table(header, rows)


def _latency(run: Collected, backend: str) -> list[str]:
    rows = []
    for workload in WORKLOADS:
        cells = [workload.key, str(workload.floor_commits)]
        for system in SYSTEMS:
            cells.append(_latencies(run.summary(backend, workload.key, system)))
        rows.append(cells)
    header = ["workload", "floor commits", *(f"{TITLES[s]} p50 / p99 ms" for s in SYSTEMS)]
    return _table(header, rows)


def _commits(run: Collected) -> list[str]:
    rows = []
    for workload in WORKLOADS:
        if workload.concurrency > 1:
            continue
        cells = [f"{workload.key}: {workload.title}", str(workload.floor_commits)]
        for key in ("commits", "rows_written"):
            for system in ("saga", "dbos", "floor"):
                counted = run.commits.get(("postgresql", workload.key, system))
                cells.append("-" if counted is None else f"{counted[key]:.2f}")
        rows.append(cells)
    header = [
        "workload",
        "saga's protocol needs",
        "commits: saga",
        "DBOS",
        "floor (method check)",
        "rows written: saga",
        "DBOS",
        "floor",
    ]
    return _table(header, rows)


def _wide(run: Collected) -> list[str]:
    lines = []
    width = run.wide_width
    titles = (
        ("saga", f"saga, {width} branches, max_concurrency={width}"),
        ("dbos", "DBOS, sequential"),
    )
    for system, title in titles:
        finished = run.finished_wide(system)
        first = run.first_wide(system)
        if finished:
            seconds = statistics.median(w.seconds for w in finished)
            text = f"{seconds:.2f} s (median of {len(finished)})"
        elif first is not None and first.note:
            text = f"failed: {first.note}"
        elif first is not None:
            samples = ", ".join(f"{t:.0f} s: {n:,}" for t, n in first.progress)
            text = (
                f"did not finish within the {first.seconds:.0f} s budget: {first.steps_done:,} "
                f"of {first.steps:,} steps done (all of them would take about "
                f"{first.extrapolated:.0f} s at that rate); steps done over time: {samples}"
            )
        else:
            continue
        if first is not None:
            text += (
                ". Setup before the run (definition, registration, connecting):"
                f" {first.setup_seconds:.1f} s"
            )
        if first is not None and first.peak_in_flight is not None:
            text += f"; at most {first.peak_in_flight} steps in flight at once"
        lines.append(f"- {title}: {text}")
    for label, timings in run.bursts.items():
        lines.append(f"- {label}: {statistics.median(timings):.2f} s (median of {len(timings)})")
    return [*lines, ""]


def _scale(scale: ScaleReport) -> list[str]:
    lines = [
        f"Tables: {', '.join(f'{k} {v:,} rows' for k, v in scale.rows.items())}; "
        f"{scale.stuck} of the sagas are `running` with an expired lease. "
        f"Filled in {scale.fill_seconds:.0f} s, then `VACUUM (ANALYZE)`.",
        "",
    ]
    rows = [
        [f"`{op.label}`", f"{op.median_ms:.2f}", f"{op.max_ms:.2f}", str(op.samples), str(op.rows)]
        for op in scale.operations
    ]
    lines += _table(["operation", "median ms", "max ms", "samples", "rows returned"], rows)
    if scale.full_w1:
        empty, full = summarise(scale.empty_w1), summarise(scale.full_w1)
        ratio = median_ratio(scale.full_w1, scale.empty_w1)
        lines += _table(
            ["workload 1 (PostgreSQL)", "sagas/s", "p50 / p99 ms"],
            [
                ["empty tables", _rate(empty.sagas_per_s), _latencies(empty)],
                [f"{scale.sagas:,} finished sagas", _rate(full.sagas_per_s), _latencies(full)],
                ["ratio (median of per-repetition ratios)", f"**{ratio:.2f}**", ""],
            ],
        )
    lines += ["### EXPLAIN (ANALYZE, BUFFERS) of what each operation sends", ""]
    for label, text in scale.explains:
        lines += [f"#### `{label}`", "", "```", text, "```", ""]
    return lines


def render(run: Collected) -> str:
    lines = [
        "# saga benchmarks",
        "",
        f"Run {run.started} with `{run.command}`; every figure is the median of "
        f"{run.repeat} repetitions, and every ratio the median of the per-repetition ratios; "
        "within a repetition the systems take turns, N/5 sagas at a time, so that they share "
        "the machine's changing load alike. "
        "Sagas/s columns show the median and, in brackets, the range over the repetitions.",
        "",
        "## Machine",
        "",
    ]
    lines += _table(["", ""], [[k, v] for k, v in run.machine.items()])
    lines += ["## Targets", "", _TARGETS_NOTE, ""]
    lines += _table(
        ["target", "measured", "result"], [[t.label, t.measured, t.verdict] for t in targets(run)]
    )
    for backend, title in BACKENDS.items():
        if not any(key[0] == backend for key in run.results):
            continue
        lines += [f"## {title}: throughput", ""]
        lines += _throughput(run, backend)
        lines += [f"## {title}: latency per saga", ""]
        lines += _latency(run, backend)
    if run.commits:
        lines += ["## Commits per saga, counted by the server (pg_stat_database.xact_commit)", ""]
        lines += _commits(run)
    if run.wide or run.bursts:
        lines += ["## Workload 5: the 10,000-step saga (PostgreSQL)", ""]
        lines += _wide(run)
    if run.scale is not None:
        lines += [f"## Scale: {run.scale.sagas:,} finished sagas (PostgreSQL)", ""]
        lines += _scale(run.scale)
    if run.profile:
        lines += ["## Profile of saga, workload 1 on PostgreSQL (cProfile)", "", "```"]
        lines += [run.profile.strip(), "```", ""]
    if run.notes:
        lines += ["## Notes", "", *(f"- {note}" for note in run.notes), ""]
    return "\n".join(lines)


def as_json(run: Collected) -> str:
    data = {
        "command": run.command,
        "started": run.started,
        "machine": run.machine,
        "plan": run.plan,
        "results": [dataclasses.asdict(r) for runs in run.results.values() for r in runs],
        "per_saga_counts": [
            {"backend": b, "workload": w, "system": s, **v} for (b, w, s), v in run.commits.items()
        ],
        "wide": [dataclasses.asdict(w) for w in run.wide],
        "bursts": run.bursts,
        "scale": None if run.scale is None else dataclasses.asdict(run.scale),
        "targets": [dataclasses.asdict(t) for t in targets(run)],
        "notes": run.notes,
    }
    return json.dumps(data, indent=2, default=str)
