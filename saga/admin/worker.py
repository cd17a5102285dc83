"""``saga worker``: a long-running recovery loop; several may share a database."""

from __future__ import annotations

import dataclasses
import http.server
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import tenacity

from saga.admin.facts import human_duration, json_value
from saga.admin.recovery import LOST_REASON
from saga.coordinator import Coordinator
from saga.errors import ConfigurationError, StorageError
from saga.recovery import RecoveryOutcome, RecoveryReport


@dataclasses.dataclass
class WorkerStats:
    passes: int = 0
    recovered: int = 0
    errors: int = 0
    lost: int = 0
    """Sagas another process claimed while this worker was finishing them."""
    handed_back: int = 0
    """Sagas this worker gave back at a step boundary when told to stop (drain)."""


def run_worker(
    coord: Coordinator,
    stop: threading.Event,
    *,
    interval: float = 5.0,
    batch: int = 20,
    concurrency: int = 1,
    log: Callable[[str], None] = print,
    stats: WorkerStats | None = None,
) -> WorkerStats:
    """Recover stuck sagas every ``interval`` seconds until ``stop`` is set.

    Several workers may share a database: claims skip what another holds. Up to
    ``concurrency`` sagas are finished at once, each in a thread of its own. The
    stop flag is checked between sagas: a worker told to stop claims nothing more,
    and returns once the sagas in hand are done, finished or, with
    ``coord.drain()`` called too (as ``saga worker`` does on SIGTERM), handed back
    at their next step boundary; either way it leaves nothing claimed. While the
    database is unreachable it backs off (tenacity) and logs one line a try.
    """
    if interval <= 0 or batch < 1 or concurrency < 1:
        raise ConfigurationError(
            "--interval must be positive, --batch and --concurrency at least 1"
        )
    stats = stats if stats is not None else WorkerStats()
    log(
        f"worker {coord.owner} recovering on {coord.store.url} every {human_duration(interval)}"
        f", {concurrency} saga(s) at a time"
    )
    pass_ = _Pass(coord, stop, batch, concurrency, log, stats)
    while not stop.is_set():
        handled = _pass_with_backoff(pass_, interval)
        stats.passes += 1
        if stats.passes == 1:
            log(f"worker {coord.owner} ready: the database answers and the schema is current")
        if handled < batch:  # caught up: rest; a full batch means more may be waiting
            stop.wait(interval)
    handed = f", handing {stats.handed_back} back" if stats.handed_back else ""
    log(f"worker {coord.owner} stopped after recovering {stats.recovered} saga(s){handed}")
    return stats


def _pass_with_backoff(pass_: _Pass, interval: float) -> int:
    stop, log = pass_.stop, pass_.log

    def tell(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log(f"database unavailable ({error}); retrying in {wait:.1f}s")

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(StorageError),
        wait=tenacity.wait_exponential_jitter(initial=interval, max=max(60.0, interval)),
        stop=lambda _state: stop.is_set(),
        sleep=lambda seconds: _pause(stop, seconds),
        before_sleep=tell,
        reraise=True,
    )
    try:
        return retrying(pass_.run)
    except StorageError:
        if stop.is_set():
            return 0
        raise


def _pause(stop: threading.Event, seconds: float) -> None:
    """Sleep, but wake at once when a stop is requested."""
    stop.wait(seconds)


@dataclasses.dataclass
class _Pass:
    """One pass: claim and finish up to ``batch`` stuck sagas, ``concurrency`` at once."""

    coord: Coordinator
    stop: threading.Event
    batch: int
    concurrency: int
    log: Callable[[str], None]
    stats: WorkerStats

    def run(self) -> int:
        """How many sagas this pass handled (fewer than ``batch``: it caught up)."""
        if self.concurrency == 1:
            return self._one_at_a_time()
        handled, more = 0, True
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="saga-worker") as pool:
            running: set[Future[RecoveryReport]] = set()
            while running or (more and handled < self.batch and not self.stop.is_set()):
                while more and len(running) < self.concurrency and not self.stop.is_set():
                    if handled + len(running) >= self.batch:
                        break
                    running.add(pool.submit(self.coord.recover, limit=1))
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    outcomes = future.result().outcomes  # a dead database ends the pass
                    if not outcomes or not self._told(outcomes[0]):
                        more = False  # caught up, or a refused saga: wait for the next pass
                    handled += len(outcomes)
        return handled

    def _one_at_a_time(self) -> int:
        """In the calling thread, one saga after another (``--concurrency 1``)."""
        handled = 0
        while handled < self.batch and not self.stop.is_set():
            outcomes = self.coord.recover(limit=1).outcomes
            if not outcomes:
                break
            handled += 1
            if not self._told(outcomes[0]):
                break
        return handled

    def _told(self, outcome: RecoveryOutcome) -> bool:
        """Count and log ``outcome``; False for a refused saga (released for a better-
        equipped process, claimable again at once: not worth spinning on)."""
        if outcome.lost:  # not claimable again: its new owner's lease is live
            self.stats.lost += 1
            self.log(f"saga {outcome.saga_id} ({outcome.name}): {LOST_REASON}")
            return True
        if outcome.handed_back:  # stopping: nothing more is claimed after it
            self.stats.handed_back += 1
            status = json_value(outcome.status)
            self.log(f"saga {outcome.saga_id} ({outcome.name}): handed back while {status}")
            return False
        if outcome.error is None:
            self.stats.recovered += 1
            self.log(f"saga {outcome.saga_id} ({outcome.name}): {json_value(outcome.status)}")
            return True
        self.stats.errors += 1
        self.log(f"saga {outcome.saga_id} ({outcome.name}) not recovered: {outcome.error}")
        return False


def serve_worker_metrics(
    coord: Coordinator,
    stop: threading.Event,
    port: int,
    host: str = "127.0.0.1",
    stats: WorkerStats | None = None,
) -> http.server.ThreadingHTTPServer:
    """Count what ``coord`` does (``saga.metrics``) and serve it on ``host:port``;
    ``/healthz`` answers 200 once the worker made its first pass (``stats``), while it
    has not stopped and the store answers."""
    try:
        from saga import metrics
    except ImportError:
        raise ConfigurationError(
            "--metrics-port needs prometheus_client: pip install 'saga[metrics]'"
        ) from None
    watcher = metrics.MetricsListener()
    watcher.watch(coord)

    def healthy() -> bool:
        if stats is not None and stats.passes == 0:
            return False  # not ready yet
        coord.store.now()  # raises while the database does not answer
        return not stop.is_set()

    try:
        return metrics.serve(watcher.registry, port, host, healthy)
    except OSError as error:
        raise ConfigurationError(f"--metrics-port {port}: {error.strerror}") from None
