"""``saga worker``: a long-running recovery loop; several may share a database."""

from __future__ import annotations

import dataclasses
import http.server
import threading
from collections.abc import Callable

import tenacity

from saga.admin.facts import human_duration, json_value
from saga.admin.recovery import LOST_REASON
from saga.coordinator import Coordinator
from saga.errors import ConfigurationError, StorageError


@dataclasses.dataclass
class WorkerStats:
    passes: int = 0
    recovered: int = 0
    errors: int = 0
    lost: int = 0
    """Sagas another process claimed while this worker was finishing them."""


def run_worker(
    coord: Coordinator,
    stop: threading.Event,
    *,
    interval: float = 5.0,
    batch: int = 20,
    log: Callable[[str], None] = print,
) -> WorkerStats:
    """Recover stuck sagas every ``interval`` seconds until ``stop`` is set.

    Several workers may share a database: claims skip what another holds.
    The stop flag is checked between sagas, so a worker that is told to stop
    finishes the saga in hand (leaving nothing claimed) and returns. While the
    database is unreachable it backs off (tenacity) and logs one line a try.
    """
    if interval <= 0 or batch < 1:
        raise ConfigurationError("--interval must be positive and --batch at least 1")
    stats = WorkerStats()
    log(f"worker {coord.owner} recovering on {coord.store.url} every {human_duration(interval)}")
    while not stop.is_set():
        handled = _pass_with_backoff(coord, stop, interval, batch, log, stats)
        stats.passes += 1
        if handled < batch:  # caught up: rest; a full batch means more may be waiting
            stop.wait(interval)
    log(f"worker {coord.owner} stopped after recovering {stats.recovered} saga(s)")
    return stats


def _pass_with_backoff(
    coord: Coordinator,
    stop: threading.Event,
    interval: float,
    batch: int,
    log: Callable[[str], None],
    stats: WorkerStats,
) -> int:
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
        return retrying(_recovery_pass, coord, stop, batch, log, stats)
    except StorageError:
        if stop.is_set():
            return 0
        raise


def _pause(stop: threading.Event, seconds: float) -> None:
    """Sleep, but wake at once when a stop is requested."""
    stop.wait(seconds)


def _recovery_pass(
    coord: Coordinator,
    stop: threading.Event,
    batch: int,
    log: Callable[[str], None],
    stats: WorkerStats,
) -> int:
    """Recover up to ``batch`` sagas one at a time, so a stop request waits for one saga only."""
    handled = 0
    while handled < batch and not stop.is_set():
        outcomes = coord.recover(limit=1).outcomes
        if not outcomes:
            break
        outcome = outcomes[0]
        handled += 1
        if outcome.lost:  # not claimable again: its new owner's lease is live
            stats.lost += 1
            log(f"saga {outcome.saga_id} ({outcome.name}): {LOST_REASON}")
            continue
        if outcome.error is None:
            stats.recovered += 1
            log(f"saga {outcome.saga_id} ({outcome.name}): {json_value(outcome.status)}")
            continue
        stats.errors += 1
        log(f"saga {outcome.saga_id} ({outcome.name}) not recovered: {outcome.error}")
        # A refused saga is released for a better-equipped process and is
        # claimable again at once: wait for the next pass rather than spin on it.
        break
    return handled


def serve_worker_metrics(
    coord: Coordinator, stop: threading.Event, port: int, host: str = "127.0.0.1"
) -> http.server.ThreadingHTTPServer:
    """Count what ``coord`` does (``saga.metrics``) and serve it on ``host:port``;
    ``/healthz`` answers 200 while the worker has not stopped and the store answers."""
    try:
        from saga import metrics
    except ImportError:
        raise ConfigurationError(
            "--metrics-port needs prometheus_client: pip install 'saga[metrics]'"
        ) from None
    watcher = metrics.MetricsListener()
    watcher.watch(coord)

    def healthy() -> bool:
        coord.store.now()  # raises while the database does not answer
        return not stop.is_set()

    try:
        return metrics.serve(watcher.registry, port, host, healthy)
    except OSError as error:
        raise ConfigurationError(f"--metrics-port {port}: {error.strerror}") from None
