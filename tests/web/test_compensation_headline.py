"""The console's saga page in headless Chromium, served by a real ``saga web`` process,
on SQLite and PostgreSQL: a saga whose compensation failed for good leads with that
compensation's error and keeps the forward error beside it; a compensated saga's step
panels show what each compensation returned."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from saga import Coordinator, SagaFailed
from tests import postgres
from tests.cli import headline_steps as trip
from tests.web.conftest import Server, serving
from tests.web.test_pages import open_page

FORWARD = "BookingRejected: charge_card rejected: card ending 4242 declined"
UNDO = "FlightCancellationError: airline refused to cancel FL-101: ticket already issued"


@dataclasses.dataclass(frozen=True)
class Trips:
    url: str
    refused: str  # the airline refused to cancel the flight: failed
    compensated: str  # everything given back


def _failed_id(coord: Coordinator, data: dict[str, object], key: str) -> str:
    with pytest.raises(SagaFailed) as raised:
        coord.run(trip.TRIP, data=data, key=key)
    return raised.value.saga_id


def _trips(url: str) -> Trips:
    with contextlib.closing(Coordinator(url)) as coord:
        refused = _failed_id(coord, {"refused": True}, "refused")
        return Trips(url, refused, _failed_id(coord, {}, "compensated"))


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def trips(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Trips]:
    if request.param == "sqlite":
        yield _trips(f"sqlite:///{tmp_path_factory.mktemp('trips')}/saga.db")
        return
    server = request.getfixturevalue("postgres_server")
    with postgres.isolated_schema(server) as url:
        yield _trips(url)


@pytest.fixture(scope="module")
def server(trips: Trips, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(trips.url, tmp_path_factory.mktemp("log") / "web.log") as running:
        yield running


def _text(browser: WebDriver, css: str) -> str:
    """An element's text, shown or inside a closed panel."""
    return browser.find_element(By.CSS_SELECTOR, css).get_attribute("textContent") or ""


def test_the_banner_leads_with_the_failed_compensations_error(
    trips: Trips, server: Server, browser: WebDriver
) -> None:
    open_page(browser, server, f"/saga/{trips.refused}")
    assert browser.find_element(By.ID, "saga-error").text == f"saga error: {UNDO}"
    assert browser.find_element(By.ID, "forward-error").text == (
        f"unwinding began because: {FORWARD}"
    )


def test_a_compensated_sagas_banner_is_its_forward_error_alone(
    trips: Trips, server: Server, browser: WebDriver
) -> None:
    open_page(browser, server, f"/saga/{trips.compensated}")
    assert browser.find_element(By.ID, "saga-error").text == f"saga error: {FORWARD}"
    assert not browser.find_elements(By.ID, "forward-error")


def test_the_step_panel_shows_what_the_compensation_returned(
    trips: Trips, server: Server, browser: WebDriver
) -> None:
    open_page(browser, server, f"/saga/{trips.compensated}")
    flight = _text(browser, 'details.step[data-step="book_flight"] .compensation-result')
    assert " ".join(flight.split()) == '{ "amount": 120, "refund_id": "re_FL-101" }'
    hotel = _text(browser, 'details.step[data-step="book_hotel"] .compensation-result')
    assert '"refund_id": "re_hotel"' in hotel
    assert not browser.find_elements(
        By.CSS_SELECTOR, 'details.step[data-step="charge_card"] .compensation-result'
    )


def test_the_summary_says_what_ran_and_what_was_undone(
    trips: Trips, server: Server, browser: WebDriver
) -> None:
    open_page(browser, server, f"/saga/{trips.compensated}")
    counts = {
        name: browser.find_element(By.ID, f"forward-{name}").text
        for name in ("ran", "done", "failed", "undone")
    }
    assert counts == {"ran": "3", "done": "0", "failed": "1", "undone": "2"}
    summary = browser.find_element(By.ID, "summary").text
    assert summary.startswith("forward steps: 3 of 3 ran: 0 done, 1 failed, 2 undone")


def test_the_history_counts_this_sagas_events_from_one(
    trips: Trips, server: Server, browser: WebDriver
) -> None:
    open_page(browser, server, f"/saga/{trips.compensated}")  # the second saga of the database
    rows = browser.find_elements(By.CSS_SELECTOR, "table.history tr.event")
    assert len(rows) > 5
    numbers = [row.find_element(By.TAG_NAME, "td").text for row in rows]
    assert numbers == [str(n) for n in range(1, len(rows) + 1)]
    ids = [int(row.get_attribute("data-event-id") or 0) for row in rows]
    assert ids == sorted(ids)
    assert ids[0] > 1  # the database's own ids, kept aside: the first saga's came before


def test_a_finished_saga_shows_no_lease_expiry(
    trips: Trips, server: Server, browser: WebDriver
) -> None:
    for saga_id in (trips.compensated, trips.refused):
        open_page(browser, server, f"/saga/{saga_id}")
        names = [dt.text for dt in browser.find_elements(By.CSS_SELECTOR, "#header dt")]
        assert "owner" in names
        assert "lease expires" not in names
