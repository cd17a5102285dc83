"""Operator actions from the browser: offered only with ``--allow-actions``, confirmed
with a reason, recorded as the CLI records them (plus "web" and the person), refused
with the CLI's own line; without the flag nothing is offered and a POST changes nothing."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from saga import Coordinator, RetryPolicy, SagaFailed, SagaScope, SagaStatus
from tests.cli.conftest import REPO, crashed, run_saga
from tests.cli.forward_steps import FORWARD, FORWARD_FROM
from tests.web import steps as web_steps
from tests.web.conftest import APPS, Server, World, in_doubt_saga, navigate, serving


@pytest.fixture(scope="module")
def acting(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("log") / "web-actions.log"
    with serving(world.url, log, "--allow-actions") as server:
        yield server


@pytest.fixture
def coord(world: World) -> Iterator[Coordinator]:
    with contextlib.closing(Coordinator(world.url, lease_ttl=5.0)) as coordinator:
        yield coordinator


def operator_events(coord: Coordinator, saga_id: str) -> list[dict[str, Any]]:
    return [e.detail or {} for e in coord.history(saga_id) if e.kind == "operator_action"]


def confirm(browser: WebDriver, server: Server, saga_id: str, verb: str, reason: str) -> None:
    """Open the saga, choose ``verb``, and confirm it as "ann" with ``reason``."""
    browser.get(f"{server.base}/saga/{saga_id}")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, f'#actions a[data-verb="{verb}"]'))
    browser.find_element(By.ID, "operator").send_keys("ann")
    browser.find_element(By.ID, "reason").send_keys(reason)
    navigate(browser, browser.find_element(By.ID, "confirm"))


def test_cancel_is_confirmed_and_recorded_with_web_the_person_and_the_reason(
    world: World, acting: Server, browser: WebDriver, coord: Coordinator
) -> None:
    saga_id = crashed(coord)  # a stuck saga of this test's own
    confirm(browser, acting, saga_id, "cancel", "customer called to cancel")
    assert browser.find_element(By.ID, "notice").text.startswith("cancel: done")
    assert browser.find_element(By.ID, "status").text == "cancelled"
    assert coord.get(saga_id).status is SagaStatus.CANCELLED
    (event,) = operator_events(coord, saga_id)
    assert event["action"] == "cancel"
    assert (event["source"], event["by"], event["reason"]) == (
        "web", "ann", "customer called to cancel")  # fmt: skip
    history = browser.find_elements(By.CSS_SELECTOR, 'tr.event[data-kind="operator_action"]')
    assert "reason 'customer called to cancel'" in history[-1].text
    assert "source 'web'" in history[-1].text


def test_a_refused_action_shows_the_line_the_cli_prints_and_records_nothing(
    world: World, acting: Server, browser: WebDriver, coord: Coordinator
) -> None:
    before = coord.history(world.completed)
    confirm(browser, acting, world.completed, "compensate", "trying")
    shown = browser.find_element(By.ID, "error").text
    cli = run_saga("--db", world.url, *APPS, "compensate", world.completed, cwd=REPO)
    assert cli.returncode == 1
    assert shown == cli.stderr.strip().removeprefix("saga: error: ")
    assert shown.startswith("refused: ")
    assert coord.history(world.completed) == before


def test_an_action_needs_a_reason_and_a_genuine_form(
    world: World, acting: Server, coord: Coordinator
) -> None:
    saga_id = crashed(coord)
    before = coord.history(saga_id)
    with httpx.Client(base_url=acting.base) as client:
        page = client.get(f"/saga/{saga_id}/confirm/cancel").text
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert match is not None
        url = f"/saga/{saga_id}/action/cancel"
        forged = client.post(url, data={"operator": "ann", "reason": "x", "csrf": "0" * 64})
        assert forged.status_code == 403
        silent = client.post(url, data={"operator": "ann", "reason": " ", "csrf": match[1]})
        assert silent.status_code == 400
        assert "a reason is required" in silent.text
        by_get = client.get(url)
        assert by_get.status_code == 405
    assert coord.history(saga_id) == before


def test_a_step_given_up_in_doubt_is_marked_from_the_browser_then_unwound(
    world: World, acting: Server, browser: WebDriver, coord: Coordinator
) -> None:
    saga_id = in_doubt_saga(coord, "doubt-web")
    browser.get(f"{acting.base}/saga/{saga_id}")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, '#actions a[data-verb="mark-step"]'))
    browser.find_element(By.CSS_SELECTOR, '#step option[value="ship"]').click()
    browser.find_element(By.ID, "did-not-happen").click()
    browser.find_element(By.ID, "operator").send_keys("ann")
    browser.find_element(By.ID, "reason").send_keys("the carrier has no such parcel")
    navigate(browser, browser.find_element(By.ID, "confirm"))
    assert coord.get(saga_id).step("ship").status.value == "failed"
    confirm(browser, acting, saga_id, "retry-compensation", "ship never happened")
    assert browser.find_element(By.ID, "status").text == "compensated"
    actions = [e["action"] for e in operator_events(coord, saga_id)]
    assert actions == ["mark-step", "retry-compensation"]
    assert all(e["source"] == "web" for e in operator_events(coord, saga_id))


def failed_past_pivot(coord: Coordinator, blocker: Path) -> str:
    """A saga of tests/cli/forward_steps.py failed at ``invoice`` while ``blocker`` exists."""
    blocker.touch()
    with pytest.raises(SagaFailed) as raised:
        coord.run(FORWARD, data={"blocker": str(blocker)})
    return raised.value.saga_id


def test_a_saga_failed_past_its_pivot_is_retried_from_the_browser(
    acting: Server, browser: WebDriver, coord: Coordinator, tmp_path: Path
) -> None:
    blocker = tmp_path / "down"
    saga_id = failed_past_pivot(coord, blocker)
    blocker.unlink()  # the fix is deployed
    confirm(browser, acting, saga_id, "retry", "invoice service fixed")
    assert browser.find_element(By.ID, "status").text == "completed"
    assert coord.get(saga_id).step("invoice").attempt == 3
    (event,) = operator_events(coord, saga_id)
    assert (event["action"], event["source"], event["by"]) == ("retry", "web", "ann")


def test_a_saga_is_retried_from_an_earlier_step_from_the_browser(
    acting: Server, browser: WebDriver, coord: Coordinator, tmp_path: Path
) -> None:
    blocker, stamps = tmp_path / "down", tmp_path / "stamps"
    blocker.touch()
    with pytest.raises(SagaFailed) as raised:
        coord.run(FORWARD_FROM, data={"blocker": str(blocker), "stamps": str(stamps)})
    saga_id = raised.value.saga_id
    blocker.unlink()
    browser.get(f"{acting.base}/saga/{saga_id}")
    link = browser.find_element(By.CSS_SELECTOR, '#actions a[data-verb="retry-from"]')
    navigate(browser, link)
    browser.find_element(By.CSS_SELECTOR, '#step option[value="stamp"]').click()
    browser.find_element(By.ID, "operator").send_keys("ann")
    browser.find_element(By.ID, "reason").send_keys("the old stamp was wrong; checked")
    navigate(browser, browser.find_element(By.ID, "confirm"))
    assert browser.find_element(By.ID, "status").text == "completed"
    assert "retry-from: done" in browser.find_element(By.ID, "notice").text
    assert stamps.read_text() == "1\n2\n"
    (event,) = operator_events(coord, saga_id)
    assert (event["action"], event["from_step"], event["source"]) == ("retry", "stamp", "web")


def test_a_failed_step_done_by_hand_is_recorded_from_the_browser(
    acting: Server, browser: WebDriver, coord: Coordinator, tmp_path: Path
) -> None:
    saga_id = failed_past_pivot(coord, tmp_path / "down")  # still down: done by hand
    browser.get(f"{acting.base}/saga/{saga_id}")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, '#actions a[data-verb="skip"]'))
    browser.find_element(By.CSS_SELECTOR, '#step option[value="invoice"]').click()
    result = browser.find_element(By.ID, "result")
    result.clear()
    result.send_keys('{"invoice": "INV-9"}')
    browser.find_element(By.ID, "operator").send_keys("ann")
    browser.find_element(By.ID, "reason").send_keys("invoiced in the ERP by hand")
    navigate(browser, browser.find_element(By.ID, "confirm"))
    assert browser.find_element(By.ID, "status").text == "completed"
    assert coord.get(saga_id).step("invoice").result == {"invoice": "INV-9"}
    (event,) = operator_events(coord, saga_id)
    assert (event["action"], event["reason"]) == ("skip", "invoiced in the ERP by hand")


def test_read_only_offers_no_action_and_refuses_every_one(
    world: World, read_only: Server, browser: WebDriver, coord: Coordinator
) -> None:
    saga_id = crashed(coord)
    before = coord.history(saga_id)
    browser.get(f"{read_only.base}/saga/{saga_id}")
    assert browser.find_element(By.ID, "read-only")
    assert browser.find_elements(By.CSS_SELECTOR, "[data-verb]") == []
    browser.get(f"{read_only.base}/saga/{saga_id}/confirm/cancel")
    assert "read-only" in browser.find_element(By.ID, "error").text
    with httpx.Client(base_url=read_only.base) as client:
        post = client.post(f"/saga/{saga_id}/action/cancel", data={"reason": "x"})
        assert post.status_code == 403
    assert coord.history(saga_id) == before


def _pay_then_cancel(scope: SagaScope, down: Path) -> None:
    with scope:
        scope.step(web_steps.transfer, "alice", 10, str(down), compensate=web_steps.reverse)
        raise KeyError("the order was cancelled")


def test_an_action_whose_compensation_waits_for_a_worker_is_a_notice_not_an_error(
    world: World, acting: Server, browser: WebDriver, tmp_path: Path
) -> None:
    """Issue 29: the bank is down; retry-compensation (under the default budget) makes its
    first attempts, then the saga waits for a worker: the page says so as a notice."""
    down = tmp_path / "bank-down"
    down.touch()
    once = RetryPolicy(max_attempts=1, retry_on=(Exception,))
    app = Coordinator(world.url, compensation_retry=once)
    with contextlib.closing(app), pytest.raises(SagaFailed) as failure:
        _pay_then_cancel(app.saga("web-outage"), down)
    saga_id = failure.value.saga_id
    confirm(browser, acting, saga_id, "retry-compensation", "the bank says it is back")
    assert browser.find_elements(By.ID, "error") == []
    notice = browser.find_element(By.ID, "notice").text
    assert notice.startswith("retry-compensation: done, recorded as an operator action; ")
    assert re.search(
        rf"saga {saga_id} is compensating: attempt 5 of 21 of the compensation of step "
        r"'transfer' failed \(ConnectionError: bank unreachable\); next attempt at "
        r"\d\d:\d\d:\d\d UTC, a worker retries it$",
        notice,
    ), notice
    assert browser.find_element(By.ID, "status").text == "compensating"


def test_the_list_acts_on_every_saga_its_filters_match_after_confirming(
    acting: Server, browser: WebDriver, coord: Coordinator, tmp_path: Path
) -> None:
    blocker = tmp_path / "down"
    failed = {failed_past_pivot(coord, blocker) for _ in range(2)}
    blocker.unlink()  # the fix is deployed: retry both from the list
    browser.get(f"{acting.base}/?name=cli-forward&status=failed")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, '#bulk a[data-verb="retry"]'))
    listed = {
        row.get_attribute("data-id")
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.bulk-item")
    }
    assert failed <= listed  # every match is shown before anything is done
    assert {coord.get(i).status for i in failed} == {SagaStatus.FAILED}
    browser.find_element(By.ID, "operator").send_keys("ann")
    browser.find_element(By.ID, "reason").send_keys("invoice service fixed")
    navigate(browser, browser.find_element(By.ID, "confirm"))
    assert "retry:" in browser.find_element(By.ID, "bulk-result").text
    assert {coord.get(i).status for i in failed} == {SagaStatus.COMPLETED}
    for saga_id in failed:
        (event,) = operator_events(coord, saga_id)
        assert (event["action"], event["source"], event["by"]) == ("retry", "web", "ann")


def test_the_list_retries_many_from_an_earlier_step(
    acting: Server, browser: WebDriver, coord: Coordinator, tmp_path: Path
) -> None:
    blocker, stamps = tmp_path / "down", tmp_path / "stamps"
    blocker.touch()
    failed = set()
    for _ in range(2):
        with pytest.raises(SagaFailed) as raised:
            coord.run(FORWARD_FROM, data={"blocker": str(blocker), "stamps": str(stamps)})
        failed.add(raised.value.saga_id)
    blocker.unlink()
    browser.get(f"{acting.base}/?name=cli-forward-from&status=failed")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, '#bulk a[data-verb="retry"]'))
    browser.find_element(By.ID, "from-step").send_keys("stamp")
    browser.find_element(By.ID, "operator").send_keys("ann")
    browser.find_element(By.ID, "reason").send_keys("stamps were wrong; checked")
    navigate(browser, browser.find_element(By.ID, "confirm"))
    assert "retry: 2 of 2 done" in browser.find_element(By.ID, "bulk-result").text
    assert {coord.get(i).status for i in failed} == {SagaStatus.COMPLETED}
    assert sorted(stamps.read_text().split()) == ["1", "1", "2", "2"]
    for saga_id in failed:
        (event,) = operator_events(coord, saga_id)
        assert (event["action"], event["from_step"], event["source"]) == ("retry", "stamp", "web")


def test_acting_on_many_needs_a_filter_and_a_genuine_form(
    acting: Server, coord: Coordinator, tmp_path: Path
) -> None:
    saga_id = failed_past_pivot(coord, tmp_path / "down")
    before = coord.history(saga_id)
    with httpx.Client(base_url=acting.base) as client:
        unfiltered = client.get("/bulk/confirm/retry")
        assert unfiltered.status_code == 400
        assert "at least one filter" in unfiltered.text
        page = client.get("/bulk/confirm/retry?name=cli-forward&status=failed").text
        assert saga_id in page
        forged = client.post(
            "/bulk/action/retry",
            data={"operator": "ann", "reason": "x", "csrf": "0" * 64, "name": "cli-forward"},
        )
        assert forged.status_code == 403
    assert coord.history(saga_id) == before
