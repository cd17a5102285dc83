"""saga itself: the workloads as declarative sagas run by one ``Coordinator``."""

from __future__ import annotations

import cProfile
import io
import multiprocessing.queues
import pstats
import threading
import time
from collections.abc import Callable

import psycopg

from benchmarks.common import (
    W1,
    BenchmarkError,
    Result,
    StepFailure,
    Workload,
    libpq_url,
    measure,
    run_workload,
)
from saga import Coordinator, RetryPolicy, Saga, SagaEvent, SagaFailed, SagaStatus, StepContext

NO_RETRY = RetryPolicy(max_attempts=1)
_definitions: dict[tuple[int, int | None], Saga] = {}


def noop(ctx: StepContext) -> None:
    """A step (or compensation) that does nothing: only saga's own cost is measured."""
    del ctx


def fail(ctx: StepContext) -> None:
    raise StepFailure(f"step {ctx.step} fails on purpose")


def definition(workload: Workload) -> Saga:
    """The saga for ``workload``'s shape: steps step1..stepN, each with a compensation.

    The failing step (workload 4) has none and is not retried, so exactly the
    steps before it are compensated.
    """
    shape = (workload.steps, workload.fail_at)
    if shape not in _definitions:
        suffix = "" if workload.fail_at is None else f"-fail-at-{workload.fail_at}"
        saga = Saga(f"bench-{workload.steps}-steps{suffix}")
        for position in range(1, workload.steps + 1):
            if position == workload.fail_at:
                saga.step(name=f"step{position}", retry=NO_RETRY)(fail)
            else:
                saga.step(name=f"step{position}")(noop).compensation(noop)
        _definitions[shape] = saga
    return _definitions[shape]


class SagaSystem:
    """saga on one database: one coordinator shared by every caller thread."""

    name = "saga"

    def __init__(self, url: str, backend: str) -> None:
        self.backend = backend
        self.coord = Coordinator(url, lease_ttl=30.0)
        self.coord.create_schema()

    def caller(self, workload: Workload) -> Callable[[], None]:
        saga = definition(workload)
        self.coord.register(saga)
        coord = self.coord
        if workload.fail_at is None:

            def complete() -> None:
                view = coord.run(saga)
                if view.status is not SagaStatus.COMPLETED:
                    raise BenchmarkError(f"saga {view.id} ended {view.status.value}")

            return complete

        def compensate() -> None:
            try:
                coord.run(saga)
            except SagaFailed as failure:
                if failure.status is not SagaStatus.COMPENSATED:
                    raise
                return
            raise BenchmarkError("the failing saga completed")

        return compensate

    def close(self) -> None:
        self.coord.close()


def run(url: str, workload: Workload = W1, n: int = 100, backend: str = "sqlite") -> Result:
    """Time ``n`` sagas of ``workload`` on a fresh coordinator at ``url`` (the smoke test's)."""
    system = SagaSystem(url, backend)
    try:
        return run_workload(system, workload, n)
    finally:
        system.close()


def profile(url: str, workload: Workload, n: int, top: int = 20) -> str:
    """cProfile of ``n`` sagas of ``workload``: the top functions by own and cumulative time."""
    system = SagaSystem(url, "sqlite" if url.startswith("sqlite") else "postgresql")
    try:
        call = system.caller(workload)
        measure(call, 5)
        profiler = cProfile.Profile()
        profiler.enable()
        measure(call, n)
        profiler.disable()
    finally:
        system.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


# -- workload 5: the 10,000-step saga with wide parallel branches ------------------------


class InFlight:
    """How many steps are in flight at once in this process: started and not yet ended,
    counted by an inline listener as the engine tells each start and end (the database's
    start and finish times overlap more than the steps did: a step's start is stamped
    with its batch's commit, its finish with a later one). The no-op actions themselves
    hold the GIL, so they run one at a time whatever the engine has in flight."""

    inline = True
    _ENDS = frozenset({"step_succeeded", "step_failed", "step_skipped"})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __call__(self, event: SagaEvent) -> None:
        with self._lock:
            if event.kind == "step_started":
                self.now += 1
                self.peak = max(self.peak, self.now)
            elif event.kind in self._ENDS:
                self.now -= 1


def wide_definition(steps: int, width: int) -> Saga:
    """``root``, then ``width`` parallel chains, then ``join`` after every chain's tail."""
    saga = Saga(f"bench-wide-{steps}", max_concurrency=width)
    saga.step(name="root")(noop).compensation(noop)
    in_branches = steps - 2
    tails = []
    for branch in range(width):
        length = in_branches // width + (1 if branch < in_branches % width else 0)
        previous = "root"
        for position in range(length):
            name = f"b{branch}s{position}"
            saga.step(name=name, after=(previous,))(noop).compensation(noop)
            previous = name
        tails.append(previous)
    saga.step(name="join", after=tuple(tails))(noop)
    return saga


def wide_child(
    url: str,
    steps: int,
    width: int,
    key: str,
    channel: multiprocessing.queues.Queue[tuple[str, object]],
) -> None:
    """In a child process: run the wide saga once and report its wall time."""
    try:
        began = time.perf_counter()
        saga = wide_definition(steps, width)
        in_flight = InFlight()
        with Coordinator(url, lease_ttl=30.0, listeners=[in_flight]) as coord:
            coord.create_schema()
            coord.register(saga)
            channel.put(("ready", time.perf_counter() - began))
            started = time.perf_counter()
            view = coord.run(saga, key=key)
            elapsed = time.perf_counter() - started
            if view.status is not SagaStatus.COMPLETED:
                raise BenchmarkError(f"the wide saga ended {view.status.value}")
        channel.put(("peak", in_flight.peak))
        channel.put(("done", elapsed))
    except Exception as error:  # reported to the parent, which keeps going
        channel.put(("error", f"{type(error).__name__}: {error}"))


def steps_done(url: str, key: str) -> int:
    """How many steps of the saga run with ``key`` have succeeded (durably)."""
    with psycopg.connect(libpq_url(url)) as connection:
        row = connection.execute(
            "SELECT count(*) FROM saga_steps s JOIN saga_instances i ON i.id = s.saga_id"
            " WHERE i.key = %s AND s.status = 'succeeded'",
            (key,),
        ).fetchone()
    return int(row[0]) if row else 0
