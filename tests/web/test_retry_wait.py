"""The saga page of a step waiting 10 minutes to retry, in headless Chromium against a real
``saga web``, on SQLite and PostgreSQL: the failed attempt is said with its error and
when the next is due, the step is not shown in doubt, and the history row of the
failure is there before the retry starts, its TOOK the attempt's own."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.remote.webdriver import WebDriver

from tests.cli.wait_steps import BACKOFF, waiting
from tests.web.conftest import serving

SAID = "attempt 1 failed: ConnectionError: card network reset; next attempt at "


def test_the_saga_page_says_the_attempt_failed_and_when_the_next_is_due(
    db_url: str, tmp_path: Path, browser: WebDriver
) -> None:
    with waiting(db_url, "wait-web") as saga_id, serving(db_url, tmp_path / "web.log") as server:
        browser.get(f"{server.base}/saga/{saga_id}")
        # Read in one script: the page reloads itself every few seconds while live.
        shown = browser.execute_script(READ)
    assert SAID in shown["summary"]
    assert "outcome unknown" not in shown["summary"]
    assert shown["retry"].startswith(SAID)
    [failed] = shown["failed"]
    assert f"step charge {SAID}" in failed[-1]
    assert own_duration(failed[2]) < BACKOFF  # TOOK: the attempt's, not the wait after it
    assert [row[5] for row in shown["started"]] == ["1", "1"]  # no retry started yet


READ = """
const panel = document.querySelector('details.step[data-step="charge"]');
const cells = (kind) => [...document.querySelectorAll(`tr.event[data-kind="${kind}"]`)]
    .map((row) => [...row.querySelectorAll("td")].map((td) => td.textContent));
return {
    summary: panel.querySelector("summary").textContent,
    retry: panel.querySelector("table .retry-wait").textContent,
    failed: cells("attempt_failed"),
    started: cells("step_started"),
};
"""


def own_duration(took: str) -> float:
    """Seconds from the history's TOOK cell ("12 ms", "1.4 s")."""
    number, unit = took.split()
    return float(number) / 1000 if unit == "ms" else float(number)
