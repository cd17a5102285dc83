"""Pause from the web console (with ``--allow-actions``): confirmed with a reason,
recorded like the CLI's pause, and the paused saga shown by the list's status filter
with its own badge; resume then finishes it."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from saga import Coordinator, SagaStatus
from tests.cli.conftest import crashed
from tests.web.conftest import Server, World
from tests.web.test_actions import acting, confirm, coord, operator_events

__all__ = ["acting", "coord"]  # fixtures, imported to be shared


def test_pause_then_resume_from_the_browser(
    world: World, acting: Server, browser: WebDriver, coord: Coordinator
) -> None:
    saga_id = crashed(coord)  # a stuck saga of this test's own: nobody holds it
    confirm(browser, acting, saga_id, "pause", "payments outage")
    assert browser.find_element(By.ID, "notice").text.startswith("pause: done")
    assert browser.find_element(By.ID, "status").text == "paused"
    view = coord.get(saga_id)
    assert (view.status, view.owner) == (SagaStatus.PAUSED, None)
    (event,) = operator_events(coord, saga_id)
    assert (event["action"], event["source"], event["by"], event["reason"]) == (
        "pause", "web", "ann", "payments outage")  # fmt: skip

    browser.get(f"{acting.base}/?status=paused")
    row = browser.find_element(By.CSS_SELECTOR, f'tr.saga[data-id="{saga_id}"]')
    assert row.get_attribute("data-status") == "paused"
    assert row.find_element(By.CSS_SELECTOR, ".badge.paused").text == "paused"
    counted = browser.find_element(By.CSS_SELECTOR, '#counts a[data-status="paused"]')
    assert counted.text.endswith("1")

    confirm(browser, acting, saga_id, "resume", "payments are back")
    assert browser.find_element(By.ID, "status").text == "completed"
    assert [e["action"] for e in operator_events(coord, saga_id)] == ["pause", "resume"]
