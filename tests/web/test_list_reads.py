"""The list pages read only the columns they show: a saga whose step returned
megabytes is listed (web console and ``admin.list_sagas``) without its result, its
input or its arguments leaving the database, and a saga's headline error comes with
the page's own queries, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from saga.adapters.sql import pg_load
from sqlalchemy import event

import saga.web
from saga import Coordinator, RetryPolicy, Saga, SagaFailed, StepContext, admin
from tests.cli import headline_steps as trip
from tests.conftest import store_url
from tests.web.test_security import fetch

BIG = 4 * 1024 * 1024
"""The result's size: a few of these would be the 250 MB a page once decoded."""

HEAVY = Saga("web-heavy")


@HEAVY.step(retry=RetryPolicy(max_attempts=1))
def export(ctx: StepContext) -> str:
    return "x" * BIG


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def coord(request: pytest.FixtureRequest) -> Iterator[Coordinator]:
    with contextlib.closing(
        Coordinator(store_url(request, request.param), payload_limit=2 * BIG)
    ) as made:
        yield made


@contextlib.contextmanager
def statements(coord: Coordinator) -> Iterator[list[str]]:
    """Every SQL statement ``coord``'s store sends while the block runs: on its pool,
    and PostgreSQL's one-statement load, which goes on a raw connection."""
    sent: list[str] = []
    engine = coord.store.engine  # type: ignore[attr-defined]
    hot = coord.store.hot  # type: ignore[attr-defined]

    def capture(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    def load(saga_id: str) -> Any:
        sent.append(pg_load.LOAD)
        return type(hot).load(hot, saga_id)

    event.listen(engine, "before_cursor_execute", capture)
    if hasattr(hot, "load"):
        hot.load = load  # this instance's, until the block ends
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", capture)
        if "load" in vars(hot or object):
            del hot.load


def payload_columns(sent: list[str]) -> list[str]:
    """The payload columns any of ``sent`` reads."""
    columns = ("saga_steps.result", "saga_steps.args", "saga_instances.input")
    return [column for column in columns if any(column in s for s in sent)]


def test_the_console_list_reads_no_result_input_or_arguments(coord: Coordinator) -> None:
    saga_id = coord.run(HEAVY, data={"note": "y" * 1000}, key="heavy-1").id
    assert len(coord.get(saga_id).results["export"]) == BIG  # stored, readable in full
    with statements(coord) as sent:
        [listing] = anyio.run(fetch, saga.web.app(coord), ["/"])
    assert listing.status_code == 200
    assert f'data-id="{saga_id}"' in listing.text
    assert "export (succeeded)" in listing.text  # the step column still says where it is
    assert any("saga_steps" in s for s in sent)  # the steps were read, for that column
    assert payload_columns(sent) == []
    assert len(listing.text) < 64 * 1024


def test_admin_list_sagas_carries_no_payloads(coord: Coordinator) -> None:
    saga_id = coord.run(HEAVY, data={"note": "y"}, key="heavy-2").id
    with statements(coord) as sent:
        page = admin.list_sagas(coord, name="web-heavy")
    assert payload_columns(sent) == []
    [view] = page.sagas
    assert view.id == saga_id
    assert [(s.name, s.status.value, s.attempt) for s in view.steps] == [("export", "succeeded", 1)]
    assert (view.input, view.steps[0].result) == (None, None)  # not read: show reads them
    assert page.as_json()["sagas"][0]["current_step"] == "export"
    with statements(coord) as sent:
        shown = admin.show_saga(coord, saga_id)
    assert payload_columns(sent) != []  # the saga page reads everything, as it shows it
    assert len(shown.saga.steps[0].result) == BIG


def test_admin_list_sagas_reads_each_sagas_headline_error_in_the_page_queries(
    coord: Coordinator,
) -> None:
    for key in ("refused-1", "refused-2"):  # the compensation fails for good: "failed"
        with pytest.raises(SagaFailed):
            coord.run(trip.TRIP, data={"refused": True}, key=key)
    with statements(coord) as sent:
        page = admin.list_sagas(coord, name=trip.TRIP.name)
    assert [view.error for view in page.sagas] == [
        "FlightCancellationError: airline refused to cancel FL-101: ticket already issued"
    ] * 2
    assert {view.forward_error for view in page.sagas} == {
        "BookingRejected: charge_card rejected: card ending 4242 declined"
    }
    # One read of the steps for the whole page, none of the events: nothing per saga.
    assert sum("saga_steps" in statement for statement in sent) == 1
    assert not any("saga_events" in statement for statement in sent)
    assert payload_columns(sent) == []
