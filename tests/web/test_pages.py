"""The console's pages in headless Chromium, served by a real ``saga web`` process,
on SQLite and PostgreSQL: the list and its filters, the saga page's timeline,
panels and history, the diff, and hostile stored text rendered inert."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from saga.web.timeline import MIN_BAR_WIDTH
from tests.cli.conftest import REPO
from tests.web.conftest import Server, World, navigate

DOCS = REPO / "docs"


def open_page(browser: WebDriver, server: Server, path: str) -> None:
    browser.get(server.base + path)
    assert browser.find_element(By.TAG_NAME, "main")  # rendered, not an error of the driver


def row_ids(browser: WebDriver) -> list[str]:
    return [
        r.get_attribute("data-id") or "" for r in browser.find_elements(By.CSS_SELECTOR, "tr.saga")
    ]


def bars(browser: WebDriver, lane: str, step: str | None = None) -> list[WebElement]:
    """The timeline's bars of ``lane`` (and ``step``), left to right."""
    found = browser.find_elements(By.CSS_SELECTOR, f'#timeline rect.bar[data-lane="{lane}"]')
    if step is not None:
        found = [b for b in found if b.get_attribute("data-step") == step]
    return sorted(found, key=lambda b: float(b.get_attribute("x") or 0))


def described(bar: WebElement) -> tuple[str, str, str]:
    return (
        bar.get_attribute("data-step") or "",
        bar.get_attribute("data-attempt") or "",
        bar.get_attribute("data-outcome") or "",
    )


def span(bar: WebElement) -> tuple[float, float]:
    left = float(bar.get_attribute("x") or 0)
    return left, left + float(bar.get_attribute("width") or 0)


def screenshot(browser: WebDriver, world: World, name: str) -> None:
    """Taken on every run; saved into docs/ from the SQLite run when
    ``SAGA_UPDATE_SCREENSHOTS=1`` (so an ordinary run leaves the tree clean)."""
    if not world.url.startswith("sqlite"):
        return
    folder = DOCS if os.environ.get("SAGA_UPDATE_SCREENSHOTS") == "1" else Path(tempfile.mkdtemp())
    assert browser.save_screenshot(str(folder / name))
    assert (folder / name).stat().st_size > 10_000


def test_list_shows_every_saga_counts_them_and_marks_stuck_and_failed(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, "/")
    ids = row_ids(browser)
    expected = {world.completed, world.compensated, world.failed, world.stuck, world.cancelled,
                world.in_doubt, world.parallel, world.hostile}  # fmt: skip
    assert set(ids) == expected
    assert ids[0] == world.stuck  # newest first
    stuck = browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{world.stuck}"]')
    assert "stuck" in (stuck.get_attribute("class") or "")
    assert stuck.get_attribute("data-stuck") == "true"
    for failed in (world.failed, world.in_doubt):
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{failed}"]')
        assert "failed" in (row.get_attribute("class") or "")
    counts = {
        c.get_attribute("data-status"): c.text.split()[-1]
        for c in browser.find_elements(By.CSS_SELECTOR, "#counts a.count")
    }
    assert counts == {"running": "1", "compensating": "0", "completed": "3", "compensated": "1",
                      "failed": "2", "cancelled": "1", "paused": "0"}  # fmt: skip
    screenshot(browser, world, "web-list.png")


def test_filters_narrow_the_list_and_paging_keeps_them(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, "/")
    browser.find_element(By.CSS_SELECTOR, 'input[name="status"][value="failed"]').click()
    navigate(browser, browser.find_element(By.ID, "apply"))
    assert set(row_ids(browser)) == {world.failed, world.in_doubt}
    open_page(browser, read_only, "/")
    browser.find_element(By.NAME, "key").send_keys("flaky-1")
    navigate(browser, browser.find_element(By.ID, "apply"))
    assert row_ids(browser) == [world.compensated]
    open_page(browser, read_only, "/?stuck=1")
    assert row_ids(browser) == [world.stuck]
    open_page(browser, read_only, "/?status=completed&limit=1")
    seen = row_ids(browser)
    while browser.find_elements(By.ID, "next-page"):
        navigate(browser, browser.find_element(By.ID, "next-page"))
        assert "status=completed" in browser.current_url
        assert "limit=1" in browser.current_url
        seen += row_ids(browser)
    assert seen == [world.hostile, world.parallel, world.completed]
    open_page(browser, read_only, "/?age=1h")
    assert browser.find_element(By.ID, "empty")
    open_page(browser, read_only, "/?age=soon")
    error = browser.find_element(By.ID, "error").text
    assert error == "older than 'soon' is not a duration; write it like 90s, 10m, 1h30m, 30d or 2w"


def test_a_retried_then_compensated_saga_draws_attempts_waits_and_the_turn(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, "/?key=flaky-1")
    navigate(browser, browser.find_element(By.CSS_SELECTOR, f'tr[data-id="{world.compensated}"] a'))
    assert browser.find_element(By.ID, "saga-id").text == world.compensated
    forward = [described(b) for b in bars(browser, "forward")]
    assert forward == [("book", "1", "ok"), ("pay", "1", "failed"), ("pay", "2", "failed"),
                       ("pay", "3", "failed")]  # fmt: skip
    undo = [described(b) for b in bars(browser, "compensation")]
    assert undo == [("pay", "1", "failed"), ("pay", "2", "ok"), ("book", "1", "ok")]
    turn = browser.find_element(By.CSS_SELECTOR, '#timeline [data-marker="turn"]')
    turn_x = float(turn.get_attribute("x1") or 0)
    for bar in bars(browser, "forward"):  # each ends by the turn, or is a sliver drawn
        left, right = span(bar)  # at the minimum width just before it
        assert left <= turn_x + 0.5
        assert right <= max(turn_x, left + MIN_BAR_WIDTH) + 0.5
    assert all(span(b)[0] >= turn_x - 0.5 for b in bars(browser, "compensation"))
    waits = browser.find_elements(By.CSS_SELECTOR, '#timeline line.gap[data-step="pay"]')
    assert {w.get_attribute("data-lane") for w in waits} == {"forward", "compensation"}
    assert len(waits) == 3  # two forward retries, one compensation retry
    assert browser.find_element(By.ID, "comp-done").text == "2"
    assert browser.find_element(By.ID, "forward-done").text == "0"
    assert not browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    kinds = [
        r.get_attribute("data-kind") for r in browser.find_elements(By.CSS_SELECTOR, "tr.event")
    ]
    assert kinds.count("attempt_failed") == 2
    assert kinds[-1] == "saga_compensated"
    screenshot(browser, world, "web-saga.png")


def test_a_saga_whose_process_was_killed_shows_the_step_outcome_unknown(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.stuck}")
    assert browser.find_element(By.ID, "stuck")
    marker = browser.find_element(By.CSS_SELECTOR, '#timeline [data-marker="outcome-unknown"]')
    assert (marker.get_attribute("data-step"), marker.get_attribute("data-lane")) == (
        "hang",
        "forward",
    )
    assert [described(b) for b in bars(browser, "forward")] == [
        ("prepare", "1", "ok"), ("hang", "1", "unknown")]  # fmt: skip
    refresh = browser.find_element(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert refresh.get_attribute("content") == "5"  # live: it reloads itself


def test_the_timeline_spans_the_page_and_names_every_step_whole(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.completed}")
    timeline = browser.find_element(By.ID, "timeline")
    main = browser.find_element(By.TAG_NAME, "main")
    assert timeline.size["width"] >= 0.95 * (main.size["width"] - 32)  # main's padding
    steps = [
        p.get_attribute("data-step") for p in browser.find_elements(By.CSS_SELECTOR, "details.step")
    ]
    labels = browser.find_elements(By.CSS_SELECTOR, '#timeline text.row-label[data-lane="forward"]')
    assert [label.text for label in labels] == steps  # each whole, in its own row
    assert all(label.is_displayed() for label in labels)


def test_a_stuck_step_is_labelled_unknown_its_marker_shows_and_the_legend_says_why(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.stuck}")
    labels = browser.find_elements(By.CSS_SELECTOR, "#timeline text.bar-label")
    assert any(label.text.startswith("outcome unknown: no word") for label in labels)
    inside = browser.execute_script(
        "const svg = document.getElementById('timeline').getBoundingClientRect();"
        "const mark = document.querySelector('[data-marker=\"outcome-unknown\"]')"
        ".getBoundingClientRect();"
        "return mark.left >= svg.left && mark.right <= svg.right;"
    )
    assert inside  # the "?" is not clipped at the picture's edge
    legend = browser.find_element(By.CSS_SELECTOR, "p.legend")
    assert legend.find_element(By.CSS_SELECTOR, "rect.bar.unknown")
    assert "not for as long as it ran" in legend.text


def test_a_pivot_given_up_in_doubt_is_marked_and_its_panel_says_so(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.in_doubt}")
    marker = browser.find_element(By.CSS_SELECTOR, '#timeline [data-marker="outcome-unknown"]')
    assert marker.get_attribute("data-step") == "ship"
    assert described(bars(browser, "forward", "ship")[-1]) == ("ship", "1", "unknown")
    panel = browser.find_element(By.CSS_SELECTOR, 'details.step[data-step="ship"]')
    assert "outcome unknown" in panel.text
    panel.find_element(By.TAG_NAME, "summary").click()
    assert "pivot" in panel.find_element(By.CSS_SELECTOR, "table").text
    assert browser.find_elements(By.CSS_SELECTOR, 'tr.event[data-kind="step_in_doubt"]')


def test_parallel_steps_get_rows_of_their_own(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.parallel}")
    (left,), (right,), (join,) = (bars(browser, "forward", s) for s in ("left", "right", "join"))
    assert left.get_attribute("data-row") != right.get_attribute("data-row")
    (l0, l1), (r0, r1), (j0, _) = span(left), span(right), span(join)
    assert max(l0, r0) < min(l1, r1)  # they overlap in time
    assert j0 >= max(l1, r1) - 0.5


def test_a_step_panel_opens_on_its_input_output_and_key(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.completed}")
    panel = browser.find_element(By.CSS_SELECTOR, 'details.step[data-step="charge"]')
    table = panel.find_element(By.CSS_SELECTOR, "table")
    assert not table.is_displayed()
    panel.find_element(By.TAG_NAME, "summary").click()
    assert table.is_displayed()
    text = table.text
    assert '"charged": 42' in text
    assert f"{world.completed}:charge" in text
    assert "compensatable" in text


def test_a_failed_compensation_is_drawn_failed_and_counted(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.failed}")
    assert described(bars(browser, "compensation", "charge")[-1]) == ("charge", "1", "failed")
    assert browser.find_element(By.ID, "comp-failed").text == "1"
    assert browser.find_element(By.ID, "comp-pending").text == "1"  # reserve, still held
    open_page(browser, read_only, f"/saga/{world.cancelled}")
    assert browser.find_element(By.ID, "status").text == "cancelled"
    assert browser.find_element(By.CSS_SELECTOR, '#timeline [data-marker="turn"]')


def test_the_diff_of_two_sagas_is_reachable_from_the_saga_page(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    open_page(browser, read_only, f"/saga/{world.completed}")
    browser.find_element(By.NAME, "right").send_keys(world.hostile)
    navigate(browser, browser.find_element(By.ID, "diff"))
    assert browser.find_element(By.ID, "same-input").text == "different input"
    rows = {
        r.get_attribute("data-step"): r.get_attribute("data-same-output")
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.step-diff")
    }
    assert rows == {"reserve": "no", "charge": "yes", "pack": "yes", "ship": "no"}


def test_hostile_stored_text_renders_as_text(
    world: World, read_only: Server, browser: WebDriver
) -> None:
    for path in ("/", f"/saga/{world.hostile}"):
        open_page(browser, read_only, path)
        assert "pwned" not in browser.title
        assert browser.find_elements(By.TAG_NAME, "img") == []
        assert browser.find_elements(By.CSS_SELECTOR, "main script") == []
    key = browser.find_element(By.ID, "saga-key").text
    assert key == "<script>document.title='pwned-key'</script>\\x1b[2J\\u202e"
    panel = browser.find_element(By.CSS_SELECTOR, 'details.step[data-step="reserve"]')
    panel.find_element(By.TAG_NAME, "summary").click()
    assert "<img src=x onerror=" in panel.text
