"""``AsyncCoordinator`` with 256 sagas in flight against the sync API's 8 threads, and
the memory an in-flight async saga holds, on PostgreSQL.

Not a test: it prints figures (docs/performance.md). In each repetition, back to back on
one database: ``--n`` 3-step no-op sagas from 8 threads sharing one ``Coordinator``
(workload 2), then from 256 tasks sharing one ``AsyncCoordinator`` (async steps); the
ratio is the median of the per-repetition ratios. Then 256 async sagas are held inside
their first step (it waits on an event) and ``tracemalloc`` says what the process holds
for them beyond what it held before they started: the memory per in-flight saga.

    python -m benchmarks.async_wide [--postgres URL] [--n 2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import tracemalloc

from benchmarks.common import DEFAULT_POSTGRES, W2, dedicated_database, measure
from benchmarks.saga_bench import SagaSystem
from saga import AsyncCoordinator, Saga, StepContext

TASKS = 256


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
    with dedicated_database(args.postgres, "async_wide") as url:
        system = SagaSystem(url, "postgresql")
        try:
            call = system.caller(W2)
            measure(call, 50)
            for _ in range(args.repeat):
                sync_rates.append(args.n / measure(call, args.n, concurrency=8)[0])
                async_rates.append(asyncio.run(async_rate(url, args.n)))
        finally:
            system.close()
        per_saga = asyncio.run(memory_in_flight(url))
    ratio = statistics.median(a / s for a, s in zip(async_rates, sync_rates, strict=True))
    print(
        f"sync, 8 threads: {statistics.median(sync_rates):,.0f} sagas/s; async, {TASKS} tasks:"
        f" {statistics.median(async_rates):,.0f} sagas/s; async / sync {ratio:.2f}"
        f" (median of {args.repeat})"
    )
    print(f"memory per in-flight async saga (tracemalloc): {per_saga / 1024:,.1f} KiB")


if __name__ == "__main__":
    main()
