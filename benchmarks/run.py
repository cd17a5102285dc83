"""Run the benchmarks: ``python -m benchmarks.run [--quick] [--scale]`` (see README.md).

Phases, in order: PostgreSQL (commit counts, then the timed workloads with
every system measured back to back in each repetition, then the
10,000-step saga), SQLite (the timed workloads), and with ``--scale`` the
million-saga run. Every system gets its own database, created and dropped
here. The report is printed and written to benchmarks/results/latest.md
(and latest.json).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from benchmarks import floor_bench, saga_bench
from benchmarks.common import (
    DEFAULT_POSTGRES,
    W1,
    WORKLOADS,
    System,
    Workload,
    database_name,
    dedicated_database,
    interleaved,
    per_saga_counts,
    run_with_budget,
    server_counters,
    session,
)
from benchmarks.report import Collected, as_json, describe_machine, render

RESULTS = Path(__file__).resolve().parent / "results"
Opener = Callable[[], System]


@dataclasses.dataclass(frozen=True)
class Plan:
    """How much of everything a run does."""

    n: dict[str, int]  # sagas per timed run, by workload (PostgreSQL)
    n_sqlite: dict[str, int]
    commit_n: dict[str, int]  # sagas per commit-count run, by workload
    wide_steps: int = 10_000
    # The round-two target: a 10,000-step DAG at concurrency 256 (a root, 256 chains, a join).
    wide_width: int = 256
    # The floor's commit bursts beside it: one connection each, under PostgreSQL's
    # default max_connections (100).
    burst_threads: int = 64
    budget: float = 60.0
    scale_sagas: int = 1_000_000
    scale_samples: int = 20


FULL = Plan(
    # w1 and w2 carry the ratio targets: 1,000 sagas a repetition, so that each system's
    # turn lasts long enough for the noise of a shared machine to average out.
    n={"w1": 1000, "w2": 1000, "w3": 150, "w4": 150, "w5": 5},
    n_sqlite={"w1": 200, "w2": 200, "w3": 60, "w4": 60, "w5": 2},
    commit_n={"w1": 100, "w3": 50, "w4": 50, "w5": 3},
)
QUICK = Plan(
    n={"w1": 20, "w2": 16, "w3": 10, "w4": 10, "w5": 1},
    n_sqlite={"w1": 20, "w2": 16, "w3": 10, "w4": 10, "w5": 1},
    commit_n={"w1": 10, "w3": 5, "w4": 5, "w5": 1},
    budget=5.0,
    scale_sagas=20_000,
    scale_samples=5,
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def dbos_available(run: Collected) -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        run.notes.append("DBOS is not installed (pip install -e '.[bench]'): no peer figures.")
        return False
    return True


# -- opening the systems -----------------------------------------------------------------


def postgres_openers(urls: dict[str, str], with_dbos: bool) -> dict[str, Opener]:
    openers: dict[str, Opener] = {
        "saga": lambda: saga_bench.SagaSystem(urls["saga"], "postgresql"),
        "floor": lambda: floor_bench.FloorSystem(urls["floor"], "postgresql"),
        "floor-1": lambda: floor_bench.FloorSystem(urls["floor"], "postgresql", single=True),
    }
    if with_dbos:
        from benchmarks import dbos_bench

        openers["dbos"] = lambda: dbos_bench.DbosSystem(urls["dbos"], "postgresql")
    return openers


def sqlite_openers(folder: str, with_dbos: bool) -> dict[str, Opener]:
    openers: dict[str, Opener] = {
        "saga": lambda: saga_bench.SagaSystem(f"sqlite:///{folder}/saga.db", "sqlite"),
        "floor": lambda: floor_bench.FloorSystem(f"{folder}/floor.db", "sqlite"),
        "floor-1": lambda: floor_bench.FloorSystem(f"{folder}/floor.db", "sqlite", single=True),
    }
    if with_dbos:
        from benchmarks import dbos_bench

        openers["dbos"] = lambda: dbos_bench.DbosSystem(f"sqlite:///{folder}/dbos.db", "sqlite")
    return openers


# -- phases ------------------------------------------------------------------------------


def count_commits(
    admin: str, urls: dict[str, str], openers: dict[str, Opener], plan: Plan, run: Collected
) -> None:
    """Server-side commits and rows written per saga, per sequential workload and system."""
    for workload in WORKLOADS:
        if workload.concurrency > 1:
            continue
        for name in ("saga", "dbos", "floor"):
            if name in openers:
                counted = count_one(admin, urls[name], openers[name], workload, plan, run)
                if counted is not None:
                    run.commits[("postgresql", workload.key, name)] = counted
                    log(f"  per saga {workload.key} {name}: {counted}")


def count_one(
    admin: str, url: str, opener: Opener, workload: Workload, plan: Plan, run: Collected
) -> dict[str, float] | None:
    database = database_name(url)
    try:
        return per_saga_counts(
            lambda: server_counters(admin, database),
            lambda: session(opener, workload),
            plan.commit_n[workload.key],
        )
    except Exception as error:  # one system's failure is reported, not fatal
        run.notes.append(f"counting {workload.key} on {database}: {error!r}")
        return None


def throughput(
    backend: str, openers: dict[str, Opener], n: dict[str, int], repeat: int, run: Collected
) -> None:
    """Each workload, ``repeat`` times; within a repetition the systems take turns."""
    systems: list[System] = []
    try:
        for name, opener in openers.items():
            try:
                systems.append(opener())
            except Exception as error:  # the others still run
                run.notes.append(f"{backend}: could not open {name}: {error!r}")
        for workload in WORKLOADS:
            for rep in range(repeat):
                timed_run(backend, systems, workload, n[workload.key], rep, run)
    finally:
        for system in systems:
            system.close()


def timed_run(
    backend: str, systems: list[System], workload: Workload, n: int, rep: int, run: Collected
) -> None:
    try:
        results = interleaved(systems, workload, n)
    except Exception as error:  # reported in the notes, the run goes on
        run.notes.append(f"{backend} {workload.key} rep {rep + 1}: {error!r}")
        log(f"  {workload.key} FAILED: {error!r}")
        return
    for result in results:
        run.results.setdefault((backend, workload.key, result.system), []).append(result)
        log(
            f"  {backend} {workload.key} rep {rep + 1} {result.system}:"
            f" {result.sagas_per_s:,.1f} sagas/s,"
            f" p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms"
        )


def wide(urls: dict[str, str], with_dbos: bool, plan: Plan, repeat: int, run: Collected) -> None:
    """The 10,000-step saga under a time budget (repeated only when it finishes)."""
    steps = plan.wide_steps
    for _ in range(repeat):
        key = f"wide-{uuid.uuid4().hex[:8]}"
        outcome = run_with_budget(
            "saga",
            steps,
            saga_bench.wide_child,
            (urls["saga"], steps, plan.wide_width, key),
            plan.budget,
            functools.partial(saga_bench.steps_done, urls["saga"], key),
        )
        run.wide.append(outcome)
        log(f"  wide saga: {outcome}")
        if not outcome.finished:
            break
    if with_dbos:  # once: the peer's figure for scale, not a target
        from benchmarks import dbos_bench

        workflow = f"wide-{uuid.uuid4().hex[:8]}"
        outcome = run_with_budget(
            "dbos",
            steps,
            dbos_bench.chain_child,
            (urls["dbos"], steps, workflow),
            plan.budget,
            functools.partial(dbos_bench.steps_done, urls["dbos"], workflow),
        )
        run.wide.append(outcome)
        log(f"  wide DBOS: {outcome}")
    for threads in (1, plan.burst_threads):
        label = f"floor: {steps + 1:,} single-row commits on {threads} connection(s)"
        run.bursts[label] = [
            floor_bench.commit_burst(urls["floor"], "postgresql", steps + 1, threads)
            for _ in range(repeat)
        ]
        log(f"  {label}: {run.bursts[label]}")


def postgres_phase(args: argparse.Namespace, plan: Plan, with_dbos: bool, run: Collected) -> None:
    with contextlib.ExitStack() as stack:
        names = ("saga", "dbos", "floor") if with_dbos else ("saga", "floor")
        urls = {n: stack.enter_context(dedicated_database(args.postgres, n)) for n in names}
        openers = postgres_openers(urls, with_dbos)
        log("PostgreSQL: commits per saga")
        count_commits(args.postgres, urls, openers, plan, run)
        log("PostgreSQL: throughput and latency")
        throughput("postgresql", openers, plan.n, args.repeat, run)
        log("PostgreSQL: the 10,000-step saga")
        wide(urls, with_dbos, plan, args.repeat, run)


def sqlite_phase(args: argparse.Namespace, plan: Plan, with_dbos: bool, run: Collected) -> None:
    with tempfile.TemporaryDirectory(prefix="saga-bench-") as folder:
        log(f"SQLite: throughput and latency (files in {folder})")
        throughput("sqlite", sqlite_openers(folder, with_dbos), plan.n_sqlite, args.repeat, run)


def scale_phase(args: argparse.Namespace, plan: Plan, run: Collected) -> None:
    from benchmarks.scale import run_scale

    with (
        dedicated_database(args.postgres, "scale") as full,
        dedicated_database(args.postgres, "empty") as empty,
    ):
        log(f"Scale: filling {plan.scale_sagas:,} finished sagas")
        run.scale = run_scale(
            full,
            empty,
            sagas=plan.scale_sagas,
            samples=plan.scale_samples,
            w1_n=plan.n["w1"],
            repeat=args.repeat,
            log=log,
        )


def profile_phase(args: argparse.Namespace, plan: Plan, run: Collected) -> None:
    with dedicated_database(args.postgres, "profile") as url:
        log("Profile: workload 1 on PostgreSQL under cProfile")
        run.profile = saga_bench.profile(url, W1, plan.n["w1"])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "profile-w1.txt").write_text(run.profile)


# -- entry point -------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument(
        "--postgres",
        default=DEFAULT_POSTGRES,
        metavar="URL",
        help="server for the PostgreSQL runs; a dedicated database per system is created and "
        "dropped there. An empty string skips PostgreSQL (default: %(default)s)",
    )
    parser.add_argument(
        "--sqlite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the workloads on SQLite too (default: yes)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run with tiny N (seconds)")
    parser.add_argument(
        "--scale", action="store_true", help="also the 1,000,000-saga run (several minutes)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (default: 3)")
    parser.add_argument(
        "--dbos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the DBOS peer (default: yes, when installed)",
    )
    parser.add_argument(
        "--budget", type=float, help="seconds allowed to each 10,000-step saga (default: 60)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile workload 1 (saga, PostgreSQL)"
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS / "latest.md", help="where the report goes"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = QUICK if args.quick else FULL
    if args.budget is not None:
        plan = dataclasses.replace(plan, budget=args.budget)
    run = Collected(
        command=shlex.join(["python", "-m", "benchmarks.run", *(argv or sys.argv[1:])]),
        started=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        repeat=args.repeat,
        plan=dataclasses.asdict(plan),
    )
    with_dbos = args.dbos and dbos_available(run)
    run.machine = describe_machine(args.postgres or None)
    began = time.perf_counter()
    if args.postgres:
        postgres_phase(args, plan, with_dbos, run)
    if args.sqlite:
        sqlite_phase(args, plan, with_dbos, run)
    if args.profile and args.postgres:
        profile_phase(args, plan, run)
    if args.scale and args.postgres:
        scale_phase(args, plan, run)
    run.notes.append(f"The whole run took {time.perf_counter() - began:.0f} s.")
    report = render(run)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    args.output.with_suffix(".json").write_text(as_json(run))
    log(f"report written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
