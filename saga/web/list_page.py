"""The list of sagas: filters, counts per status, one page of rows, paging."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from saga._internal.ports import DEFAULT_LIST_LIMIT
from saga._internal.status import SagaStatus
from saga._internal.views import SagaView
from saga.admin import SagaPage, current_step, human_duration, is_stuck, iso_time
from saga.web.markup import attr, page, path, query, short, table, text


@dataclasses.dataclass(frozen=True)
class Filters:
    """The list's filters as typed into the form (checked by the admin functions)."""

    statuses: tuple[str, ...] = ()
    name: str = ""
    key: str = ""
    stuck: bool = False
    age: str = ""  # "older than", a duration such as 10m or 2d
    limit: int = DEFAULT_LIST_LIMIT

    def params(self, before: str | None = None) -> dict[str, str | tuple[str, ...] | None]:
        """The query parameters that reproduce these filters (and a page anchor)."""
        return {
            "status": self.statuses,
            "name": self.name,
            "key": self.key,
            "stuck": "1" if self.stuck else None,
            "age": self.age,
            "limit": str(self.limit) if self.limit != DEFAULT_LIST_LIMIT else None,
            "before": before,
        }


def list_page(
    result: SagaPage | None,
    counts: Mapping[SagaStatus, int],
    filters: Filters,
    error: str | None = None,
    bulk: str = "",
) -> str:
    """The whole list page; ``result`` is None when the filters were refused (``error``).
    ``bulk``: the links that act on every saga the filters match (actions enabled)."""
    body = [_counts(counts), _form(filters)]
    if error:
        body.append(f'<p class="error" id="error">{text(error)}</p>')
    if result is not None:
        body.append(_rows(result))
        body.append(_paging(result, filters))
        body.append(bulk if result.sagas else "")
    return page("sagas", "".join(body))


COUNT_CAP = 10_000
"""The list counts each status up to this many sagas and shows more as "10,000+": a
count stops at that many index entries, so the page costs the same at a million
finished sagas as at ten thousand (docs/web.md, "Speed")."""


def _counts(counts: Mapping[SagaStatus, int]) -> str:
    links = "".join(
        f'<a class="count" data-status="{s.value}" href="./?{query({"status": s.value})}">'
        f'<span class="badge {s.value}">{s.value}</span> {_count(n)}</a>'
        for s, n in counts.items()
    )
    return f'<p class="counts" id="counts">{links} <a href="./?stuck=1">stuck only</a></p>'


def _count(n: int) -> str:
    return f"{COUNT_CAP:,}+" if n > COUNT_CAP else str(n)


def _form(filters: Filters) -> str:
    boxes = "".join(
        f'<label><span>{s.value}</span><input type="checkbox" name="status" value="{s.value}"'
        f"{' checked' if s.value in filters.statuses else ''}></label>"
        for s in SagaStatus
    )
    stuck = " checked" if filters.stuck else ""
    return (
        '<form class="filters" id="filters" method="get" action="./">'
        f"{boxes}"
        f'<label>name<input name="name" value="{attr(filters.name)}"></label>'
        f'<label>key<input name="key" value="{attr(filters.key)}"></label>'
        f'<label>stuck<input type="checkbox" name="stuck" value="1"{stuck}></label>'
        f'<label>older than<input name="age" size="6" placeholder="10m" '
        f'value="{attr(filters.age)}"></label>'
        f'<label>per page<input name="limit" size="4" value="{filters.limit}"></label>'
        '<button type="submit" id="apply">filter</button> <a href="./">clear</a></form>'
    )


def _rows(result: SagaPage) -> str:
    if not result.sagas:
        return '<p id="empty">No saga matches these filters.</p>'
    headers = ("id", "name", "key", "status", "step", "attempt", "created", "age", "owner")
    rows = [_row(view, result.now) for view in result.sagas]
    return table(headers, rows, "sagas")


def _row(view: SagaView, now: float) -> str:
    stuck = is_stuck(view, now)
    css = "stuck" if stuck else ("failed" if view.status is SagaStatus.FAILED else "")
    status = f'<span class="badge {view.status.value}">{view.status.value}</span>'
    if stuck:
        status += ' <span class="badge stuck">stuck</span>'
    step = current_step(view)
    age = None if view.created_at is None else now - view.created_at
    cells = [
        f'<a href="{path("saga", view.id)}" title="{attr(view.id)}">{short(view.id)}</a>',
        text(view.name),
        text(view.key),
        status,
        "-" if step is None else f"{text(step.name)} ({step.status.value})",
        "-" if step is None else str(step.attempt),
        text(iso_time(view.created_at)),
        text(human_duration(age)),
        text(view.owner),
    ]
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    return (
        f'<tr class="saga {css}" data-id="{attr(view.id)}" data-status="{view.status.value}" '
        f'data-stuck="{str(stuck).lower()}">{tds}</tr>'
    )


def _paging(result: SagaPage, filters: Filters) -> str:
    links = [f'<a id="first-page" href="./?{query(filters.params())}">first page</a>']
    if result.next_before is not None:
        href = f"./?{query(filters.params(result.next_before))}"
        links.append(f'<a id="next-page" href="{href}">next page</a>')
    return f'<p class="paging">{" · ".join(links)}</p>'
