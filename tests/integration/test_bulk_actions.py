"""saga.admin's bulk actions from Python: a selection read a page at a time, any verb
applied per saga in batches, each saga's refusal or failure reported without stopping
the rest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from saga import Coordinator, SagaStatus, SagaView, admin
from saga._internal.errors import ConfigurationError, StorageUnavailableError
from tests.cli import steps
from tests.cli.conftest import bare, crashed

IDS = [f"bbbb0000-0000-4000-8000-00000000000{n}" for n in range(5)]


@pytest.fixture
def five(coord: Coordinator) -> list[str]:
    """Five running sagas of ``bulk-a`` (keys k-0..k-4) and one of ``bulk-b``; the ids of
    the five, newest first (as a listing orders them)."""
    for n, saga_id in enumerate(IDS):
        bare(coord, saga_id, "bulk-a", key=f"k-{n}")
    bare(coord, "cccc0000-0000-4000-8000-000000000000", "bulk-b", key="k-9")
    return [view.id for view in coord.list(name="bulk-a")]


def test_a_selection_is_read_page_by_page_newest_first(coord: Coordinator, five: list[str]) -> None:
    chosen = admin.Selection(name="bulk-a")
    assert [v.id for v in admin.select_sagas(coord, chosen, page=2)] == five
    limited = admin.Selection(name="bulk-a", limit=3)
    assert [v.id for v in admin.select_sagas(coord, limited, page=2)] == five[:3]
    prefixed = admin.Selection(key_prefix="k-", statuses=(SagaStatus.RUNNING,))
    assert len(list(admin.select_sagas(coord, prefixed, page=4))) == 6


def test_a_selection_of_everything_or_nonsense_is_refused_at_once(coord: Coordinator) -> None:
    with pytest.raises(ConfigurationError, match="at least one filter"):
        admin.select_sagas(coord, admin.Selection(limit=5))
    with pytest.raises(ConfigurationError, match="--older-than 'a while' is not a duration"):
        admin.Selection.parse(older_than="a while")
    with pytest.raises(ConfigurationError, match="unknown status 'done'"):
        admin.Selection.parse(statuses=["failed,done"])
    parsed = admin.Selection.parse(statuses=["failed,cancelled"], older_than="1h30m", step="s")
    assert parsed.describe() == "--status failed,cancelled --step s --older-than 1h30m"


def test_a_batch_is_taken_then_acted_on_before_the_next(
    coord: Coordinator, five: list[str]
) -> None:
    log: list[tuple[str, str]] = []

    def targets() -> Iterator[SagaView]:
        for view in admin.select_sagas(coord, admin.Selection(name="bulk-a"), page=2):
            log.append(("taken", view.id))
            yield view

    def touch(c: Coordinator, saga_id: admin.SagaRef) -> SagaView:
        assert isinstance(saga_id, str)
        log.append(("acted", saga_id))
        return c.get(saga_id)

    seen: list[int] = []
    report = admin.act_on_many(
        coord, targets(), touch, batch_size=2, progress=lambda _item, done: seen.append(done)
    )
    a, b, c, d, e = five
    assert log == [
        *[("taken", a), ("taken", b), ("acted", a), ("acted", b)],
        *[("taken", c), ("taken", d), ("acted", c), ("acted", d)],
        *[("taken", e), ("acted", e)],
    ]
    assert seen == [1, 2, 3, 4, 5]
    assert report.ok
    assert report.action == "touch"
    assert report.as_json()["summary"]["done"] == 5


def test_a_refusal_is_reported_and_the_rest_are_acted_on(coord: Coordinator) -> None:
    coord.register(steps.ORDER)
    done = coord.run(steps.ORDER, data={"sku": "A1", "amount": 1}, key="done").id
    stuck = crashed(coord)
    views = [coord.get(done), coord.get(stuck)]
    report = admin.act_on_many(coord, views, "compensate")
    first, second = report.items
    assert (first.outcome, first.status) == (admin.Outcome.REFUSED, None)
    assert first.reason == f"saga {done} is already completed"
    assert (second.outcome, second.status) == (admin.Outcome.DONE, SagaStatus.COMPENSATED)
    assert (first.was, second.was, second.step) == (
        SagaStatus.COMPLETED,
        SagaStatus.RUNNING,
        "charge",
    )
    assert not report.ok
    assert report.as_json()["summary"] == {
        "done": 1,
        "waiting": 0,
        "refused": 1,
        "failed": 0,
        "planned": 0,
    }


def test_a_dry_run_only_lists(coord: Coordinator, five: list[str]) -> None:
    chosen = admin.select_sagas(coord, admin.Selection(name="bulk-a"))
    report = admin.act_on_many(coord, chosen, "cancel", dry_run=True)
    assert [(i.saga_id, i.outcome) for i in report.items] == [
        (saga_id, admin.Outcome.PLANNED) for saga_id in five
    ]
    assert report.ok
    assert all(not coord.get(saga_id).cancel_requested for saga_id in five)


def test_an_unreachable_database_stops_the_run(coord: Coordinator, five: list[str]) -> None:
    acted: list[str] = []

    def cut_off(c: Coordinator, saga_id: admin.SagaRef) -> SagaView:
        assert isinstance(saga_id, str)
        if len(acted) == 1:
            raise StorageUnavailableError("connection refused")
        acted.append(saga_id)
        return c.get(saga_id)

    views = admin.select_sagas(coord, admin.Selection(name="bulk-a"))
    report = admin.act_on_many(coord, views, cut_off, batch_size=2)
    assert [item.outcome for item in report.items] == [admin.Outcome.DONE, admin.Outcome.FAILED]
    assert report.stopped is not None
    assert report.stopped.startswith("cannot reach the database: connection refused")
    assert report.items[1].reason == report.stopped
    assert not report.ok
    assert acted == five[:1]


def test_an_unknown_verb_is_refused(coord: Coordinator) -> None:
    with pytest.raises(ConfigurationError, match="no verb 'undo'; use one of: compensate"):
        admin.act_on_many(coord, [], "undo")
