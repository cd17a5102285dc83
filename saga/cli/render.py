"""What the admin functions return, for reading: tables on a terminal,
aligned plain text elsewhere (see :meth:`Session.table`).

Stored text (names, keys, errors, event details) is never trusted to be
printable: :class:`Session` escapes what it prints with
:func:`~saga.cli.session.printable`, and so does ``_styled`` here, before rich
sees the text.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shlex
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from saga import admin
from saga._internal.codec import as_json_value
from saga._internal.ports import DEFAULT_LIST_LIMIT
from saga._internal.status import SagaStatus, StepStatus
from saga._internal.views import SagaView, StepView
from saga._internal.wording import unsafe
from saga.cli.session import Session, printable, shown_url

STATUS_STYLES = {
    SagaStatus.RUNNING: "cyan",
    SagaStatus.COMPENSATING: "yellow",
    SagaStatus.COMPLETED: "green",
    SagaStatus.COMPENSATED: "yellow",
    SagaStatus.FAILED: "bold red",
    SagaStatus.CANCELLED: "magenta",
    SagaStatus.PAUSED: "bold blue",
}
STEP_STYLES = {
    StepStatus.RUNNING: "bold cyan",
    StepStatus.SUCCEEDED: "green",
    StepStatus.FAILED: "red",
    StepStatus.IN_DOUBT: "bold red",
    StepStatus.COMPENSATING: "bold yellow",
    StepStatus.COMPENSATED: "yellow",
}


SHORT_ID = 8
"""How much of a saga id a table shows when the whole ids do not fit the terminal: any
prefix of four characters or more names the saga back (``saga show 162c04cc``)."""


def _styled(text: str, style: str = "") -> Text:
    """Stored text in a style: escaped first, since rich's ``Text`` silently drops some
    control characters (BEL, CR) that the operator should see as escapes instead."""
    return Text(printable(text), style=style)


# -- list -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ListArgs:
    """``saga list``'s query as the operator typed it: what the next page's command repeats."""

    statuses: tuple[str, ...] = ()
    name: str | None = None
    key: str | None = None
    stuck: bool = False
    older_than: str | None = None
    limit: int = DEFAULT_LIST_LIMIT
    wide: bool = False
    key_prefix: str | None = None
    step: str | None = None

    def options(self) -> list[str]:
        """The options that ask for this query again (the default limit goes without saying)."""
        words = [word for status in self.statuses for word in ("--status", status)]
        for option, value in (
            ("--name", self.name),
            ("--key", self.key),
            ("--key-prefix", self.key_prefix),
            ("--step", self.step),
            ("--older-than", self.older_than),
            ("--limit", None if self.limit == DEFAULT_LIST_LIMIT else str(self.limit)),
        ):
            if value is not None:
                words += [option, value]
        flags = [flag for flag, given in (("--stuck", self.stuck), ("--wide", self.wide)) if given]
        return words + flags


def render_page(session: Session, page: admin.SagaPage, args: ListArgs) -> None:
    if not page.sagas:
        session.say("no stuck sagas" if args.stuck else "no sagas match")
        return
    headers = ["ID", "NAME", "KEY", "STATUS", "STEP", "ATTEMPT", "AGE", "OWNER / LEASE", "ERROR"]
    id_table(session, headers, [_page_row(view, page.now) for view in page.sagas], args.wide)
    for saga_id, why in page.unrunnable.items():  # --stuck: what no worker like us takes
        session.say(f"{saga_id}: no worker started like this one can run it: {why}")
    if page.next_before:
        hint = Text(f"more: {next_page_command(session, args, page.next_before)}", style="dim")
        session.out.print(hint, soft_wrap=True, highlight=False)  # safe by construction


def next_page_command(session: Session, args: ListArgs, before: str) -> str:
    """The ``saga list`` that shows the page after ``before`` of the same query, every
    word quoted for a shell, so that pasting it is safe whatever a name or key holds."""
    database = [] if session.url is None else ["--db", shown_url(session.url)]
    words = ["saga", *database, "list", *args.options(), "--before", before]
    return " ".join(map(shell_word, words))


def shell_word(word: str) -> str:
    """``word`` quoted so that a shell given it back reads exactly ``word``, and safe to
    print: ``shlex.quote``'s single quotes, where a newline is kept as it is (pasted, the
    line goes on inside the quotes, and ``shlex.split`` reads it back). Any other control
    or invisible character must not reach the terminal raw, so a word holding one is
    written in ANSI-C quoting, ``$'...'`` with escapes (bash, zsh, ksh, POSIX.1-2024 sh)."""
    if not any(unsafe(char) for char in word if char != "\n"):
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(char) for char in word) + "'"


def _ansi_c(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    return printable(char) if unsafe(char) else char  # \n, \x1b, \u202e: as $'...' reads them


def id_table(
    session: Session,
    headers: Sequence[str],
    rows: Sequence[Sequence[str | Text]],
    wide: bool,
    column: int = 0,
) -> None:
    """A table whose ``column`` holds saga ids, never cut mid-width: whole ids when they
    fit the terminal, when piped and with ``--wide``; else their first characters."""
    if not wide and not session.fits(headers, rows):
        shown = short_ids([str(row[column]) for row in rows])
        rows = [
            [*row[:column], short, *row[column + 1 :]]
            for row, short in zip(rows, shown, strict=True)
        ]
    session.table(headers, rows, whole={column})


def short_ids(ids: Sequence[str]) -> list[str]:
    """Each id's first ``SHORT_ID`` characters, or more where two ids shown share them
    (as git shortens hashes), so that every short id on the screen names one saga."""
    ordered = sorted(set(ids))
    shared = dict.fromkeys(ordered, 0)
    for left, right in itertools.pairwise(ordered):  # an id shares most with a neighbour
        common = len(os.path.commonprefix([left, right]))  # noqa: RUF071 - not paths
        shared[left] = max(shared[left], common)
        shared[right] = max(shared[right], common)
    return [saga_id[: _short_length(saga_id, shared[saga_id])] for saga_id in ids]


def _short_length(saga_id: str, shared: int) -> int:
    length = max(SHORT_ID, shared + 1)
    # A prefix ending in a dash reads like a cut: take the character after it too.
    return length + 1 if saga_id[length - 1 : length] == "-" else length


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
        _listed_error(view.error),
    ]


LISTED_ERROR = 60
"""How much of a saga's error a ``saga list`` row shows: its first line, at most this
many characters, so that a row stays a row; ``saga show`` and ``--json`` give it whole."""


def _listed_error(error: str | None) -> str:
    lines = (error or "").strip().splitlines()
    if not lines:
        return "-"
    if len(lines) == 1 and len(lines[0]) <= LISTED_ERROR:
        return lines[0]
    return lines[0][: LISTED_ERROR - 3] + "..."  # more to read: ``saga show``


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


# -- show -------------------------------------------------------------------------------------


def render_detail(session: Session, detail: admin.SagaDetail) -> None:
    view, now = detail.saga, detail.now
    created = None if view.created_at is None else now - view.created_at
    facts: list[tuple[str, str | Text]] = [
        ("saga", f"{view.id} ({view.kind})"),
        ("name", view.name),
        *(
            [("version", f"{view.version} (fingerprint {view.fingerprint})")]
            if view.version
            else []
        ),
        ("key", view.key or "-"),
        ("status", _status_text(view, now)),
        ("owner", f"{_lease_text(view, now)} (epoch {view.epoch})"),
        ("created", f"{admin.iso_time(view.created_at)} ({admin.human_duration(created)} ago)"),
        ("updated", admin.iso_time(view.updated_at) or "-"),
        ("input", json.dumps(view.input, ensure_ascii=False)),
    ]
    if view.error:
        facts.append(("error", view.error))
    if view.forward_error and view.forward_error != view.error:
        facts.append(("unwinding began because", view.forward_error))
    if view.cancel_requested:
        facts.append(("cancel", "requested"))
    if view.status is SagaStatus.PAUSED:  # nobody carries it on: say what will
        facts.append(("paused", f"waits for: saga resume {view.id} (or saga compensate)"))
    if detail.pivot:
        passed = "passed: it can only go forward" if admin.past_pivot(view) else "not passed"
        facts.append(("pivot", f"{detail.pivot} ({passed})"))
    if detail.retry_unknown:  # one line for the saga, not the same words on every step
        facts.append(("retry on", detail.retry_unknown))
    session.table(None, [[Text(k, style="bold"), v] for k, v in facts])
    session.say()
    _render_steps(session, detail)


def _render_steps(session: Session, detail: admin.SagaDetail) -> None:
    headers = ["#", "STEP", "KIND", "STATUS", "ATTEMPT", "DURATION", "RESULT / ERROR", "NOTE"]
    rows = [_step_row(step, _note_of(detail, step.name)) for step in detail.saga.steps]
    rows += [["-", name, "", "pending", "", "", "", ""] for name in detail.pending]
    if not detail.retry_unknown:  # known: a column, after the attempts it governs
        headers.insert(5, "RETRY ON")
        names = [step.name for step in detail.saga.steps] + list(detail.pending)
        rows = [
            [*row[:5], detail.retry_of(name) or "-", *row[5:]]
            for row, name in zip(rows, names, strict=True)
        ]
    session.table(headers, rows)
    for step in detail.saga.steps:  # a result shown as stored: say why, in full
        if step.result_error is not None:
            session.say(f"step {step.name}: result shown as stored JSON: {step.result_error}")
    for step in detail.saga.steps:
        _say_compensation_result(session, step)


def _say_compensation_result(session: Session, step: StepView) -> None:
    """What the step's compensation returned (a refund id): what an operator reconciles
    against, so it is said in full, with why it reads as stored JSON if it does."""
    if step.compensation_result is not None:
        returned = json.dumps(as_json_value(step.compensation_result), ensure_ascii=False)
        session.say(f"step {step.name}: compensation returned {returned}")
    if step.compensation_result_error is not None:
        session.say(f"step {step.name}: compensation result: {step.compensation_result_error}")


def _note_of(detail: admin.SagaDetail, name: str) -> Text | None:
    """What the NOTE column says of step ``name`` besides its status: waiting to retry
    after a failed attempt, or why it was settled without running."""
    wait = detail.waiting.get(name)
    if wait is not None:
        return Text(wait.text, style="yellow")
    note = detail.notes.get(name)
    return Text(note) if note else None


def _step_row(step: StepView, note: Text | None = None) -> list[str | Text]:
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
        note or _note(step),
    ]


def _note(step: StepView) -> Text:
    if step.status is StepStatus.RUNNING:
        return Text("IN DOUBT: may have acted, not confirmed", style="bold red")
    if step.status is StepStatus.IN_DOUBT:
        return Text("IN DOUBT: given up, may have acted; see saga mark-step", style="bold red")
    if step.status is StepStatus.COMPENSATING:
        return Text("IN DOUBT: compensation may have run", style="bold red")
    if step.kind.value == "pivot":
        return Text("pivot: point of no return", style="bold")
    return Text("")


def _compact(value: Any, width: int = 60) -> str:
    text = json.dumps(as_json_value(value), ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


# -- history ----------------------------------------------------------------------------------


def render_timeline(session: Session, timeline: admin.Timeline) -> None:
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
        _styled(entry.text, style),
    ]


# -- diff -------------------------------------------------------------------------------------


def render_diff(session: Session, diff: admin.SagaDiff, wide: bool = False) -> None:
    sides = [("left", diff.left), ("right", diff.right)]
    id_table(
        session,
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
        wide,
        column=1,
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


# -- acting -----------------------------------------------------------------------------------


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
    lost = summary.count(admin.Result.LOST)
    if lost:  # rare (this process stalled past a lease): said only when it happened
        counts += f", {lost} lost to another process"
    if summary.dry_run:
        session.say(f"dry run: {len(summary.items) - skipped} to recover, {skipped} skipped")
    else:
        recovered = f"recovered {summary.recovered} of {len(summary.items)}"
        session.say(f"{recovered}: {counts}, {skipped} skipped")


def _recovery_line(item: admin.RecoveryItem, dry_run: bool) -> Text:
    reason = f": {item.reason}" if item.reason else ""
    if item.result is admin.Result.SKIPPED:
        return _styled(f"skipped      {item.saga_id} ({item.name}){reason}", "dim")
    if dry_run:
        return _styled(f"would {item.plan.value:<8} {item.saga_id} ({item.name})")
    status = f" -> {item.status.value}" if item.status else ""
    style = "red" if item.result is admin.Result.FAILED else "green"
    if item.result is admin.Result.LOST:
        style = "yellow"
    return _styled(f"{item.result.value:<12} {item.saga_id} ({item.name}){status}{reason}", style)


def render_standing(session: Session, view: SagaView) -> None:
    """Where a saga stands after an operator action."""
    extra = (
        " (cancel requested: its owner stops at the next step boundary, or the next recovery"
        " by a process that knows its definition unwinds it)"
    )
    if view.status is SagaStatus.PAUSED and view.owner:
        extra = " (its owner hands it back at its next step boundary; nothing is compensated)"
    elif not (view.status is SagaStatus.RUNNING and view.cancel_requested):
        extra = ""
    session.say(f"saga {view.id}: {view.status.value}{extra}")
