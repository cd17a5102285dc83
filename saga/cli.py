"""The ``saga`` admin command: parse the arguments, call one function of
:mod:`saga.admin`, render what it returns.

Output is a rich table with colours on a terminal and aligned plain text
otherwise; ``--json`` prints the documented JSON shapes (docs/operating.md).
Errors are one line on stderr (a traceback only with ``--debug``), and the
exit code says what happened: 0 done, 1 the operation failed or was refused,
2 the command line or its target was wrong (usage, unknown or malformed id,
unknown status, bad URL, unreachable database).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from saga import admin
from saga.coordinator import Coordinator
from saga.errors import (
    ConfigurationError,
    OperationRefusedError,
    SagaError,
    SagaFailed,
    StorageUnavailableError,
    UnknownSagaError,
)
from saga.status import SagaStatus, StepStatus
from saga.store import default_url
from saga.views import SagaView, StepView

OK, FAILED, BAD_INPUT = 0, 1, 2

app = typer.Typer(
    name="saga",
    help="Inspect, recover and operate durable sagas.",
    add_completion=False,
    pretty_exceptions_enable=False,
    invoke_without_command=True,
)
db_app = typer.Typer(help="Create, migrate and check the schema.", invoke_without_command=True)
app.add_typer(db_app, name="db")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (see docs/operating.md).")]
SagaId = Annotated[
    str,
    typer.Argument(metavar="ID", help="A saga id, as `saga list` shows it.", show_default=False),
]

STATUS_STYLES = {
    SagaStatus.RUNNING: "cyan",
    SagaStatus.COMPENSATING: "yellow",
    SagaStatus.COMPLETED: "green",
    SagaStatus.COMPENSATED: "yellow",
    SagaStatus.FAILED: "bold red",
    SagaStatus.CANCELLED: "magenta",
}
STEP_STYLES = {
    StepStatus.RUNNING: "bold cyan",
    StepStatus.SUCCEEDED: "green",
    StepStatus.FAILED: "red",
    StepStatus.COMPENSATING: "bold yellow",
    StepStatus.COMPENSATED: "yellow",
}


# -- the session: global options, output, errors -------------------------------------------


@dataclasses.dataclass
class Session:
    """What the global options set up, shared by every command of one invocation."""

    url: str | None
    apps: list[str]
    debug: bool
    json: bool
    out: Console = dataclasses.field(default_factory=lambda: _console(stderr=False))
    err: Console = dataclasses.field(default_factory=lambda: _console(stderr=True))
    _coordinator: Coordinator | None = None

    def coordinator(self) -> Coordinator:
        """Opened on first use, so that `--help` and the demo never touch the database."""
        if self._coordinator is None:
            self._coordinator = admin.open_coordinator(self.url, self.apps)
        return self._coordinator

    def close(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None

    def wants_json(self, flag: bool) -> bool:
        return flag or self.json

    def emit_json(self, payload: Any) -> None:
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))

    def say(self, text: str | Text = "", style: str | None = None) -> None:
        self.out.print(text, style=style, markup=False)

    def table(self, headers: Sequence[str] | None, rows: Sequence[Sequence[str | Text]]) -> None:
        """A rich table on a terminal, aligned plain columns elsewhere (no header row: None)."""
        if not rows and not headers:
            return
        if self.out.is_terminal:
            columns = headers or [""] * len(rows[0])
            table = Table(
                *columns, box=None, header_style="bold", pad_edge=False, show_header=bool(headers)
            )
            for row in rows:
                table.add_row(*row)
            self.out.print(table)
            return
        for line in plain_columns(headers, rows):
            self.out.print(line, markup=False, highlight=False)


def _console(*, stderr: bool) -> Console:
    # soft_wrap: plain output is never cut at 80 columns; user text is never markup.
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def plain_columns(headers: Sequence[str] | None, rows: Sequence[Sequence[str | Text]]) -> list[str]:
    cells = [list(headers)] if headers else []
    cells += [[str(cell) for cell in row] for row in rows]
    if not cells:
        return []
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def session_of(ctx: typer.Context) -> Session:
    session = ctx.find_object(Session)
    assert session is not None, "the app callback sets the session up"
    return session


@contextlib.contextmanager
def reporting(session: Session) -> Iterator[None]:
    """Turn any error into one line on stderr and the right exit code."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except Exception as error:
        code, message = explain(error)
        if session.debug:
            session.err.print(scrub(traceback.format_exc(), session.url), markup=False, end="")
        line = " ".join(scrub(message, session.url).split())
        session.err.print(f"saga: error: {line}", markup=False, style="red")
        raise typer.Exit(code) from None


def explain(error: Exception) -> tuple[int, str]:
    """The exit code for an error, and the line that tells the operator what to do."""
    if isinstance(error, SagaFailed):
        cause = f": {error.__cause__}" if error.__cause__ else ""
        return FAILED, f"{error}{cause}; see `saga history {error.saga_id}`"
    if isinstance(error, StorageUnavailableError):
        return BAD_INPUT, (
            f"cannot reach the database: {error}; check --db or $SAGA_DATABASE_URL "
            "and that the server is up"
        )
    if isinstance(error, UnknownSagaError | ConfigurationError):
        return BAD_INPUT, str(error)
    if isinstance(error, OperationRefusedError):
        return FAILED, f"refused: {error}"
    if isinstance(error, SagaError):
        return FAILED, str(error)
    return FAILED, f"unexpected {type(error).__name__}: {error} (run with --debug for details)"


def scrub(text: str, url: str | None) -> str:
    """``text`` with the URL's password blanked, should any message ever carry it.

    Messages already use the masked URL; this is the second line of defence.
    """
    raw = url or default_url()
    password = _password(raw)
    if not password:
        return text
    return text.replace(raw, masked_url(raw)).replace(f":{password}@", ":***@")


def _password(url: str) -> str | None:
    try:
        from sqlalchemy.engine import make_url

        password = make_url(url).password
        return None if password is None else str(password)
    except Exception:  # an unparsable URL has no password we can find
        return None


def masked_url(url: str) -> str:
    from saga.adapters.sql import masked  # the adapter is imported only when needed

    return str(masked(url))


@app.callback()
def main_options(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Database URL (default: $SAGA_DATABASE_URL, else sqlite:///saga.db).",
            show_default=False,
        ),
    ] = None,
    apps: Annotated[
        list[str] | None,
        typer.Option(
            "--app",
            help="Import this module (repeatable) so its sagas and compensations are known.",
            show_default=False,
        ),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Inspect, recover and operate durable sagas."""
    session = Session(db, list(apps or ()), debug, json_output)
    ctx.obj = session
    ctx.call_on_close(session.close)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


# -- reading --------------------------------------------------------------------------------


@app.command("list")
def list_command(
    ctx: typer.Context,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            help="running, compensating, completed, compensated, "
            "failed or cancelled; repeat or comma-separate.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Only this saga name.")] = None,
    stuck: Annotated[
        bool, typer.Option("--stuck", help="Running or compensating with an expired lease.")
    ] = False,
    older_than: Annotated[
        str | None, typer.Option("--older-than", help="Created longer ago than this (10m, 2d).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many.")] = 50,
    before: Annotated[
        str | None, typer.Option("--before", help="The page after this id (see the last line).")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Sagas, newest first."""
    session = session_of(ctx)
    with reporting(session):
        page = admin.list_sagas(
            session.coordinator(),
            statuses=admin.parse_statuses(status or ()),
            name=name,
            stuck=stuck,
            older_than=None if older_than is None else admin.parse_duration(older_than),
            limit=limit,
            before=before,
        )
        if session.wants_json(json_output):
            session.emit_json(page.as_json())
        else:
            render_page(session, page, stuck)


def render_page(session: Session, page: admin.SagaPage, stuck: bool) -> None:
    if not page.sagas:
        session.say("no stuck sagas" if stuck else "no sagas match")
        return
    headers = ["ID", "NAME", "KEY", "STATUS", "STEP", "ATTEMPT", "AGE", "OWNER / LEASE"]
    session.table(headers, [_page_row(view, page.now) for view in page.sagas])
    if page.next_before:
        session.say(f"more: saga list --before {page.next_before}", style="dim")


def _page_row(view: SagaView, now: float) -> list[str | Text]:
    step = admin.current_step(view)
    age = None if view.created_at is None else now - view.created_at
    return [
        view.id,
        view.name,
        view.key or "-",
        _status_text(view, now),
        f"{step.name} ({step.status.value})" if step else "-",
        str(step.attempt) if step else "-",
        admin.human_duration(age),
        _lease_text(view, now),
    ]


def _status_text(view: SagaView, now: float) -> Text:
    label = view.status.value + (" (stuck)" if admin.is_stuck(view, now) else "")
    return Text(label, style=STATUS_STYLES.get(view.status, ""))


def _lease_text(view: SagaView, now: float) -> str:
    left = admin.lease_left(view, now)
    if left is None:
        return "-"
    if left < 0:
        return f"{view.owner or 'released'}, expired {admin.human_duration(-left)} ago"
    return f"{view.owner}, {admin.human_duration(left)} left"


@app.command("show")
def show_command(ctx: typer.Context, saga_id: SagaId, json_output: JsonFlag = False) -> None:
    """One saga: its input and success stack, with the in-doubt step and the pivot marked."""
    session = session_of(ctx)
    with reporting(session):
        detail = admin.show_saga(session.coordinator(), saga_id)
        if session.wants_json(json_output):
            session.emit_json(detail.as_json())
        else:
            render_detail(session, detail)


def render_detail(session: Session, detail: admin.SagaDetail) -> None:
    view, now = detail.saga, detail.now
    created = None if view.created_at is None else now - view.created_at
    facts: list[tuple[str, str | Text]] = [
        ("saga", f"{view.id} ({view.kind})"),
        ("name", view.name),
        ("key", view.key or "-"),
        ("status", _status_text(view, now)),
        ("owner", f"{_lease_text(view, now)} (epoch {view.epoch})"),
        ("created", f"{admin.iso_time(view.created_at)} ({admin.human_duration(created)} ago)"),
        ("updated", admin.iso_time(view.updated_at) or "-"),
        ("input", json.dumps(view.input, ensure_ascii=False)),
    ]
    if view.error:
        facts.append(("error", view.error))
    if view.cancel_requested:
        facts.append(("cancel", "requested"))
    if detail.pivot:
        passed = "passed: it can only go forward" if admin.past_pivot(view) else "not passed"
        facts.append(("pivot", f"{detail.pivot} ({passed})"))
    session.table(None, [[Text(k, style="bold"), v] for k, v in facts])
    session.say()
    headers = ["#", "STEP", "KIND", "STATUS", "ATTEMPT", "DURATION", "RESULT / ERROR", "NOTE"]
    rows = [_step_row(step) for step in view.steps]
    rows += [["-", name, "", "pending", "", "", "", ""] for name in detail.pending]
    session.table(headers, rows)


def _step_row(step: StepView) -> list[str | Text]:
    attempt = str(step.attempt)
    if step.compensation_attempt:
        attempt += f" (undo {step.compensation_attempt})"
    return [
        str(step.seq),
        step.name,
        step.kind.value,
        Text(step.status.value, style=STEP_STYLES.get(step.status, "")),
        attempt,
        admin.human_duration(step.duration),
        step.error or ("-" if step.result is None else _compact(step.result)),
        _note(step),
    ]


def _note(step: StepView) -> Text:
    if step.status is StepStatus.RUNNING:
        return Text("IN DOUBT: may have acted, not confirmed", style="bold red")
    if step.status is StepStatus.COMPENSATING:
        return Text("IN DOUBT: compensation may have run", style="bold red")
    if step.kind.value == "pivot":
        return Text("pivot: point of no return", style="bold")
    return Text("")


def _compact(value: Any, width: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


@app.command("history")
def history_command(ctx: typer.Context, saga_id: SagaId, json_output: JsonFlag = False) -> None:
    """The saga's events, oldest first, with timestamps and durations."""
    session = session_of(ctx)
    with reporting(session):
        timeline = admin.saga_history(session.coordinator(), saga_id)
        if session.wants_json(json_output):
            session.emit_json(timeline.as_json())
            return
        headers = ["AT", "OFFSET", "TOOK", "EPOCH", "EVENT"]
        session.table(headers, [_event_row(entry) for entry in timeline.entries])


def _event_row(entry: admin.TimelineEntry) -> list[str | Text]:
    style = "red" if "failed" in entry.event.kind or "refused" in entry.event.kind else ""
    took = "" if entry.duration is None else admin.human_duration(entry.duration)
    return [
        admin.iso_time(entry.event.at) or "",
        "+" + admin.human_duration(entry.offset),
        took,
        str(entry.event.epoch or ""),
        Text(entry.text, style=style),
    ]


@app.command("diff")
def diff_command(
    ctx: typer.Context, left: SagaId, right: SagaId, json_output: JsonFlag = False
) -> None:
    """Step by step, where two runs differ (SHA-256 digests of inputs and outputs, timing)."""
    session = session_of(ctx)
    with reporting(session):
        diff = admin.diff_sagas(session.coordinator(), left, right)
        if session.wants_json(json_output):
            session.emit_json(diff.as_json())
        else:
            render_diff(session, diff)


def render_diff(session: Session, diff: admin.SagaDiff) -> None:
    sides = [("left", diff.left), ("right", diff.right)]
    session.table(
        ["", "ID", "NAME", "STATUS", "TOOK", "INPUT SHA-256"],
        [
            [
                side,
                v.id,
                v.name,
                v.status.value,
                admin.human_duration(admin.total_duration(v)),
                admin.input_digest(v)[:16],
            ]
            for side, v in sides
        ],
    )
    session.say("input: " + ("same" if diff.same_input else "DIFFERENT"))
    session.say()
    headers = ["STEP", "LEFT", "RIGHT", "INPUT", "OUTPUT", "LEFT TOOK", "RIGHT TOOK", "DELTA"]
    session.table(headers, [_diff_row(step) for step in diff.steps])


def _diff_row(step: admin.StepDiff) -> list[str | Text]:
    def status(side: StepView | None) -> str:
        return "(not run)" if side is None else side.status.value

    def took(side: StepView | None) -> str:
        return "" if side is None else admin.human_duration(side.duration)

    delta = step.duration_delta
    return [
        step.name,
        status(step.left),
        status(step.right),
        _verdict(step.same_input),
        _verdict(step.same_output),
        took(step.left),
        took(step.right),
        "" if delta is None else ("+" if delta >= 0 else "-") + admin.human_duration(abs(delta)),
    ]


def _verdict(same: bool | None) -> Text:
    if same is None:
        return Text("n/a", style="dim")
    return Text("same", style="green") if same else Text("DIFFERENT", style="bold red")


# -- acting ---------------------------------------------------------------------------------


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
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many sagas.")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Claim stuck sagas and finish them: forward, or compensating."""
    session = session_of(ctx)
    with reporting(session), _progress(session) as progress:
        summary = admin.recover(
            session.coordinator(),
            saga_ids or (),
            compensate=compensate,
            dry_run=dry_run,
            limit=limit,
            progress=progress,
        )
    if session.wants_json(json_output):
        session.emit_json(summary.as_json())
    else:
        render_recovery(session, summary)
    raise typer.Exit(OK if summary.ok else FAILED)


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


def render_recovery(session: Session, summary: admin.RecoverySummary) -> None:
    if not summary.items:
        session.say("no stuck sagas")
        return
    for item in summary.items:
        session.say(_recovery_line(item, summary.dry_run))
    counts = ", ".join(
        f"{summary.count(r)} {r.value}"
        for r in (admin.Result.RESUMED, admin.Result.COMPENSATED, admin.Result.FAILED)
    )
    skipped = summary.count(admin.Result.SKIPPED)
    if summary.dry_run:
        session.say(f"dry run: {len(summary.items) - skipped} to recover, {skipped} skipped")
    else:
        session.say(f"recovered {len(summary.items)}: {counts}, {skipped} skipped")


def _recovery_line(item: admin.RecoveryItem, dry_run: bool) -> Text:
    reason = f": {item.reason}" if item.reason else ""
    if item.result is admin.Result.SKIPPED:
        return Text(f"skipped      {item.saga_id} ({item.name}){reason}", style="dim")
    if dry_run:
        return Text(f"would {item.plan.value:<8} {item.saga_id} ({item.name})")
    status = f" -> {item.status.value}" if item.status else ""
    style = "red" if item.result is admin.Result.FAILED else "green"
    return Text(
        f"{item.result.value:<12} {item.saga_id} ({item.name}){status}{reason}", style=style
    )


def _act(ctx: typer.Context, json_output: bool, action: Callable[[Coordinator], SagaView]) -> None:
    """Run one operator action and say where the saga now stands."""
    session = session_of(ctx)
    with reporting(session):
        coord = session.coordinator()
        view = action(coord)
        if session.wants_json(json_output):
            session.emit_json(admin.saga_summary(view, coord.store.now()))
            return
        extra = " (cancel requested: its owner stops at the next step boundary)"
        pending = view.status is SagaStatus.RUNNING and view.cancel_requested
        session.say(f"saga {view.id}: {view.status.value}" + (extra if pending else ""))


@app.command("compensate")
def compensate_command(ctx: typer.Context, saga_id: SagaId, json_output: JsonFlag = False) -> None:
    """Unwind a saga now (refused past its pivot or once it finished)."""
    _act(ctx, json_output, lambda coord: admin.compensate(coord, saga_id))


@app.command("resume")
def resume_command(ctx: typer.Context, saga_id: SagaId, json_output: JsonFlag = False) -> None:
    """Carry a stuck declarative saga forward now (needs --app)."""
    _act(ctx, json_output, lambda coord: admin.resume(coord, saga_id))


@app.command("cancel")
def cancel_command(ctx: typer.Context, saga_id: SagaId, json_output: JsonFlag = False) -> None:
    """Stop a running saga at its next step boundary and unwind it."""
    _act(ctx, json_output, lambda coord: admin.cancel(coord, saga_id))


@app.command("retry-compensation")
def retry_compensation_command(
    ctx: typer.Context, saga_id: SagaId, json_output: JsonFlag = False
) -> None:
    """Run a failed saga's compensations again, with a fresh attempt budget."""
    _act(ctx, json_output, lambda coord: admin.retry_compensation(coord, saga_id))


@app.command("mark-compensated")
def mark_compensated_command(
    ctx: typer.Context,
    saga_id: SagaId,
    step: Annotated[str, typer.Option("--step", help="The step you undid by hand.")],
    reason: Annotated[str, typer.Option("--reason", help="What you did; it is recorded.")],
    json_output: JsonFlag = False,
) -> None:
    """Record that you undid a failed saga's step by hand, then unwind the rest."""
    _act(ctx, json_output, lambda coord: admin.mark_compensated(coord, saga_id, step, reason))


@app.command("worker")
def worker_command(
    ctx: typer.Context,
    interval: Annotated[str, typer.Option("--interval", help="Pause between passes.")] = "5s",
    batch: Annotated[int, typer.Option("--batch", help="At most this many sagas a pass.")] = 20,
) -> None:
    """Recover stuck sagas in a loop until SIGTERM or SIGINT (several may run)."""
    session = session_of(ctx)
    with reporting(session):
        seconds = admin.parse_duration(interval, "--interval")
        coord = session.coordinator()
        stop = threading.Event()
        with _stopping_on_signals(stop, lambda text: _log(session, text)):
            admin.run_worker(
                coord, stop, interval=seconds, batch=batch, log=lambda t: _log(session, t)
            )


def _log(session: Session, text: str) -> None:
    stamp = admin.iso_time(time.time())
    session.err.print(f"{stamp} {scrub(text, session.url)}", markup=False)


@contextlib.contextmanager
def _stopping_on_signals(stop: threading.Event, log: Callable[[str], None]) -> Iterator[None]:
    """The first SIGTERM/SIGINT asks for a clean stop; a second one acts as usual."""
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {number: signal.getsignal(number) for number in signals}

    def on_signal(number: int, _frame: FrameType | None) -> None:
        log(f"{signal.Signals(number).name}: finishing the saga in hand, then stopping")
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


@app.command("purge")
def purge_command(
    ctx: typer.Context,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Created longer ago than this (30d).")
    ],
    status: Annotated[
        list[str] | None,
        typer.Option("--status", "-s", help="Finished statuses (default: completed,compensated)."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete finished sagas (with their steps and events), in batches."""
    session = session_of(ctx)
    with reporting(session):
        seconds = admin.parse_duration(older_than, "--older-than")
        statuses = admin.parse_statuses(status or ["completed,compensated"])
        coord = session.coordinator()
        what = ", ".join(s.value for s in statuses)
        question = (
            f"Delete every {what} saga created more than {older_than} ago on {coord.store.url}?"
        )
        if not yes:
            _confirm(question)
        deleted = admin.purge(
            coord, older_than=seconds, statuses=statuses, progress=_purge_progress(session)
        )
        if session.json:
            session.emit_json({"deleted": deleted})
        else:
            session.say(f"deleted {deleted} saga(s)")


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise ConfigurationError("purge needs confirmation: run it on a terminal or pass --yes")
    if not typer.confirm(question, default=False):
        raise typer.Exit(FAILED)


def _purge_progress(session: Session) -> Callable[[int], None] | None:
    if not session.err.is_terminal:
        return None
    return lambda total: session.err.print(f"deleted {total}...", markup=False)


@db_app.callback()
def db_options(ctx: typer.Context) -> None:
    """Create, migrate and check the schema."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


@db_app.command("upgrade")
def db_upgrade_command(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Create saga's tables, or migrate them to this version's schema."""
    session = session_of(ctx)
    with reporting(session):
        status = admin.upgrade_schema(session.coordinator())
        _render_schema(session, status, json_output)


@db_app.command("status")
def db_status_command(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """The schema version in the database; exit 1 unless it is up to date."""
    session = session_of(ctx)
    with reporting(session):
        status = admin.schema_status(session.coordinator())
        _render_schema(session, status, json_output)
    if not status.up_to_date:
        raise typer.Exit(FAILED)


def _render_schema(session: Session, status: admin.SchemaStatus, json_output: bool) -> None:
    if session.wants_json(json_output):
        session.emit_json(status.as_json())
    elif status.version is None:
        session.say(f"{status.url}: no saga tables yet; run `saga db upgrade`")
    elif status.up_to_date:
        session.say(f"{status.url}: schema version {status.version}, up to date")
    else:
        session.say(
            f"{status.url}: schema version {status.version}, this saga expects "
            f"{status.expected}; run `saga db upgrade`"
        )


# -- the demo -------------------------------------------------------------------------------


@app.command("demo")
def demo_command(
    ctx: typer.Context,
    db: Annotated[
        str | None, typer.Option("--db", help="Database URL (default: as the global --db).")
    ] = None,
) -> None:
    """Run three orders through a real saga and tell what happened, step by step."""
    from saga import demo  # the demo's modules load only when asked for

    session = session_of(ctx)
    with reporting(session):
        ok = demo.run(db or session.url, session.out)
    raise typer.Exit(OK if ok else FAILED)


# -- the console script ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """The ``saga`` console script: typer in non-standalone mode, so that usage
    errors are one line too."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="saga", standalone_mode=False)
    except typer.TyperException as error:  # typer's usage errors (bad option, missing argument)
        sys.stderr.write(f"saga: error: {_usage_line(error)}\n")
        code = getattr(error, "exit_code", BAD_INPUT)
    except typer.Abort:
        sys.stderr.write("saga: aborted\n")
        code = FAILED
    except KeyboardInterrupt:
        code = 130
    sys.exit(code if isinstance(code, int) else OK)


def _usage_line(error: typer.TyperException) -> str:
    ctx = getattr(error, "ctx", None)
    path = getattr(ctx, "command_path", "saga")
    message = " ".join(error.format_message().split())
    return f"{message} (see `{path} --help`)"


if __name__ == "__main__":
    main()
