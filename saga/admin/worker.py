"""``saga worker``: a long-running recovery loop; several may share a database."""

from __future__ import annotations

import dataclasses
import http.server
import inspect
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import tenacity

from saga._internal.coordinator import Coordinator
from saga._internal.errors import (
    ConfigurationError,
    DatabaseRefusedError,
    LeaseLostError,
    SchemaVersionError,
    StorageError,
    StorageUnavailableError,
)
from saga._internal.recovery import RecoveryOutcome
from saga.admin.claimed_ahead import ClaimedAhead
from saga.admin.facts import human_duration, json_value
from saga.admin.health import DatabaseCheck, loop_alive
from saga.admin.recovery import LOST_REASON
from saga.admin.unrunnable import Unrunnable
from saga.admin.waiting import waiting


@dataclasses.dataclass
class WorkerStats:
    passes: int = 0
    recovered: int = 0
    errors: int = 0
    lost: int = 0
    """Sagas another process claimed while this worker was finishing them."""
    handed_back: int = 0
    """Sagas this worker gave back at a step boundary when told to stop (drain)."""
    waiting: int = 0
    """Sagas whose compensation failed again in this worker's hands and were handed back
    until its next attempt is due (normal during a participant's outage)."""
    unrunnable: int = 0
    """Stuck sagas this worker left at its last pass: it cannot run them."""
    beat: float = dataclasses.field(default_factory=time.monotonic)
    """When the loop last turned (``time.monotonic``): what ``/livez`` watches."""


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

    Several workers may share a database: claims skip what another holds, and what
    this process cannot run (``Coordinator.runnable``). Up to ``concurrency`` sagas
    are finished at once, each in a thread of its own; the loop itself only claims,
    so a slot that is free looks for work at the next interval whatever the others
    are doing. One claim takes up to ``batch`` sagas; those beyond the free slots
    wait their turn in the worker (:mod:`saga.admin.claimed_ahead`). The stop flag is
    checked before every claim: a worker told to stop claims nothing more, gives back
    those it has not started, and returns once the sagas in hand are done, finished
    or, with ``coord.drain()`` called too (as ``saga worker`` does on SIGTERM), handed
    back at their next step boundary; either way it leaves nothing claimed. While the
    database is unreachable it backs off (tenacity) and logs one line a try; a schema
    of another release is refused at once (``SchemaVersionError``).
    """
    _check_settings(interval, batch, concurrency)
    stats = stats if stats is not None else WorkerStats()
    log(
        f"worker {coord.owner} recovering on {coord.store.url} every {human_duration(interval)}"
        f", {concurrency} saga(s) at a time"
    )
    _Loop(coord, stop, interval, batch, concurrency, log, stats).run()
    handed = f", handing {stats.handed_back} back" if stats.handed_back else ""
    log(f"worker {coord.owner} stopped after recovering {stats.recovered} saga(s){handed}")
    return stats


def _check_settings(interval: float, batch: int, concurrency: int) -> None:
    """Refuse a setting no worker can run with, naming it and the value given."""
    if interval <= 0:
        raise ConfigurationError(f"--interval must be positive, not {interval:g}s")
    for option, value in (("--batch", batch), ("--concurrency", concurrency)):
        if value < 1:
            raise ConfigurationError(f"{option} must be at least 1, not {value}")


@dataclasses.dataclass
class _Loop:
    """Claims stuck sagas into free slots; each is finished in a thread of the pool."""

    coord: Coordinator
    stop: threading.Event
    interval: float
    batch: int
    concurrency: int
    log: Callable[[str], None]
    stats: WorkerStats
    running: set[Future[RecoveryOutcome]] = dataclasses.field(default_factory=set)
    refused: bool = False  # a saga was refused since the last claim: do not hurry back
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.left = Unrunnable(self.coord, self.log)
        self.ahead = ClaimedAhead(self.coord.heartbeat.interval, self.batch)

    def run(self) -> None:
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="saga-worker") as pool:
            while not self.stop.is_set():
                self.stats.beat = time.monotonic()
                more = self._with_backoff(lambda: self._pass(pool))
                if self.stop.is_set():
                    break
                self.stats.passes += 1
                if self.stats.passes == 1:
                    self.log(
                        f"worker {self.coord.owner} ready: the database answers and the "
                        "schema is current"
                    )
                self._rest(more)
            # Not started: back at once, while the sagas in hand are still running.
            self._with_backoff(lambda: self._give_back(self.ahead.take_all(), stopping=True))
        # leaving the pool waits for the sagas in hand: finished, or handed back

    def _finish(self, saga_id: str) -> RecoveryOutcome:
        """Finish a saga this worker claimed, as ``recover`` would (in a pool thread)."""
        began = time.monotonic()
        outcome = self.coord.driver.run(self.coord.engine.recover_one(saga_id, False, swept=True))
        with self.lock:
            self.ahead.finished_in(time.monotonic() - began)
        return outcome

    def _pass(self, pool: ThreadPoolExecutor) -> bool:
        """Start claimed sagas in the free slots, claiming more (at most ``batch``) when
        none is left; whether more may be waiting (a claim got all it asked for)."""
        self.running = {future for future in self.running if not future.done()}
        self._give_back(self.ahead.overdue(), stopping=False)
        free = self.concurrency - len(self.running)
        if free == 0:
            return True
        more = True
        if len(self.ahead) < free:
            self.refused = False
            with self.lock:
                asked = self.ahead.to_claim(free - len(self.ahead), self.concurrency)
            claimed = self.coord.driver.run(self.coord.engine.claim_stuck(asked))
            self.ahead.keep(claimed)
            more = len(claimed) == asked
            if not more and not self.stop.is_set():
                self._look_left()  # caught up: what is still stuck, this worker cannot run
        while len(self.running) < self.concurrency and not self.stop.is_set():
            if (saga_id := self.ahead.next()) is None:
                break
            future = pool.submit(self._finish, saga_id)
            self.running.add(future)
            future.add_done_callback(self._done)
        return more or len(self.ahead) > 0

    def _give_back(self, saga_ids: list[str], *, stopping: bool) -> bool:
        """Release sagas claimed ahead and not started, untouched: claimable at once."""
        for saga_id in saga_ids:
            try:
                self.coord.driver.run(self.coord.engine.release(saga_id))
            except LeaseLostError:  # another process took it since: nothing to give back
                continue
            if stopping:
                with self.lock:
                    self.stats.handed_back += 1
        if saga_ids and not stopping:
            self.log(f"gave {len(saga_ids)} claimed saga(s) back unstarted: slots stayed busy")
        return True

    def _look_left(self) -> None:
        """Count and name what this worker leaves; a row it cannot even read (corrupt)
        is said, not retried as if the database were down."""
        try:
            self.stats.unrunnable = self.left.look()
        except (StorageUnavailableError, SchemaVersionError):
            raise
        except Exception as error:  # the pass itself went well: say it, go on
            self.log(f"could not tell which stuck sagas are left here: {error}")

    def _rest(self, more: bool) -> None:
        """Until the next pass: the interval, or, when more may be waiting, until a slot
        frees (at once if one is free); sagas claimed ahead wait for a slot only."""
        caught_up = not more or (self.refused and not self.ahead)
        if caught_up:  # or a refused saga: not worth spinning on
            self.stop.wait(self.interval)
        elif len(self.running) >= self.concurrency:
            wait(self.running, timeout=self.interval, return_when=FIRST_COMPLETED)

    def _with_backoff(self, call: Callable[[], bool]) -> bool:
        """``call()``, retried with backoff while the database is unreachable or refuses
        a statement (an operator may mend that: a migration, a grant)."""

        def tell(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            pause = state.next_action.sleep if state.next_action else 0.0
            # An outage is normal and passes; a refused statement or login is no outage,
            # and calling it one hid a bad definition that failed every claim.
            if isinstance(error, StorageUnavailableError):
                what = "database unavailable"
            elif isinstance(error, DatabaseRefusedError):  # a role, password, database
                what = "the database refused the worker's connection"
            else:
                what = "the database refused the worker's statement"
            self.log(f"{what} ({error}); retrying in {pause:.1f}s")

        retrying = tenacity.Retrying(
            # A schema of another release is no outage: no retry brings it back.
            retry=tenacity.retry_if_exception_type(StorageError)
            & tenacity.retry_if_not_exception_type(SchemaVersionError),
            wait=_outage_wait(self.interval),
            stop=lambda _state: self.stop.is_set(),
            sleep=self._pause,
            before_sleep=tell,
            reraise=True,
        )
        try:
            return retrying(call)
        except StorageError as error:
            if self.stop.is_set() and not isinstance(error, SchemaVersionError):
                return False
            raise

    def _pause(self, seconds: float) -> None:
        """Sleep, but wake at once when a stop is requested (alive all the while)."""
        self.stats.beat = time.monotonic()
        self.stop.wait(seconds)

    def _done(self, future: Future[RecoveryOutcome]) -> None:
        """Count and log how a saga in hand ended (in the thread that finished it)."""
        try:
            outcome = future.result()
        except Exception as error:  # a dead database mid-saga: the next pass backs off
            with self.lock:
                self.stats.errors += 1
                self.refused = True
            self.log(f"a saga was not recovered: {error}")
            return
        if not self._told(outcome):
            self.refused = True

    def _told(self, outcome: RecoveryOutcome) -> bool:
        """Count and log ``outcome``; False for a refused saga (released for a better-
        equipped process, claimable again at once: not worth spinning on)."""
        if outcome.lost:  # not claimable again: its new owner's lease is live
            with self.lock:
                self.stats.lost += 1
            self.log(f"saga {outcome.saga_id} ({outcome.name}): {LOST_REASON}")
            return True
        if outcome.waiting:  # normal: a worker claims it again when its attempt is due
            with self.lock:
                self.stats.waiting += 1
            self.log(self._waiting_line(outcome))
            return True
        if outcome.handed_back:  # stopping: nothing more is claimed after it
            with self.lock:
                self.stats.handed_back += 1
            status = json_value(outcome.status)
            self.log(f"saga {outcome.saga_id} ({outcome.name}): handed back while {status}")
            return False
        if outcome.error is None:
            with self.lock:
                self.stats.recovered += 1
            self.log(f"saga {outcome.saga_id} ({outcome.name}): {json_value(outcome.status)}")
            return True
        with self.lock:
            self.stats.errors += 1
        self.log(f"saga {outcome.saga_id} ({outcome.name}) not recovered: {outcome.error}")
        return False

    def _waiting_line(self, outcome: RecoveryOutcome) -> str:
        """What a saga handed back to wait for its compensation's next attempt is told as:
        waiting, with when (read from its history), never as a failure."""
        try:
            found = waiting(self.coord, outcome.saga_id)
        except Exception:  # noqa: BLE001 - the saga is fine; only the detail is missing
            found = None
        said = found.text if found is not None else f"saga {outcome.saga_id} is compensating"
        return f"{said} ({outcome.name}: {outcome.why})" if found is None else said


def _outage_wait(interval: float) -> tenacity.wait.wait_base:
    """From ``interval`` doubling to at least a minute, jittered. tenacity 9.2 renamed
    ``initial`` to ``multiplier`` (the old name warns, an error under ``-W error``);
    releases before it know only ``initial``."""
    ceiling = max(60.0, interval)
    if _JITTER_MULTIPLIER:
        return tenacity.wait_exponential_jitter(multiplier=interval, max=ceiling)
    return tenacity.wait_exponential_jitter(initial=interval, max=ceiling)


_JITTER_MULTIPLIER = "multiplier" in inspect.signature(tenacity.wait_exponential_jitter).parameters


def serve_worker_metrics(
    coord: Coordinator,
    stop: threading.Event,
    port: int,
    host: str = "127.0.0.1",
    stats: WorkerStats | None = None,
    interval: float = 5.0,
) -> http.server.ThreadingHTTPServer:
    """Count what ``coord`` does (``saga.metrics``) and serve it on ``host:port``, with
    the worker's health (``stats``; ``interval``: the worker's): ``/livez`` (and its
    alias ``/healthz``) is 200 while the worker's loop turns and the database answers,
    whatever a pass is doing; ``/readyz`` is 200 once the first pass is over, until
    the worker is told to stop."""
    try:
        from saga import metrics
    except ImportError:
        raise ConfigurationError(
            "--metrics-port needs prometheus_client: pip install 'saga[metrics]'"
        ) from None
    watcher = metrics.MetricsListener()
    watcher.watch(coord)
    database = DatabaseCheck(coord)
    if stats is not None:
        watcher.unrunnable.set_function(lambda: stats.unrunnable)

    def alive() -> bool:
        return (stats is None or loop_alive(stats.beat, interval)) and database()

    def ready() -> bool:
        passed = stats is None or stats.passes > 0
        return passed and not stop.is_set() and alive()

    try:
        return metrics.serve(watcher.registry, port, host, alive, ready)
    except OSError as error:
        raise ConfigurationError(f"--metrics-port {port}: {error.strerror}") from None
