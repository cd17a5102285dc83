"""Rows forged in the database, and links forged in the address bar, against a real
``saga web`` process in headless Chromium, on SQLite and PostgreSQL: a hostile saga id
adds no attribute or element to the list, and ``?done=`` alone says nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from saga import Coordinator, SagaStatus, StepStatus
from saga._internal.ports import Commit, Event, SagaRecord, StepRecord, StepWrite
from tests import postgres
from tests.cli.conftest import crashed
from tests.web.conftest import serving

FORGED = 'x" onmouseover="alert(1)"<u id=p>\'&'
"""36 characters at most fit the id column; this one holds a quote of each kind, an
element, an ampersand and an event handler."""


def forge(url: str) -> None:
    """A saga row whose id no saga process would write, as a hostile row holds it."""
    with contextlib.closing(Coordinator(url)) as coord:
        record = SagaRecord(FORGED, "order", "forged", "declarative", SagaStatus.RUNNING,
                            "{}", "1", "w", 1)  # fmt: skip
        step = StepRecord("pay", 1, StepStatus.RUNNING, 1)
        first = Commit(FORGED, 1, steps=(StepWrite(step, new=True, stamp="started"),),
                       events=(Event("saga_started"),))  # fmt: skip
        coord.store.create(record, first, 30.0)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/saga.db"
        return
    with postgres.isolated_schema(request.getfixturevalue("postgres_server")) as schema_url:
        yield schema_url


def test_a_forged_id_adds_no_attribute_or_element_to_the_list(
    url: str, tmp_path: Path, browser: WebDriver
) -> None:
    with contextlib.closing(Coordinator(url)) as coord:
        coord.store.create_schema()
    forge(url)
    with serving(url, tmp_path / "web.log") as server:
        browser.get(server.base + "/")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.saga")
        assert [r.get_attribute("data-id") for r in rows] == [FORGED]
        injected = "return document.querySelectorAll('[onmouseover], u, #p').length"
        assert browser.execute_script(injected) == 0
        link = rows[0].find_element(By.CSS_SELECTOR, "a")
        assert link.get_attribute("title") == FORGED
        assert link.get_attribute("href") == f"{server.base}/saga/{quote(FORGED, safe='')}"
        assert link.text == FORGED[:8]


def test_done_in_the_address_says_nothing_without_the_action_in_the_history(
    url: str, tmp_path: Path, browser: WebDriver
) -> None:
    with contextlib.closing(Coordinator(url, lease_ttl=5.0)) as coord:
        coord.store.create_schema()
        saga_id = crashed(coord)
    with serving(url, tmp_path / "web.log", "--allow-actions") as server:
        browser.get(f"{server.base}/saga/{saga_id}?done=compensate")
        assert browser.find_element(By.ID, "status").text == "running"
        assert browser.find_elements(By.ID, "notice") == []
        assert (
            "recorded as an operator action" not in browser.find_element(By.TAG_NAME, "main").text
        )
