"""``saga purge`` at scale: how fast it deletes, and what it costs the sagas running beside it.

Not a test: it prints figures. The tables are filled as the scale benchmark
fills them (``benchmarks.scale.fill``: one real finished 3-step saga copied in
SQL, each with its 3 step rows and 8 events). Then the real ``saga purge``
command deletes the finished sagas older than an hour, in its own process, while
workload 1 (3-step sagas, one caller) runs in this one. The purge process is
stopped (SIGSTOP) and continued (SIGCONT) so that the workload's slices
alternate with and without it on the same machine: the ratio of their medians
is the cost. Then purge finishes alone, and its rate is reported.

    python -m benchmarks.purge --postgres URL [--sagas 1000000] [--slices 6] [--n 300] [--pace 0.25]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import psycopg

from benchmarks.common import W1, libpq_url, measure, run_workload
from benchmarks.saga_bench import SagaSystem
from benchmarks.scale import fill
from benchmarks.web_page import fresh_schema


def _sagas(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as connection:
        row = connection.execute("SELECT count(*) FROM saga_instances").fetchone()
    return int(row[0]) if row else 0


def _alternate(
    purge: subprocess.Popen[bytes], call: Callable[[], None], slices: int, n: int
) -> tuple[list[float], list[float]]:
    """Workload 1's sagas/s in slices with purge running and with it stopped, in turn."""
    beside, alone = [], []
    for _ in range(slices):
        os.kill(purge.pid, signal.SIGCONT)
        beside.append(n / measure(call, n)[0])
        os.kill(purge.pid, signal.SIGSTOP)
        alone.append(n / measure(call, n)[0])
    return beside, alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", required=True, help="a saga URL (a schema of its own)")
    parser.add_argument("--sagas", type=int, default=1_000_000)
    parser.add_argument("--slices", type=int, default=6, help="slices with and without purge")
    parser.add_argument("--n", type=int, default=300, help="sagas per slice")
    parser.add_argument("--pace", default="0.25", help="saga purge --pace (1: flat out)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(fresh_schema(args.postgres))
        system = SagaSystem(url, "postgresql")
        stack.callback(system.close)
        run_workload(system, W1, 5)
        template = system.coord.list(status="completed", limit=1)[0].id
        filled = fill(url, template, args.sagas, 0, lambda line: print(line, flush=True))
        call = system.caller(W1)
        present = _sagas(url)
        command = [sys.executable, "-m", "saga", "--db", url, "purge", "--older-than", "1h"]
        purge = subprocess.Popen(
            [*command, "--pace", args.pace, "--yes"], stdout=subprocess.DEVNULL
        )
        beside, alone = _alternate(purge, call, args.slices, args.n)
        left, started = _sagas(url), time.perf_counter()
        os.kill(purge.pid, signal.SIGCONT)
        if purge.wait() != 0:
            raise SystemExit(f"saga purge exited {purge.returncode}")
        remaining = _sagas(url)
        seconds, gone = time.perf_counter() - started, left - remaining
    rows = sum(filled.values()) / max(1, filled["saga_instances"])
    deleted = present - remaining + args.slices * args.n * 2  # the workload's sagas stay
    print(
        f"saga purge --pace {args.pace} deleted {deleted:,} of {args.sagas:,} sagas"
        f" ({rows:.0f} rows each)"
    )
    print(
        f"  alone: {gone / seconds:,.0f} sagas/s ({gone * rows / seconds:,.0f} rows/s)"
        f" over its last {seconds:.0f} s"
    )
    ratio = statistics.median(beside) / statistics.median(alone)
    print(
        f"  workload 1 beside it: {statistics.median(beside):.0f} sagas/s, stopped:"
        f" {statistics.median(alone):.0f} sagas/s (median of {args.slices} slices of {args.n}):"
        f" {1 - ratio:+.1%} slower"
    )


if __name__ == "__main__":
    main()
