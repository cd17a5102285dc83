"""One saga: its header, a summary, the timeline, a panel per step, its history,
and (when the console allows them) the operator actions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from saga._internal.status import SagaStatus, StepStatus
from saga._internal.views import SagaView, StepView
from saga.admin import (
    SagaDetail,
    Timeline,
    TimelineEntry,
    human_duration,
    is_stuck,
    iso_time,
    total_duration,
)
from saga.admin.inputs import definition_of
from saga.web import timeline
from saga.web.markup import attr, json_block, page, path, short, table, text

REFRESH_SECONDS = 5

_UNDONE = (StepStatus.SUCCEEDED, StepStatus.RUNNING, StepStatus.IN_DOUBT)


@dataclasses.dataclass(frozen=True)
class Extras:
    """What the page shows besides the saga: actions (``None``: read-only) and a message."""

    verbs: Sequence[tuple[str, str]] | None = None  # (verb, label) when actions are on
    notice: str | None = None
    error: str | None = None


def saga_page(detail: SagaDetail, history: Timeline, extras: Extras) -> str:
    """The whole saga page; it reloads itself while the saga is live."""
    view = detail.saga
    lay = timeline.layout(view, history.entries, detail.now)
    parts = [
        _messages(extras),
        _header(view, detail),
        _summary(detail),
        f'<h2>Timeline</h2><div class="scroll">{timeline.svg(lay)}</div>',
        _legend(),
        "<h2>Steps</h2>",
        *(_panel(view, step, detail, lay.unknown) for step in view.steps),
        *(_pending(name) for name in detail.pending),
        _actions(view, extras.verbs),
        _diff_form(view),
        "<h2>History</h2>",
        _history(history),
    ]
    # A page that reports a refusal stays put: a reload would lose the message.
    live = not view.status.is_terminal and not extras.error
    return page(f"saga {short(view.id)}", "".join(parts), refresh=REFRESH_SECONDS if live else None)


def _messages(extras: Extras) -> str:
    out = ""
    if extras.notice:
        out += f'<p class="notice" id="notice">{text(extras.notice)}</p>'
    if extras.error:
        out += f'<p class="error" id="error">{text(extras.error)}</p>'
    return out


def _header(view: SagaView, detail: SagaDetail) -> str:
    stuck = is_stuck(view, detail.now)
    status = f'<span class="badge {view.status.value}" id="status">{view.status.value}</span>'
    if stuck:
        status += ' <span class="badge stuck" id="stuck">stuck: its process is gone</span>'
    ended = view.updated_at if view.status.is_terminal else None
    started = view.steps[0].started_at if view.steps else None
    fields = [
        ("id", f'<code id="saga-id">{text(view.id)}</code>'),
        ("short id", short(view.id)),
        ("name", text(view.name)),
        ("key", f'<span id="saga-key">{text(view.key)}</span>'),
        ("status", status),
        ("kind", text(view.kind)),
        ("owner", text(view.owner)),
        ("epoch", str(view.epoch)),
        ("created", text(iso_time(view.created_at))),
        ("started", text(iso_time(started))),
        ("ended", text(iso_time(ended))),
        ("duration", text(human_duration(total_duration(view)))),
        ("deadline", text(iso_time(view.deadline))),
        ("cancel requested", "yes" if view.cancel_requested else "no"),
        ("pivot", text(detail.pivot)),
    ]
    if not view.status.is_terminal:  # a finished saga holds no lease: its expiry means nothing
        fields.append(("lease expires", text(iso_time(view.lease_expires_at))))
    cells = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in fields)
    return (
        f"<h1>{text(view.name)} <small>{short(view.id)}</small></h1>"
        f'<dl class="header" id="header">{cells}</dl>{_errors(view)}'
        f"<h2>Input</h2>{json_block(view.input)}"
    )


def _errors(view: SagaView) -> str:
    """The saga's error banner: the error to act on (a failed compensation's, when one
    failed for good), and the forward error that started the unwinding beside it."""
    if not view.error:
        return ""
    out = f'<p class="error" id="saga-error">saga error: {text(view.error)}</p>'
    if view.forward_error and view.forward_error != view.error:
        out += (
            '<p class="forward-error" id="forward-error">unwinding began because: '
            f"{text(view.forward_error)}</p>"
        )
    return out


def _summary(detail: SagaDetail) -> str:
    view = detail.saga
    steps = view.steps
    compensated = sum(s.status is StepStatus.COMPENSATED for s in steps)
    undoing = [s for s in steps if s.status is StepStatus.COMPENSATING]
    failed = len(undoing) if view.status is SagaStatus.FAILED else 0
    running = len(undoing) - failed
    unwinding = view.status in (SagaStatus.COMPENSATING, SagaStatus.FAILED)
    pending = sum(s.status in _UNDONE for s in steps) if unwinding else 0
    return (
        f'<p class="summary" id="summary">{_forward_summary(detail)} · compensations '
        f'done <b id="comp-done">{compensated}</b>, running <b id="comp-running">{running}</b>, '
        f'pending <b id="comp-pending">{pending}</b>, failed <b id="comp-failed">{failed}</b></p>'
    )


def _forward_summary(detail: SagaDetail) -> str:
    """What went forward: how many steps ran, and of those how many stand done, failed,
    or were undone; "0 done" alone would read as "nothing happened" for a saga whose
    steps all ran and were then compensated."""
    steps = detail.saga.steps
    declared = len(steps) + len(detail.pending)
    ran = sum(s.attempt > 0 and s.status is not StepStatus.SKIPPED for s in steps)
    done = sum(s.status is StepStatus.SUCCEEDED for s in steps)
    failed = sum(s.status in (StepStatus.FAILED, StepStatus.IN_DOUBT) for s in steps)
    undone = sum(s.status is StepStatus.COMPENSATED for s in steps)
    return (
        f'forward steps: <b id="forward-ran">{ran}</b> of {declared} ran: '
        f'<b id="forward-done">{done}</b> done, <b id="forward-failed">{failed}</b> failed, '
        f'<b id="forward-undone">{undone}</b> undone'
    )


def _legend() -> str:
    return (
        '<p class="legend"><svg width="12" height="10"><rect class="bar ok" width="12" '
        'height="10"/></svg> succeeded · <svg width="12" height="10"><rect class="bar failed" '
        'width="12" height="10"/></svg> attempt failed · <svg width="12" height="10"><rect '
        'class="bar comp ok" width="12" height="10"/></svg> compensated · dashed: retry wait · '
        "red line: turned to compensating · "
        '<svg width="14" height="10"><rect class="bar unknown" x="1" y="1" width="12" '
        'height="8"/></svg> ?: outcome unknown (the step may have acted; the outline runs from '
        "its start to when its process's lease ran out, not for as long as it ran)</p>"
    )


def _panel(view: SagaView, step: StepView, detail: SagaDetail, unknown: Sequence[str]) -> str:
    declared = definition_of(view)
    spec = declared.by_name(step.name) if declared is not None else None
    kinds = [step.kind.value] + (["transactional"] if step.transactional else [])
    doubt = ' <span class="badge in_doubt">outcome unknown</span>' if step.name in unknown else ""
    wait = detail.waiting.get(step.name)
    if wait is not None:  # its attempt is known to have failed: waiting, not in doubt
        doubt = f' <span class="retry-wait">{text(wait.text)}</span>'
    rows = [
        ("status", f'<span class="badge {step.status.value}">{step.status.value}</span>{doubt}'),
        ("kind", text(", ".join(kinds))),
        ("attempt", str(step.attempt)),
        ("compensation attempt", str(step.compensation_attempt)),
        ("timeout", text("none" if spec is None or spec.timeout is None else f"{spec.timeout}s")),
        ("idempotency key", f"<code>{text(f'{view.id}:{step.name}')}</code>"),
        ("started", text(iso_time(step.started_at))),
        ("finished", text(iso_time(step.finished_at))),
        ("duration", text(human_duration(step.duration))),
        ("input", json_block(step.args) if step.args is not None else "the saga's input"),
        ("input digest", f"<code>{text(step.input_digest)}</code>"),
        ("output", json_block(step.result)),
        ("output digest", f"<code>{text(step.output_digest)}</code>"),
        ("error", json_block(step.error) if step.error else "-"),
        *_compensation_rows(step),
    ]
    if wait is not None:
        rows.append(("retry", f'<span class="retry-wait">{text(wait.text)}</span>'))
    note = detail.notes.get(step.name)
    if note:
        rows.append(("note", text(note)))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return (
        f'<details class="step" data-step="{attr(step.name)}"><summary>'
        f"<b>{text(step.name)}</b> {step.status.value} (attempt {step.attempt}){doubt}</summary>"
        f'<table class="step-detail">{body}</table></details>'
    )


def _compensation_rows(step: StepView) -> list[tuple[str, str]]:
    """What the compensation returned (and why it reads as stored JSON), when it did."""
    rows = []
    if step.compensation_result is not None:
        block = json_block(step.compensation_result)
        rows.append(("compensation result", f'<div class="compensation-result">{block}</div>'))
    if step.compensation_result_error is not None:
        rows.append(("compensation result note", text(step.compensation_result_error)))
    return rows


def _pending(name: str) -> str:
    return (
        f'<details class="step pending" data-step="{attr(name)}"><summary><b>{text(name)}</b> '
        "not started yet</summary></details>"
    )


def _actions(view: SagaView, verbs: Sequence[tuple[str, str]] | None) -> str:
    if verbs is None:
        return (
            '<p class="read-only" id="read-only">Read-only: start <code>saga web '
            "--allow-actions</code> to act on sagas from here.</p>"
        )
    links = " ".join(
        f'<a class="action" data-verb="{verb}" '
        f'href="{path("saga", view.id, "confirm", verb)}">{label}</a>'
        for verb, label in verbs
    )
    return f'<h2>Actions</h2><p class="actions" id="actions">{links}</p>'


def _diff_form(view: SagaView) -> str:
    return (
        f'<form class="filters" method="get" action="diff"><input type="hidden" name="left" '
        f'value="{attr(view.id)}"><label>compare with saga id<input name="right" size="38"></label>'
        '<button type="submit" id="diff">diff</button></form>'
    )


def _history(history: Timeline) -> str:
    headers = ("#", "offset", "took", "event", "step", "attempt", "epoch", "what happened")
    rows = [_event_row(n, entry) for n, entry in enumerate(history.entries, start=1)]
    return table(headers, rows, "history")


def _event_row(number: int, entry: TimelineEntry) -> str:
    """Event ``number`` of this saga (its id in the database, shared by every saga's
    events, is a data attribute: the column counts this saga's own events from 1)."""
    event = entry.event
    took = "" if entry.duration is None else text(human_duration(entry.duration))
    cells = (
        str(number), f"+{entry.offset:.3f}s", took, text(event.kind), text(event.step),
        text(event.attempt), text(event.epoch), text(entry.text),
    )  # fmt: skip
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    data = (
        f'data-kind="{attr(event.kind)}" data-step="{attr(event.step)}" data-event-id="{event.id}"'
    )
    return f'<tr class="event" {data}>{tds}</tr>'
