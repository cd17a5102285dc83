"""``saga worker``: recover stuck sagas in a loop, with its log, metrics and signals."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Annotated

import typer

from saga import admin, logs
from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError, SchemaVersionError
from saga._internal.lease import check_lease_ttl
from saga.cli.options import app
from saga.cli.session import Session, printable, reporting, scrub, session_of

Interval = Annotated[
    str,
    typer.Option(
        "--interval",
        help="Pause between passes.",
        metavar="DURATION",
        envvar="SAGA_WORKER_INTERVAL",
    ),
]
Concurrency = Annotated[
    int,
    typer.Option(
        "--concurrency",
        help="Finish this many stuck sagas at once.",
        metavar="N",
        envvar="SAGA_WORKER_CONCURRENCY",
    ),
]
Batch = Annotated[
    int,
    typer.Option(
        "--batch",
        help="At most this many sagas a claim; those beyond the free slots wait in the "
        "worker (at most a third of the lease).",
        metavar="N",
        envvar="SAGA_WORKER_BATCH",
    ),
]
LeaseTtl = Annotated[
    str | None,
    typer.Option(
        "--lease-ttl",
        help="The lease on the saga in hand: if this worker dies, another takes it this long "
        "after the last renewal (default: $SAGA_LEASE_TTL, else 30s; an --app factory's "
        "coordinator has its own).",
        metavar="DURATION",
        show_default=False,
    ),
]
LogFormat = Annotated[
    str | None,
    typer.Option(
        "--log-format",
        help="Log through the saga loggers, every saga event included: text or json "
        "(one object a line).",
        metavar="text|json",
        envvar="SAGA_LOG_FORMAT",
    ),
]
LogFile = Annotated[
    str | None,
    typer.Option(
        "--log-file",
        help="Write the log to this file, rotated at 10 MB (5 kept).",
        metavar="PATH",
        envvar="SAGA_LOG_FILE",
    ),
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        help="Serve Prometheus /metrics, /livez (/healthz) and /readyz on this port "
        "(needs saga[metrics]).",
        metavar="PORT",
        envvar="SAGA_METRICS_PORT",
    ),
]
MetricsHost = Annotated[
    str,
    typer.Option(
        "--metrics-host",
        help="The address to serve the metrics on.",
        metavar="ADDRESS",
        envvar="SAGA_METRICS_HOST",
    ),
]


@app.command("worker")
def worker_command(
    ctx: typer.Context,
    interval: Interval = "5s",
    concurrency: Concurrency = 4,
    batch: Batch = 20,
    lease_ttl: LeaseTtl = None,
    log_format: LogFormat = None,
    log_file: LogFile = None,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "127.0.0.1",
) -> None:
    """Recover stuck sagas in a loop until SIGTERM or SIGINT (several may run)."""
    session = session_of(ctx)
    with reporting(session):
        seconds = admin.parse_duration(interval, "--interval")
        _set_lease_ttl(session, lease_ttl)
        session.creates = True  # a worker may start before the application first ran
        log = _worker_log(session, log_format, log_file)
        coord = session.coordinator()
        stop = threading.Event()
        stats = admin.WorkerStats()
        with (
            _refusing_schema(),
            _serving_metrics(coord, stop, metrics_port, metrics_host, log, stats, seconds),
            _stopping_on_signals(stop, log, coord.drain),
        ):
            admin.run_worker(
                coord,
                stop,
                interval=seconds,
                batch=batch,
                concurrency=concurrency,
                log=log,
                stats=stats,
            )


def _set_lease_ttl(session: Session, lease_ttl: str | None) -> None:
    """``--lease-ttl``, checked before the database is opened."""
    if lease_ttl is not None:
        ttl = admin.parse_duration(lease_ttl, "--lease-ttl")
        session.lease_ttl = check_lease_ttl(ttl, "--lease-ttl")


@contextlib.contextmanager
def _refusing_schema() -> Iterator[None]:
    """A schema of another release is a deployment to fix, not an outage to wait out:
    the worker exits 2 (bad input), the versions named, as a misconfiguration does."""
    try:
        yield
    except SchemaVersionError as wrong:
        raise ConfigurationError(str(wrong)) from None


@contextlib.contextmanager
def _serving_metrics(
    coord: Coordinator,
    stop: threading.Event,
    port: int | None,
    host: str,
    log: Callable[[str], None],
    stats: admin.WorkerStats,
    interval: float,
) -> Iterator[None]:
    """With ``--metrics-port``, serve the worker's metrics while it runs, and its health:
    /livez (/healthz) while its loop turns and the store answers, /readyz after its
    first pass."""
    if port is None:
        yield
        return
    server = admin.serve_worker_metrics(coord, stop, port, host, stats, interval)
    log(f"metrics on http://{host}:{server.server_port}/metrics")
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def _worker_log(
    session: Session, log_format: str | None, log_file: str | None
) -> Callable[[str], None]:
    """How the worker tells what it does: plain lines on standard error, or, with
    ``--log-format`` or ``--log-file``, records of the ``saga.worker`` logger beside
    the engine's own (``saga.logs``)."""
    if log_format is None and log_file is None:
        return lambda text: _log(session, text)
    if log_format not in (None, "text", "json"):
        raise ConfigurationError(f"--log-format {log_format!r}: use text or json")
    try:
        logs.configure(log_format=log_format or "text", log_file=log_file)
    except OSError as error:
        raise ConfigurationError(f"--log-file {log_file}: {error.strerror}") from None
    worker = logging.getLogger("saga.worker")
    return lambda text: worker.info(scrub(text, session.url))


def _log(session: Session, text: str) -> None:
    stamp = admin.iso_time(time.time())
    session.err.print(f"{stamp} {printable(scrub(text, session.url))}", markup=False)


@contextlib.contextmanager
def _stopping_on_signals(
    stop: threading.Event, log: Callable[[str], None], drain: Callable[[], None]
) -> Iterator[None]:
    """The first SIGTERM/SIGINT asks for a clean stop, the sagas in hand handed back at
    their next step boundary; a second one acts as usual."""
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {number: signal.getsignal(number) for number in signals}

    def on_signal(number: int, _frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        log(f"{name}: handing the sagas in hand back at their next step, then stopping")
        drain()  # only sets a flag: safe in a signal handler
        stop.set()
        for restored in signals:
            signal.signal(restored, previous[restored])

    for number in signals:
        signal.signal(number, on_signal)
    try:
        yield
    finally:
        for number in signals:
            signal.signal(number, previous[number])
