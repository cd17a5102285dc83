"""Acting on many sagas from the console: the list's filters become a selection, a
confirmation page shows every saga it matches and what the verb would do, and the
action reports per saga, as ``saga compensate --name N --status failed --yes`` does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.operator_identity import operator_source
from saga.web.list_page import Filters
from saga.web.markup import attr, page, path, query, short, table, text

MAX_AT_ONCE = 500
"""The most sagas one action from the console takes (the newest that match): the page
lists each, so a larger selection is acted on in several rounds, or with the CLI."""


def selection_of(filters: Filters) -> admin.Selection:
    """The list's filters as a bulk selection (its key is matched as a prefix: every saga
    the list shows is in it). Refused, naming why, when no filter is given."""
    age = filters.age.strip()
    return admin.Selection.parse(
        statuses=filters.statuses,
        name=filters.name or None,
        key_prefix=filters.key or None,
        older_than=age or None,
        stuck=filters.stuck,
        limit=MAX_AT_ONCE,
    )


def filters_of(form: Mapping[str, str]) -> Filters:
    """The filters a confirmation form carried (statuses joined by commas)."""
    statuses = tuple(s for s in form.get("statuses", "").split(",") if s)
    return Filters(
        statuses=statuses,
        name=form.get("name", ""),
        key=form.get("key", ""),
        stuck=form.get("stuck") == "1",
        age=form.get("age", ""),
    )


def planned(coord: Coordinator, verb: str, filters: Filters) -> admin.BulkReport:
    """What ``verb`` would do to each saga the filters match (nothing is changed)."""
    chosen = admin.select_sagas(coord, selection_of(filters))
    return admin.act_on_many(coord, chosen, verb, dry_run=True)


def acted(
    coord: Coordinator,
    verb: str,
    filters: Filters,
    who: Mapping[str, str],
    options: Mapping[str, str] | None = None,
) -> admin.BulkReport:
    """Apply ``verb`` (with its own ``options``: retry's ``from_step``) to each saga the
    filters match, recorded as ``who``'s from the web."""
    chosen = admin.select_sagas(coord, selection_of(filters))
    with operator_source(**who):
        return admin.act_on_many(coord, chosen, admin.verb_with(verb, options or {}))


def options_of(verb: str, form: Mapping[str, str]) -> dict[str, str]:
    """The verb's own options a confirmation form carried: retry's optional step to run
    again from (empty: a plain retry)."""
    from_step = form.get("from_step", "").strip()
    return {"from_step": from_step} if verb == "retry" and from_step else {}


def bulk_links(filters: Filters, verbs: Sequence[str]) -> str:
    """Under the list: the verbs that may act on every saga these filters match."""
    params = {**filters.params(), "limit": None}
    links = " ".join(
        f'<a class="bulk" data-verb="{attr(verb)}" '
        f'href="{path("bulk", "confirm", verb)}?{query(params)}">{text(verb)}</a>'
        for verb in verbs
    )
    return f'<p class="bulk" id="bulk">Act on every saga these filters match: {links}</p>'


def confirm_page(verb: str, report: admin.BulkReport, filters: Filters, csrf: str) -> str:
    """Every saga the filters match, what the verb would do, and the form to do it."""
    hidden = {
        "csrf": csrf,
        "statuses": ",".join(filters.statuses),
        "name": filters.name,
        "key": filters.key,
        "stuck": "1" if filters.stuck else "",
        "age": filters.age,
    }
    fields = "".join(
        f'<input type="hidden" name="{name}" value="{attr(value)}">'
        for name, value in hidden.items()
    )
    count = len(report.items)
    body = (
        f"<h1>{text(verb)}: {count} saga(s)</h1><p>At most {MAX_AT_ONCE} at a time, the "
        "newest first; each is claimed with its own condition checked, so one that moved "
        "meanwhile is reported refused and left as it was.</p>"
        f"{_items(report)}"
        f'<form method="post" action="{path("bulk", "action", verb)}" id="confirm-form">'
        f"{fields}"
        f"{_from_step_field(verb)}"
        '<label>your name <input name="operator" id="operator" required></label><br>'
        '<label>reason (recorded) <input name="reason" id="reason" size="60" required></label><br>'
        f'<button type="submit" id="confirm">yes, {text(verb)} {count} saga(s)</button> '
        '<a href="./">no, back</a></form>'
    )
    return page(f"confirm {text(verb)}", body)


def _from_step_field(verb: str) -> str:
    if verb != "retry":
        return ""
    return (
        "<label>from step (optional: it and every step after it run again; each that "
        'succeeded must be idempotent) <input name="from_step" id="from-step"></label><br>'
    )


def report_page(report: admin.BulkReport) -> str:
    """How acting on each saga ended."""
    done = report.count(admin.Outcome.DONE)
    stopped = f'<p class="error" id="error">{text(report.stopped)}</p>' if report.stopped else ""
    body = (
        f'<h1 id="bulk-result">{text(report.action)}: {done} of {len(report.items)} done</h1>'
        f"{stopped}{_items(report)}"
        '<p><a href="./">back to the list</a></p>'
    )
    return page(f"{text(report.action)}: done", body)


def _items(report: admin.BulkReport) -> str:
    if not report.items:
        return '<p id="empty">No saga matches these filters.</p>'
    headers = ("id", "name", "key", "was", "step", "outcome", "now", "why")
    rows = [
        f'<tr class="bulk-item" data-id="{attr(item.saga_id)}" data-outcome="{item.outcome}">'
        f'<td><a href="{path("saga", item.saga_id)}">{short(item.saga_id)}</a></td>'
        f"<td>{text(item.name)}</td><td>{text(item.key)}</td><td>{item.was.value}</td>"
        f"<td>{text(item.step)}</td><td>{text(item.outcome)}</td>"
        f"<td>{text(item.status.value if item.status else '')}</td>"
        f"<td>{text(item.reason)}</td></tr>"
        for item in report.items
    ]
    return table(headers, rows, "bulk-items")
