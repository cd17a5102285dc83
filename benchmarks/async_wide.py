"""``AsyncCoordinator`` with 256 sagas in flight against the sync API's 8 threads, and
the memory an in-flight async saga holds, on PostgreSQL.

Not a test: it prints figures (docs/performance.md). In each repetition, back to back on
one database: ``--n`` 3-step no-op sagas from 8 threads sharing one ``Coordinator``
(workload 2), then from 256 tasks sharing one ``AsyncCoordinator`` (async steps); the
ratio is the median of the per-repetition ratios. Then 256 async sagas are held inside
their first step (it waits on an event) and ``tracemalloc`` says what the process holds
for them beyond what it held before they started: the memory per in-flight saga.

Also printed, for each side: the CPU one saga cost this process (``getrusage``) and the
PostgreSQL server (its processes' CPU from ``/proc``, when the server runs on this
machine), which says what bounds each figure: the event loop is one thread, so the
async rate cannot pass one core over the client CPU per saga, and both sides share the
machine's cores with the server.

    python -m benchmarks.async_wide [--postgres URL] [--n 2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

from benchmarks.common import DEFAULT_POSTGRES, W2, dedicated_database, measure
from benchmarks.saga_bench import SagaSystem
from saga import AsyncCoordinator, Saga, StepContext

TASKS = 256
T = TypeVar("T")


def async_saga(name: str, hold: asyncio.Event | None = None) -> Saga:
    saga = Saga(name)

    async def first(ctx: StepContext) -> None:
        if hold is not None:
            HELD.append(ctx.saga_id)
            await hold.wait()

    async def noop(ctx: StepContext) -> None:
        del ctx

    saga.step(name="step1")(first).compensation(noop)
    for number in (2, 3):
        saga.step(name=f"step{number}")(noop).compensation(noop)
    return saga


HELD: list[str] = []


async def async_rate(url: str, n: int) -> float:
    """Sagas/s of ``n`` sagas from 256 tasks on one ``AsyncCoordinator``."""
    saga = async_saga("async-wide")
    async with AsyncCoordinator(url) as coord:
        await coord.run(saga)  # warm: schema, connections, statements

        async def caller(count: int) -> None:
            for _ in range(count):
                await coord.run(saga)

        began = time.perf_counter()
        await asyncio.gather(*(caller(n // TASKS) for _ in range(TASKS)))
        return TASKS * (n // TASKS) / (time.perf_counter() - began)


async def memory_in_flight(url: str) -> float:
    """Bytes the process holds per async saga waiting inside its first step."""
    hold = asyncio.Event()
    saga = async_saga("async-held", hold)
    async with AsyncCoordinator(url) as coord:
        await coord.run(async_saga("async-held-warm"))
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        runs = [asyncio.ensure_future(coord.run(saga)) for _ in range(TASKS)]
        while len(HELD) < TASKS:
            await asyncio.sleep(0.01)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        hold.set()
        await asyncio.gather(*runs)
    return held / TASKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sync_rates, async_rates = [], []
    spent: dict[str, list[tuple[float, float]]] = {"sync": [], "async": []}
    with dedicated_database(args.postgres, "async_wide") as url:
        system = SagaSystem(url, "postgresql")
        try:
            call = system.caller(W2)
            measure(call, 50)
            for _ in range(args.repeat):
                sync_rates.append(
                    args.n / cpu_of(lambda: measure(call, args.n, 8)[0], spent["sync"])
                )
                async_rates.append(
                    cpu_of(lambda: asyncio.run(async_rate(url, args.n)), spent["async"])
                )
        finally:
            system.close()
        per_saga = asyncio.run(memory_in_flight(url))
    ratio = statistics.median(a / s for a, s in zip(async_rates, sync_rates, strict=True))
    print(
        f"sync, 8 threads: {statistics.median(sync_rates):,.0f} sagas/s; async, {TASKS} tasks:"
        f" {statistics.median(async_rates):,.0f} sagas/s; async / sync {ratio:.2f}"
        f" (median of {args.repeat})"
    )
    for side, used in spent.items():
        client = statistics.median(c for c, _ in used) / args.n * 1e3
        server = statistics.median(s for _, s in used) / args.n * 1e3
        print(f"CPU per saga, {side}: client {client:.3f} ms, PostgreSQL {server:.3f} ms")
    print(f"memory per in-flight async saga (tracemalloc): {per_saga / 1024:,.1f} KiB")


def cpu_of(work: Callable[[], T], spent: list[tuple[float, float]]) -> T:
    """``work()``, noting the CPU seconds it cost this process and the server."""
    client, server = _client_cpu(), _server_cpu()
    result = work()
    spent.append((_client_cpu() - client, _server_cpu() - server))
    return result


def _client_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _server_cpu() -> float:
    """CPU seconds of this machine's PostgreSQL processes, with their ended children's
    (a backend that exited is counted in the postmaster's)."""
    ticks = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as comm:
                if not comm.read().startswith("postgres"):
                    continue
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        ticks += sum(int(field) for field in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
