"""The web console's markup with a saga id forged in the database: every attribute that
holds it is escaped (a link's path URL-quoted too), so the page's elements and
attributes are exactly the console's own; and "done" is said only from the history."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import quote

from saga._internal.ports import EventRecord
from saga._internal.status import SagaStatus, StepKind, StepStatus
from saga._internal.views import SagaView, StepView
from saga.admin import SagaDetail, SagaDiff, SagaPage, Timeline
from saga.web import actions
from saga.web.list_page import COUNT_CAP, Filters, list_page
from saga.web.pages import diff_page
from saga.web.saga_page import Extras, saga_page

FORGED = 'x" onmouseover="alert(1)"<u id=p>\'&'
"""A saga id as a hostile row could hold it (36 characters fit the column)."""


class Elements(HTMLParser):
    """Every start tag of a page, with its attributes as the browser would read them."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(markup)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))

    def attributes(self) -> set[str]:
        return {name for _, attrs in self.found for name in attrs}

    def tags(self) -> set[str]:
        return {tag for tag, _ in self.found}

    def values(self, name: str) -> list[str | None]:
        return [attrs[name] for _, attrs in self.found if name in attrs]


def forged_view() -> SagaView:
    step = StepView("pay", 1, StepStatus.RUNNING, 1, None, None, StepKind.COMPENSATABLE,
                    False, 0, 1.0, None, None, None, None, None)  # fmt: skip
    return SagaView(FORGED, "order", "k", "declarative", SagaStatus.RUNNING, None, None,
                    "w", 1, 100.0, 0.0, 1.0, False, (step,))  # fmt: skip


def assert_inert(markup: str) -> Elements:
    page = Elements(markup)
    assert "onmouseover" not in page.attributes()
    assert "u" not in page.tags()
    assert "p" not in page.values("id")
    return page


def test_the_list_escapes_the_id_in_every_attribute_and_quotes_it_in_the_link() -> None:
    result = SagaPage((forged_view(),), now=2.0, limit=100)
    page = assert_inert(list_page(result, {}, Filters()))
    row = next(attrs for tag, attrs in page.found if tag == "tr" and "data-id" in attrs)
    assert row["data-id"] == FORGED
    assert FORGED in page.values("title")
    assert f"saga/{quote(FORGED, safe='')}" in page.values("href")


def test_a_count_past_the_cap_reads_as_more_than_the_cap() -> None:
    counts = {SagaStatus.COMPLETED: COUNT_CAP + 1, SagaStatus.FAILED: 3, SagaStatus.RUNNING: 0}
    html = list_page(SagaPage((), now=2.0, limit=100), counts, Filters())
    assert f"</span> {COUNT_CAP:,}+</a>" in html  # counted up to the cap, and no further
    assert "</span> 3</a>" in html
    assert "</span> 0</a>" in html


def test_the_saga_page_diff_and_confirmation_escape_the_id() -> None:
    view = forged_view()
    detail = SagaDetail(view, 2.0, (), None)
    verbs = [(v.name, v.label) for v in actions.VERBS.values()]
    page = assert_inert(saga_page(detail, Timeline(view, ()), Extras(verbs)))
    assert FORGED in page.values("value")  # the diff form's hidden field
    confirm = f"saga/{quote(FORGED, safe='')}/confirm/cancel"
    assert confirm in page.values("href")
    confirming = assert_inert(actions.confirm_page(view, actions.VERBS["cancel"], "c"))
    assert f"saga/{quote(FORGED, safe='')}/action/cancel" in confirming.values("action")
    diff = assert_inert(diff_page(SagaDiff(view, view, ())))
    assert f"saga/{quote(FORGED, safe='')}" in diff.values("href")


def operator_event(at: float, action: str, source: str | None = "web") -> EventRecord:
    detail = {"action": action, "by": "ann"} | ({"source": source} if source else {})
    return EventRecord(1, "s", at, "operator_action", None, None, 2, detail)


def test_done_is_said_only_when_the_history_holds_the_console_s_recent_record() -> None:
    now = 1000.0
    recent = [operator_event(now - 2, "compensate")]
    said = actions.done_notice("compensate", recent, now)
    assert said == "compensate: done, recorded as an operator action"
    assert actions.done_notice("compensate", [], now) is None  # only the query string
    assert actions.done_notice("cancel", recent, now) is None  # another action
    old = [operator_event(now - actions.DONE_WITHIN - 1, "compensate")]
    assert actions.done_notice("compensate", old, now) is None
    by_cli = [operator_event(now - 2, "compensate", source=None)]
    assert actions.done_notice("compensate", by_cli, now) is None
    assert actions.done_notice("nonsense", recent, now) is None
