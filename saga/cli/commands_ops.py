"""The commands that act: ``saga recover``, the operator actions, ``worker``,
``purge`` and ``demo`` (``db``: :mod:`saga.cli.commands_db`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Annotated

import typer
from rich.progress import Progress

from saga import admin, logs
from saga.admin import maintenance
from saga.cli.options import (
    DemoDbUrl,
    JsonFlag,
    KeyOption,
    NameOption,
    SagaId,
    app,
    naming_command,
)
from saga.cli.render import render_recovery, render_standing
from saga.cli.session import (
    FAILED,
    OK,
    Session,
    printable,
    reporting,
    scrub,
    session_of,
)
from saga.coordinator import Coordinator
from saga.errors import ConfigurationError, SagaHandedBack, SchemaVersionError
from saga.lease import check_lease_ttl
from saga.views import SagaView

# -- recover ----------------------------------------------------------------------------------


@app.command("recover")
def recover_command(
    ctx: typer.Context,
    saga_ids: Annotated[
        list[str] | None, typer.Argument(help="Only these sagas (default: every stuck one).")
    ] = None,
    compensate: Annotated[
        bool, typer.Option("--compensate", help="Unwind running sagas instead of resuming them.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be done; change nothing.")
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", help="At most this many sagas.", metavar="N")
    ] = None,
    key: KeyOption = None,
    name: NameOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Claim stuck sagas and finish them: forward, or compensating."""
    session = session_of(ctx)
    with reporting(session), _progress(session) as progress:
        chosen: list[admin.SagaRef] = list(saga_ids or ())
        if key is not None or name is not None:
            chosen.append(admin.target(None, key, name))
        summary = admin.recover(
            session.coordinator(),
            chosen,
            compensate=compensate,
            dry_run=dry_run,
            limit=limit,
            progress=progress,
        )
    if session.wants_json(json_output):
        session.emit_json(summary.as_json())
    else:
        render_recovery(session, summary)
    # A dry run changed nothing, so nothing failed: it exits 0 and its report says the rest.
    raise typer.Exit(OK if summary.ok or summary.dry_run else FAILED)


@contextlib.contextmanager
def _progress(session: Session) -> Iterator[admin.Progress | None]:
    """A progress bar on stderr when it is a terminal; nothing otherwise."""
    if not session.err.is_terminal:
        yield None
        return
    with Progress(console=session.err, transient=True) as bar:
        task = bar.add_task("recovering", total=None)

        def advance(item: admin.RecoveryItem, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=item.saga_id[:8])

        yield advance


# -- operator actions -------------------------------------------------------------------------


def _act(ctx: typer.Context, json_output: bool, action: Callable[[Coordinator], SagaView]) -> None:
    """Run one operator action and say where the saga now stands.

    A compensation that failed again and waits for its next attempt is no error: the
    saga is ``compensating`` and a worker retries it when due, so the command says so
    and exits 0 (its JSON adds ``waiting``)."""
    session = session_of(ctx)
    with reporting(session, json_output):
        coord = session.coordinator()
        waiting: admin.Waiting | None = None
        try:
            view = action(coord)
        except SagaHandedBack as handed:
            if not handed.waiting:
                raise
            waiting = admin.waiting_after(coord, handed)
            view = admin.get_saga(coord, handed.saga_id)
        if session.wants_json(json_output):
            summary = admin.saga_summary(view, coord.store.now())
            if waiting is not None:
                summary["waiting"] = waiting.as_json()
            session.emit_json(summary)
        elif waiting is not None:
            session.say(waiting.text)
        else:
            render_standing(session, view)


@naming_command("compensate")
def compensate_command(ctx: typer.Context, json_output: bool, ref: admin.SagaRef) -> None:
    """Unwind a saga now (refused past its pivot or once it finished)."""
    _act(ctx, json_output, lambda coord: admin.compensate(coord, ref))


@naming_command("resume")
def resume_command(ctx: typer.Context, json_output: bool, ref: admin.SagaRef) -> None:
    """Carry a stuck declarative saga forward now (needs --app)."""
    _act(ctx, json_output, lambda coord: admin.resume(coord, ref))


@naming_command("cancel")
def cancel_command(ctx: typer.Context, json_output: bool, ref: admin.SagaRef) -> None:
    """Stop a running saga at its next step boundary and unwind it."""
    _act(ctx, json_output, lambda coord: admin.cancel(coord, ref))


@naming_command("retry-compensation")
def retry_compensation_command(ctx: typer.Context, json_output: bool, ref: admin.SagaRef) -> None:
    """Run a failed saga's compensations again, with a fresh attempt budget."""
    _act(ctx, json_output, lambda coord: admin.retry_compensation(coord, ref))


@app.command("mark-compensated")
def mark_compensated_command(
    ctx: typer.Context,
    saga_id: SagaId,
    step: Annotated[
        str, typer.Option("--step", help="The step you undid by hand.", metavar="STEP")
    ],
    reason: Annotated[
        str, typer.Option("--reason", help="What you did; it is recorded.", metavar="TEXT")
    ],
    json_output: JsonFlag = False,
) -> None:
    """Record that you undid a failed saga's step by hand, then unwind the rest."""
    _act(ctx, json_output, lambda coord: admin.mark_compensated(coord, saga_id, step, reason))


@app.command("mark-step")
def mark_step_command(
    ctx: typer.Context,
    saga_id: SagaId,
    step: Annotated[
        str, typer.Option("--step", help="The step whose outcome is in doubt.", metavar="STEP")
    ],
    did_not_happen: Annotated[
        bool,
        typer.Option(
            "--did-not-happen",
            help="Say that the step's action did not take effect (you checked); required.",
        ),
    ] = False,
    reason: Annotated[
        str, typer.Option("--reason", help="How you know; it is recorded.", metavar="TEXT")
    ] = "",
    json_output: JsonFlag = False,
) -> None:
    """Record what really happened to a step given up in doubt (a failed saga's pivot that
    never returned), so that `saga retry-compensation` may unwind the saga."""

    def mark(coord: Coordinator) -> SagaView:
        if not did_not_happen:  # the one outcome an operator can record today
            raise ConfigurationError("say what happened to the step: --did-not-happen")
        return admin.mark_step(coord, saga_id, step, reason)

    _act(ctx, json_output, mark)


# -- worker -----------------------------------------------------------------------------------


@app.command("worker")
def worker_command(
    ctx: typer.Context,
    interval: Annotated[
        str,
        typer.Option(
            "--interval",
            help="Pause between passes.",
            metavar="DURATION",
            envvar="SAGA_WORKER_INTERVAL",
        ),
    ] = "5s",
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            help="Finish this many stuck sagas at once.",
            metavar="N",
            envvar="SAGA_WORKER_CONCURRENCY",
        ),
    ] = 4,
    batch: Annotated[
        int,
        typer.Option(
            "--batch",
            help="At most this many sagas a pass.",
            metavar="N",
            envvar="SAGA_WORKER_BATCH",
        ),
    ] = 20,
    lease_ttl: Annotated[
        str | None,
        typer.Option(
            "--lease-ttl",
            help="The lease on the saga in hand: if this worker dies, another takes it this long "
            "after the last renewal (default: $SAGA_LEASE_TTL, else 30s; an --app factory's "
            "coordinator has its own).",
            metavar="DURATION",
            show_default=False,
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="Log through the saga loggers, every saga event included: text or json "
            "(one object a line).",
            metavar="text|json",
            envvar="SAGA_LOG_FORMAT",
        ),
    ] = None,
    log_file: Annotated[
        str | None,
        typer.Option(
            "--log-file",
            help="Write the log to this file, rotated at 10 MB (5 kept).",
            metavar="PATH",
            envvar="SAGA_LOG_FILE",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            help="Serve Prometheus /metrics, /livez (/healthz) and /readyz on this port "
            "(needs saga[metrics]).",
            metavar="PORT",
            envvar="SAGA_METRICS_PORT",
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            "--metrics-host",
            help="The address to serve the metrics on.",
            metavar="ADDRESS",
            envvar="SAGA_METRICS_HOST",
        ),
    ] = "127.0.0.1",
) -> None:
    """Recover stuck sagas in a loop until SIGTERM or SIGINT (several may run)."""
    session = session_of(ctx)
    with reporting(session):
        seconds = admin.parse_duration(interval, "--interval")
        if lease_ttl is not None:  # checked before the database is opened
            ttl = admin.parse_duration(lease_ttl, "--lease-ttl")
            session.lease_ttl = check_lease_ttl(ttl, "--lease-ttl")
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


# -- the database -----------------------------------------------------------------------------


@app.command("purge")
def purge_command(
    ctx: typer.Context,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Created longer ago than this (30d).", metavar="AGE")
    ],
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            help="Finished statuses (default: completed,compensated).",
            metavar="STATUS",
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    pace: Annotated[
        float,
        typer.Option(
            "--pace",
            help="Share of the time purge works, resting between batches (1: flat out).",
            metavar="SHARE",
        ),
    ] = maintenance.DEFAULT_PACE,
) -> None:
    """Delete finished sagas (with their steps and events), in batches."""
    session = session_of(ctx)
    with reporting(session):
        seconds = admin.parse_duration(older_than, "--older-than")
        statuses = admin.parse_statuses(status or ["completed,compensated"])
        maintenance.check_pace(pace)
        coord = session.coordinator()
        what = ", ".join(s.value for s in statuses)
        question = (
            f"Delete every {what} saga created more than {older_than} ago on {coord.store.url}?"
        )
        if not yes:
            _confirm(question)
        deleted = admin.purge(
            coord,
            older_than=seconds,
            statuses=statuses,
            progress=_purge_progress(session),
            pace=pace,
        )
        if session.json:
            session.emit_json({"deleted": deleted})
        else:
            session.say(f"deleted {deleted} saga(s)")


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise ConfigurationError("purge needs confirmation: run it on a terminal or pass --yes")
    # Declining aborts (exit 1, "saga: aborted" on stderr), as Ctrl-C and end of input do.
    typer.confirm(question, default=False, abort=True)


def _purge_progress(session: Session) -> Callable[[int], None] | None:
    if not session.err.is_terminal:
        return None
    return lambda total: session.err.print(f"deleted {total}...", markup=False)


# -- the demo ---------------------------------------------------------------------------------


@app.command("demo")
def demo_command(ctx: typer.Context, db: DemoDbUrl = None) -> None:
    """Run three orders through a real saga and tell what happened, step by step."""
    from saga import demo  # the demo's modules load only when asked for

    session = session_of(ctx)
    with reporting(session):
        ok = demo.run(db or session.url, session.out)
    raise typer.Exit(OK if ok else FAILED)
