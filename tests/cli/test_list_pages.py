"""``saga list`` pages: one default page size shared with the library, and a next-page
hint that repeats the query it continues."""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Iterator

import pytest

from saga import AsyncCoordinator, Coordinator
from saga.ports import DEFAULT_LIST_LIMIT
from saga.web.list_page import Filters
from tests.cli.conftest import bare, invoke


@pytest.fixture
def crowded(db_url: str) -> Iterator[Coordinator]:
    """One saga more than a default page holds, on the test's backend."""
    coordinator = Coordinator(db_url, lease_ttl=5.0)
    try:
        for _ in range(DEFAULT_LIST_LIMIT + 1):
            bare(coordinator, str(uuid.uuid4()), "crowd")
        yield coordinator
    finally:
        coordinator.close()


def test_the_command_and_the_library_page_by_the_same_default(
    db_url: str, crowded: Coordinator
) -> None:
    result = invoke(db_url, "list", "--json")
    assert result.exit_code == 0, result.output
    page = json.loads(result.stdout)
    listed = [row["id"] for row in page["sagas"]]
    assert listed == [view.id for view in crowded.list()]
    assert len(listed) == DEFAULT_LIST_LIMIT
    assert page["next_before"] == listed[-1]  # a full page: there is a next one


def test_every_listing_takes_its_default_from_the_one_constant() -> None:
    defaults = [
        inspect.signature(Coordinator.list).parameters["limit"].default,
        inspect.signature(AsyncCoordinator.list).parameters["limit"].default,
        Filters().limit,
    ]
    assert defaults == [DEFAULT_LIST_LIMIT] * 3
    shown = invoke("sqlite:///unused.db", "list", "--help").stdout
    assert f"[default: {DEFAULT_LIST_LIMIT}]" in " ".join(shown.split())
