"""What the async API costs: ``Coordinator.run`` against ``AsyncCoordinator.run``.

``AsyncCoordinator`` can call the sync store through a thread facade (each
call in a worker thread, ``asyncio.to_thread``: what it does on SQLite) or,
on PostgreSQL, send its creations and commits natively with psycopg's async
connections (the default there). This measures both against the sync
coordinator, for a 3-step no-op saga on the same PostgreSQL database, in the
same run:

* sequential: one caller runs N sagas one after another (sync: a loop;
  async: a loop of ``await coord.run(...)``);
* concurrent: 8 callers share one coordinator (sync: 8 threads; async: 8
  tasks on one event loop).

The async sagas' steps are ``async def`` no-ops (what an async application
writes). Rows: "async" is the default (native hot path); "async, thread
facade" forces every store call through worker threads; "async, sync steps"
runs sync no-op steps, each then hopping to a worker thread; "async, store
inline" calls the sync store directly on the event loop (no thread, but
blocking the loop: a measurement device, not a way to run), which splits the
facade's cost from the async driver's own. Each repetition runs the systems back
to back in a rotating order; a ratio is the median of the per-repetition
ratios. docs/async.md records the figures and the decision they support::

    python -m benchmarks.async_facade [--postgres URL] [--n 300] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from saga.adapters.threaded_async import ThreadedAsyncStore

from benchmarks.common import DEFAULT_POSTGRES, dedicated_database, measure
from saga import AsyncCoordinator, Coordinator, Saga, StepContext
from saga._internal.ports import Commit, SagaRecord

CALLERS = 8
T = TypeVar("T")


def _noop(ctx: StepContext) -> None:
    del ctx


async def _async_noop(ctx: StepContext) -> None:
    del ctx


def _saga(name: str, step: Callable[[StepContext], object]) -> Saga:
    saga = Saga(name)
    for number in (1, 2, 3):
        saga.step(name=f"step{number}")(step).compensation(step)
    return saga


SYNC_STEPS = _saga("facade-bench-sync", _noop)
ASYNC_STEPS = _saga("facade-bench-async", _async_noop)


class InlineStore(ThreadedAsyncStore):
    """The facade without its threads: each store call blocks the event loop."""

    async def call(self, method: Callable[..., T], *args: Any) -> T:
        return method(*args)

    async def create(
        self, saga: SagaRecord, first: Commit, lease_ttl: float
    ) -> tuple[SagaRecord, bool]:
        return self.sync.create(saga, first, lease_ttl)

    async def commit(self, change: Commit) -> bool:
        return self.sync.commit(change)

    async def load(self, saga_id: str) -> SagaRecord | None:
        return self.sync.load(saga_id)


def with_store(url: str, kind: type[ThreadedAsyncStore]) -> AsyncCoordinator:
    """An ``AsyncCoordinator`` whose async store is ``kind`` over its sync store."""
    coord = AsyncCoordinator(url)
    coord.store = coord.driver.store = kind(coord.sync.store)
    return coord


def sync_rate(coord: Coordinator, n: int, callers: int) -> float:
    """Sagas per second: ``n`` runs by ``callers`` threads sharing ``coord``."""

    def call() -> None:
        coord.run(SYNC_STEPS)

    seconds, _ = measure(call, n, callers)
    return n / seconds


async def async_rate(coord: AsyncCoordinator, saga: Saga, n: int, callers: int) -> float:
    """Sagas per second: ``n`` runs by ``callers`` tasks sharing ``coord``."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await coord.run(saga)

    shares = [n // callers + (1 if i < n % callers else 0) for i in range(callers)]
    started = time.perf_counter()
    await asyncio.gather(*(caller(share) for share in shares))
    return n / (time.perf_counter() - started)


SYSTEMS = ("sync", "async", "async, thread facade", "async, sync steps", "async, store inline")


def one_repetition(
    sync: Coordinator,
    asyncs: dict[str, tuple[AsyncCoordinator, Saga]],
    loop: asyncio.AbstractEventLoop,
    n: int,
    rep: int,
) -> dict[str, float]:
    """Every system once, sequential then concurrent, in an order that rotates."""
    runs: dict[str, Callable[[int], float]] = {"sync": lambda c: sync_rate(sync, n, c)}
    for name, (coord, saga) in asyncs.items():
        runs[name] = functools.partial(_async_run, loop, coord, saga, n)
    names = list(runs)
    order = names[rep % len(names) :] + names[: rep % len(names)]
    rates: dict[str, float] = {}
    for callers in (1, CALLERS):
        for name in order:
            rates[f"{name}/{callers}"] = runs[name](callers)
    return rates


def _async_run(
    loop: asyncio.AbstractEventLoop, coord: AsyncCoordinator, saga: Saga, n: int, callers: int
) -> float:
    return loop.run_until_complete(async_rate(coord, saga, n, callers))


def benchmark(url: str, n: int, repeat: int) -> list[dict[str, float]]:
    sync = Coordinator(url)
    native = AsyncCoordinator(url)
    asyncs = {
        "async": (native, ASYNC_STEPS),
        "async, thread facade": (with_store(url, ThreadedAsyncStore), ASYNC_STEPS),
        "async, sync steps": (native, SYNC_STEPS),
        "async, store inline": (with_store(url, InlineStore), ASYNC_STEPS),
    }
    loop = asyncio.new_event_loop()
    try:
        sync.create_schema()
        for warm in (1, CALLERS):  # connections, prepared statements, thread pools
            sync_rate(sync, 20, warm)
            for coord, saga in asyncs.values():
                _async_run(loop, coord, saga, 20, warm)
        return [one_repetition(sync, asyncs, loop, n, rep) for rep in range(repeat)]
    finally:
        for coord in {id(c): c for c, _ in asyncs.values()}.values():
            loop.run_until_complete(coord.close())
        loop.close()
        sync.close()


def report(reps: list[dict[str, float]], n: int) -> str:
    lines = [
        f"3 no-op steps, PostgreSQL, N={n} sagas per run, {len(reps)} repetitions (medians)",
        "",
        "| callers | system | sagas/s | vs sync (same repetition) |",
        "| --- | --- | ---: | ---: |",
    ]
    for callers in (1, CALLERS):
        base = [rep[f"sync/{callers}"] for rep in reps]
        for name in SYSTEMS:
            rates = [rep[f"{name}/{callers}"] for rep in reps]
            ratio = statistics.median(r / b for r, b in zip(rates, base, strict=True))
            label = "1 (sequential)" if callers == 1 else f"{callers} concurrent"
            lines.append(f"| {label} | {name} | {statistics.median(rates):.0f} | {ratio:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.async_facade")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="the server (admin URL)")
    parser.add_argument("--n", type=int, default=300, help="sagas per timed run")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions")
    args = parser.parse_args(argv)
    with dedicated_database(args.postgres, "facade") as database:
        url = database.replace("postgresql://", "postgresql+psycopg://", 1)
        reps = benchmark(url, args.n, args.repeat)
    print(report(reps, args.n))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
