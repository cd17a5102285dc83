"""Two builds of saga side by side: ``python -m benchmarks.ab OLD NEW``.

OLD and NEW are folders a build of saga was installed into (``pip install
--no-deps --target DIR CHECKOUT``). Each measurement runs in a child process
importing one build; the builds take turns, workload by workload, so that they
share the machine's changing load alike. Printed: each build's median sagas/s
(for ``wide``, one 10,000-step saga at concurrency 256: runs per second; for
``async``, ``AsyncCoordinator`` with 256 sagas in flight at once; for ``recover-N``, one
worker loop at concurrency N (4, ``saga worker``'s default, unless ``--only`` names
another) finishing 1,000 sagas a SIGKILL left stuck) and the
median of the per-turn ratios NEW/OLD (1.00: no change), and the client CPU (user +
system, ``resource.getrusage`` of the measuring process) per saga with its ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from benchmarks.common import DEFAULT_POSTGRES, W1, W2, W4, W5, dedicated_database

_CHILD = """
import json, resource, sys, time, uuid
def cpu():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime
from pathlib import Path
from benchmarks import saga_bench
from benchmarks.common import WORKLOADS
import saga
from saga import Coordinator
print(Path(saga.__file__).resolve())  # the parent checks that the build was measured
if sys.argv[1] == "wide":  # one 10,000-step saga: a root, 256 parallel chains, a join
    saga = saga_bench.wide_definition(int(sys.argv[3]), 256)
    with Coordinator(sys.argv[2]) as coord:
        coord.register(saga)
        began, spent = time.perf_counter(), cpu()
        coord.run(saga, key=uuid.uuid4().hex)
        print(json.dumps([1 / (time.perf_counter() - began), cpu() - spent]))
elif sys.argv[1] == "async":  # AsyncCoordinator: n 3-step sagas by 256 tasks at once
    import asyncio
    from saga import AsyncCoordinator, Saga
    async def noop(ctx):
        return None
    saga = Saga("ab-async-" + uuid.uuid4().hex[:6])
    for number in (1, 2, 3):
        saga.step(name=f"step{number}")(noop).compensation(noop)
    async def main(n):
        async with AsyncCoordinator(sys.argv[2]) as coord:
            await coord.run(saga)  # warm up: schema, connections, statements
            async def caller(count):
                for _ in range(count):
                    await coord.run(saga)
            began, spent = time.perf_counter(), cpu()
            await asyncio.gather(*(caller(n // 256) for _ in range(256)))
            done = 256 * (n // 256)
            return [done / (time.perf_counter() - began), (cpu() - spent) / done]
    print(json.dumps(asyncio.run(main(int(sys.argv[3])))))
elif sys.argv[1].startswith("recover-"):  # one worker loop finishing n stuck sagas
    from benchmarks import recovery
    concurrency = int(sys.argv[1].removeprefix("recover-"))
    recovery.copy_stuck(sys.argv[2], recovery.stuck_template(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(recovery.worker_rate(sys.argv[2], int(sys.argv[3]), concurrency)))
else:
    workload = next(w for w in WORKLOADS if w.key == sys.argv[1])
    spent = cpu()  # set-up included: the same for both builds, small against n sagas
    result = saga_bench.run(sys.argv[2], workload, int(sys.argv[3]), sys.argv[4])
    print(json.dumps([result.sagas_per_s, (cpu() - spent) / int(sys.argv[3])]))
"""


def measure(build: str, workload: str, url: str, n: int, backend: str) -> tuple[float, float]:
    """(sagas/s, client CPU seconds per saga) of one build."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([build, os.getcwd()])}
    # -P: ``-c`` would put the working directory first on the path, and a checkout's
    # own ``saga`` there would be measured in place of the build (it was, until
    # 2026-12-05: both sides of every A/B run before then ran the checkout).
    args = [sys.executable, "-P", "-c", _CHILD, workload, url, str(n), backend]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True)
    imported, result = out.stdout.strip().splitlines()[-2:]
    if not Path(imported).is_relative_to(Path(build).resolve()):
        raise SystemExit(f"the child measured {imported}, not the build in {build}")
    rate, cpu = json.loads(result)
    return float(rate), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--only", help="one workload: w1, w2, w4, w5, wide, async, recover-N")
    args = parser.parse_args()
    plan = [(W1.key, 600), (W2.key, 600), (W4.key, 300), (W5.key, 30), ("wide", 10_000)]
    plan += [("async", 1024), ("recover-4", 1000)]
    plan = [(key, n) for key, n in plan if args.only in (None, key)]
    if args.only and args.only.startswith("recover-"):  # any worker concurrency
        plan = [(args.only, 1000)]
    print(f"{'workload':<10} {'old/s':>9} {'new/s':>9} {'new/old':>8} {'':15}", end="")
    print(f"{'old cpu ms':>11} {'new cpu ms':>11} {'new/old':>8}")
    # A database each: the two builds may be of different schema revisions, and a
    # build refuses a schema newer than its own.
    tag = uuid.uuid4().hex[:6]
    with (
        dedicated_database(args.postgres, f"ab_old_{tag}") as old_url,
        dedicated_database(args.postgres, f"ab_new_{tag}") as new_url,
    ):
        urls = {args.old: old_url, args.new: new_url}
        for workload, n in plan:  # n: sagas (for "wide", its steps)
            turns = [_turn(args, workload, urls, n, turn) for turn in range(args.repeat)]
            print(_row(workload, turns))


Turn = tuple[tuple[float, float], tuple[float, float]]
"""One turn: (sagas/s, CPU s per saga) of the old build, then of the new."""


def _turn(args: argparse.Namespace, workload: str, urls: dict[str, str], n: int, turn: int) -> Turn:
    order = [args.old, args.new] if turn % 2 == 0 else [args.new, args.old]
    got = {build: measure(build, workload, urls[build], n, "postgresql") for build in order}
    return got[args.old], got[args.new]


def _row(workload: str, turns: list[Turn]) -> str:
    median = statistics.median
    ratios = [new[0] / old[0] for old, new in turns]
    cpu_ratios = [new[1] / old[1] for old, new in turns]
    old_cpu, new_cpu = median(o[1] for o, _ in turns), median(n[1] for _, n in turns)
    return (
        f"{workload:<10} {median(o[0] for o, _ in turns):>9.2f} "
        f"{median(n[0] for _, n in turns):>9.2f} {median(ratios):>8.3f}"
        f"  [{min(ratios):.3f}-{max(ratios):.3f}]"
        f" {old_cpu * 1000:>11.3f} {new_cpu * 1000:>11.3f} {median(cpu_ratios):>8.3f}"
    )


if __name__ == "__main__":
    main()
