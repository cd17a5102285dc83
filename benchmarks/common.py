"""Shared plumbing: workloads, timing, repetitions, dedicated databases, commit counters."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import multiprocessing.queues
import os
import queue
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


# -- workloads ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Workload:
    """A saga shape every system runs: ``steps`` no-op steps, maybe one that fails."""

    key: str
    title: str
    steps: int
    concurrency: int = 1
    fail_at: int | None = None  # 1-based step that raises; the steps before it are undone

    @property
    def floor_commits(self) -> int:
        """Commits saga's write protocol needs for one saga of this shape.

        Success: n+1 (the saga and its first step's start in one commit, then
        one commit per step: "step k succeeded" + "step k+1 started", and the
        last one with "completed"). Failure at step f: f commits forward,
        1 for the failure (and the turn to compensating), 1 per compensation
        (its start, with the end of the one before) and 1 for the final status
        (with the last compensation's end).
        """
        if self.fail_at is None:
            return self.steps + 1
        undone = self.fail_at - 1
        return self.fail_at + 1 + undone + 1


W1 = Workload("w1", "3 no-op steps, sequential", 3)
W2 = Workload("w2", "3 no-op steps, 8 concurrent callers", 3, concurrency=8)
W3 = Workload("w3", "10 no-op steps, sequential", 10)
W4 = Workload("w4", "3 steps, the 3rd fails, 2 compensations", 3, fail_at=3)
W5 = Workload("w5", "100 no-op steps, linear", 100)
WORKLOADS = (W1, W2, W3, W4, W5)


class StepFailure(Exception):
    """Raised on purpose by the failing step of workload 4."""


class System(Protocol):
    """One system under test, opened on one database."""

    name: str
    backend: str

    def caller(self, workload: Workload) -> Callable[[], None]:
        """A function that runs one saga of ``workload`` and checks how it ended."""
        ...

    def close(self) -> None: ...


class BenchmarkError(Exception):
    """A system did not do what the workload expects (e.g. a saga did not complete)."""


# -- timing ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    """One timed run of ``n`` sagas by one system."""

    system: str
    backend: str
    workload: str
    n: int
    concurrency: int
    seconds: float
    sagas_per_s: float
    p50_ms: float
    p99_ms: float

    @classmethod
    def of(
        cls,
        system: str,
        backend: str,
        workload: Workload,
        seconds: float,
        latencies: Sequence[float],
    ) -> Result:
        return cls(
            system=system,
            backend=backend,
            workload=workload.key,
            n=len(latencies),
            concurrency=workload.concurrency,
            seconds=seconds,
            sagas_per_s=len(latencies) / seconds if seconds > 0 else math.inf,
            p50_ms=percentile(latencies, 0.50) * 1000,
            p99_ms=percentile(latencies, 0.99) * 1000,
        )


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of ``values``."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def measure(call: Callable[[], None], n: int, concurrency: int = 1) -> tuple[float, list[float]]:
    """Run ``call`` ``n`` times from ``concurrency`` threads: (wall seconds, latencies)."""
    if concurrency == 1:
        return _measure_here(call, n)
    shares = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    gate = threading.Barrier(concurrency + 1)

    def worker(count: int) -> None:
        mine: list[float] = []
        gate.wait()
        try:
            mine = _measure_here(call, count)[1]
        except BaseException as error:  # re-raised in the calling thread
            errors.append(error)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    gate.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed, latencies


def _measure_here(call: Callable[[], None], n: int) -> tuple[float, list[float]]:
    latencies = []
    started = time.perf_counter()
    for _ in range(n):
        before = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - before)
    return time.perf_counter() - started, latencies


def run_workload(system: System, workload: Workload, n: int, warmup: int = 3) -> Result:
    """Warm ``system`` up (connections, statements, caches), then time ``n`` sagas."""
    call = system.caller(workload)
    measure(call, max(warmup, workload.concurrency), workload.concurrency)
    seconds, latencies = measure(call, n, workload.concurrency)
    return Result.of(system.name, system.backend, workload, seconds, latencies)


def interleaved(
    systems: Sequence[System], workload: Workload, n: int, slices: int = 5, warmup: int = 3
) -> list[Result]:
    """Time ``n`` sagas per system, the systems taking turns in ``slices`` slices.

    On a shared, noisy machine load comes and goes within seconds; taking
    turns slice by slice (in a rotating order) gives every system the same
    share of it, so their ratio means something even when the absolute
    figures wobble. Each system's figure is its sagas over its own time.
    """
    calls = [system.caller(workload) for system in systems]
    for call in calls:
        measure(call, max(warmup, workload.concurrency), workload.concurrency)
    sizes = [n // slices + (1 if i < n % slices else 0) for i in range(slices)]
    seconds = [0.0] * len(systems)
    latencies: list[list[float]] = [[] for _ in systems]
    for turn, size in enumerate(s for s in sizes if s):
        for index in _rotated(range(len(systems)), turn):
            elapsed, taken = measure(calls[index], size, workload.concurrency)
            seconds[index] += elapsed
            latencies[index].extend(taken)
    return [
        Result.of(system.name, system.backend, workload, seconds[i], latencies[i])
        for i, system in enumerate(systems)
    ]


def _rotated(items: Iterable[int], turn: int) -> list[int]:
    ordered = list(items)
    shift = turn % len(ordered) if ordered else 0
    return ordered[shift:] + ordered[:shift]


@contextlib.contextmanager
def session(
    open_system: Callable[[], System], workload: Workload
) -> Iterator[Callable[[int], None]]:
    """Open a system and yield ``run(k)``, which runs k sagas of ``workload`` one by one."""
    system = open_system()
    try:
        call = system.caller(workload)

        def run(count: int) -> None:
            for _ in range(count):
                call()

        yield run
    finally:
        system.close()


@dataclasses.dataclass(frozen=True)
class Summary:
    """Medians over repetitions of the same workload by the same system."""

    system: str
    backend: str
    workload: str
    reps: int
    n: int
    sagas_per_s: float
    p50_ms: float
    p99_ms: float
    min_rate: float
    max_rate: float


def summarise(results: Sequence[Result]) -> Summary:
    first = results[0]
    rates = [r.sagas_per_s for r in results]
    return Summary(
        system=first.system,
        backend=first.backend,
        workload=first.workload,
        reps=len(results),
        n=first.n,
        sagas_per_s=statistics.median(rates),
        p50_ms=statistics.median(r.p50_ms for r in results),
        p99_ms=statistics.median(r.p99_ms for r in results),
        min_rate=min(rates),
        max_rate=max(rates),
    )


def median_ratio(numerators: Sequence[Result], denominators: Sequence[Result]) -> float:
    """Median over repetitions of the per-repetition throughput ratio (same run, same rep)."""
    pairs = zip(numerators, denominators, strict=False)
    return statistics.median(a.sagas_per_s / b.sagas_per_s for a, b in pairs)


# -- PostgreSQL --------------------------------------------------------------------------


def libpq_url(url: str) -> str:
    """The URL without a SQLAlchemy driver suffix (``postgresql+psycopg://`` -> ``postgresql://``)."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgres") else url


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at database ``name``."""
    parts = urlsplit(libpq_url(url))
    return urlunsplit(parts._replace(path="/" + name))


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


@contextlib.contextmanager
def dedicated_database(admin_url: str, system: str) -> Iterator[str]:
    """A fresh database for one system, dropped afterwards; yields its libpq URL."""
    name = f"saga_bench_{system}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def server_counters(admin_url: str, database: str, timeout: float = 20.0) -> dict[str, int]:
    """``database``'s commits and rows written (``pg_stat_database``), once all is flushed.

    On PostgreSQL 15 a backend flushes its counters to shared memory at most
    once a second while busy, and an idle one may wait up to 10 s; a backend
    that exits flushes at once. So the callers close every connection to the
    database first; this waits until none is left (autovacuum included) and
    until two reads 0.3 s apart agree. The admin connection is on another
    database, so its own transactions are not counted.
    """
    deadline = time.monotonic() + timeout
    previous: dict[str, int] | None = None
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        while True:
            connection.execute("SELECT pg_stat_clear_snapshot()")
            row = connection.execute(
                "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = %(d)s),"
                " xact_commit, tup_inserted + tup_updated + tup_deleted"
                " FROM pg_stat_database WHERE datname = %(d)s",
                {"d": database},
            ).fetchone()
            assert row is not None
            counters = {"commits": int(row[1]), "rows_written": int(row[2])}
            idle = int(row[0]) == 0
            if (idle and counters == previous) or time.monotonic() > deadline:
                return counters
            previous = counters if idle else None
            time.sleep(0.3)


SessionOpener = Callable[[], contextlib.AbstractContextManager[Callable[[int], None]]]


def per_saga_counts(
    counter: Callable[[], dict[str, int]], open_session: SessionOpener, n: int, warmup: int = 10
) -> dict[str, float]:
    """Server-side counts per saga: a run of ``n`` sagas minus an idle run as long.

    A first session creates what the system creates on first use (schema,
    migrations). Then each measured session opens the system, warms it up
    (connections; psycopg prepares a statement on its 6th use, in an
    implicit transaction the server counts as a commit), runs, and closes;
    the idle session does the same without the ``n`` sagas, sleeping as long
    as they took, so what opening, warming up and background threads cost
    is subtracted, leaving the sagas' own work.
    """
    with open_session() as run:
        run(1)
    before = counter()
    with open_session() as run:
        run(warmup)
        started = time.perf_counter()
        run(n)
        busy = time.perf_counter() - started
    middle = counter()
    with open_session() as run:
        run(warmup)
        time.sleep(busy)
    after = counter()
    return {key: ((middle[key] - before[key]) - (after[key] - middle[key])) / n for key in before}


def server_facts(admin_url: str) -> dict[str, str]:
    """PostgreSQL version and the settings that decide commit cost."""
    facts: dict[str, str] = {}
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        for setting in (
            "server_version",
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "shared_buffers",
            "max_connections",
        ):
            row = connection.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()
            facts[setting] = str(row[0]) if row else "?"
    return facts


# -- one long saga in a child process, with a time budget --------------------------------


@dataclasses.dataclass(frozen=True)
class Budgeted:
    """One long saga run under a time budget: how long it took, or how far it got.

    ``setup_seconds`` is what the child spent before the saga started
    (definition, registration and validation, connecting); ``progress`` is
    (seconds since the start, steps durable) sampled while it ran.
    """

    system: str
    steps: int
    finished: bool
    seconds: float
    steps_done: int
    setup_seconds: float = math.nan
    progress: tuple[tuple[float, int], ...] = ()
    note: str = ""
    peak_in_flight: int | None = None  # the most steps in flight at once, where known

    @property
    def extrapolated(self) -> float:
        """Seconds the whole saga would take at the rate seen (its own time if finished)."""
        if self.finished:
            return self.seconds
        return self.seconds * self.steps / self.steps_done if self.steps_done else math.inf


def run_with_budget(
    system: str,
    steps: int,
    target: Callable[..., None],
    args: tuple[object, ...],
    budget: float,
    progress: Callable[[], int],
    samples: int = 6,
) -> Budgeted:
    """Run ``target(*args, queue)`` in a fresh process; stop it after ``budget`` seconds.

    The child puts ``("ready", setup seconds)`` once its definitions are
    registered and it is connected, then ``("done", seconds)`` or
    ``("error", text)``; before ``done`` it may put ``("peak", steps)``, the most
    steps it had in flight at once. Meanwhile ``progress()`` (the steps already durable)
    is sampled ``samples`` times; when the budget runs out the child is
    terminated.
    """
    context = multiprocessing.get_context("spawn")
    channel: multiprocessing.queues.Queue[tuple[str, object]] = context.Queue()
    child = context.Process(target=target, args=(*args, channel), daemon=True)
    child.start()
    try:
        kind, value = channel.get(timeout=600)
        if kind != "ready":
            return Budgeted(system, steps, False, math.nan, 0, note=str(value))
        setup = float(str(value))
        started = time.perf_counter()
        seen: list[tuple[float, int]] = []
        peak: int | None = None
        while (elapsed := time.perf_counter() - started) < budget:
            try:
                kind, value = channel.get(timeout=min(budget / samples, budget - elapsed))
            except queue.Empty:
                seen.append((time.perf_counter() - started, progress()))
                continue
            if kind == "peak":
                peak = int(str(value))
                continue
            if kind == "done":
                took = float(str(value))
                return Budgeted(system, steps, True, took, steps, setup, tuple(seen), "", peak)
            return Budgeted(system, steps, False, math.nan, progress(), setup, note=str(value))
        done = seen[-1][1] if seen else progress()
        return Budgeted(system, steps, False, budget, done, setup, tuple(seen))
    finally:
        if child.is_alive():
            child.terminate()
        child.join(10)
