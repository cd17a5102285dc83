"""The interleaving harness (tests/interleave.py) does what the sweeps rely on.

* a paused actor has sent nothing past its boundary, and goes on when resumed;
* a dry run and a real run from the same state reach the same boundaries;
* a killed actor sends nothing more; a wait that can never end fails clearly;
* a lease renewal is an actor too: one sent before a takeover, held until the
  new owner holds the saga, extends nothing (its epoch is stale).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.faults import races
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.interleave import ActorKilled, Interleaving, InterleavingError

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    races.reset_calls()


def test_a_paused_owner_has_sent_nothing_past_its_boundary(url: str) -> None:
    with Interleaving(url, sagas=[races.ORDER]) as run:
        owner = races.owner_of(run, {}, 60.0)
        at = owner.run_until(races.starts_pivot)
        assert at is not None
        assert at.change is not None
        saga = run.observer.get(at.change.saga_id)
        assert [(s.name, s.status.value) for s in saga.steps] == [
            ("reserve", "succeeded"),
            ("charge", "running"),
        ]
        assert [c.step for c in races.CALLS] == ["reserve", "charge"]
        owner.run_to_end()
        assert owner.outcome == "returned"
        assert run.observer.get(saga.id).status.value == "completed"


def test_an_async_owner_pauses_at_its_native_commits_too(url: str) -> None:
    """PostgreSQL: ``AsyncCoordinator`` commits on psycopg's async connections
    (adapters/sql/pg_async.py); SQLite: in worker threads. Both are boundaries."""
    with Interleaving(url, sagas=[races.ORDER]) as run:
        coord = run.async_coordinator(lease_ttl=60.0)
        owner = run.actor("owner", lambda: asyncio.run(coord.run(races.ORDER, {})), coord)
        at = owner.run_until(races.starts_pivot)
        assert at is not None
        assert at.change is not None
        assert [c.step for c in races.CALLS] == ["reserve", "charge"]
        assert "ship" not in [s.name for s in run.observer.get(at.change.saga_id).steps]
        owner.run_to_end()
        assert owner.outcome == "returned"
        assert [b.kind for b in owner.boundaries if b.kind.startswith("hot")] == [
            "hot.create",
            *["hot.commit"] * 4,
        ]


def test_a_dry_run_and_a_real_run_reach_the_same_boundaries(fresh_url: FreshUrl) -> None:
    seen = []
    for _ in range(2):
        with Interleaving(fresh_url(), sagas=[races.ORDER]) as run:
            owner = races.owner_of(run, {}, 60.0).run_to_end()
            seen.append([(b.kind, b.sql.split(" epoch")[0], b.free) for b in owner.boundaries])
    assert seen[0] == seen[1]
    assert [kind for kind, _, _ in seen[0] if kind.startswith("hot")] == ["hot.create"] + [
        "hot.commit"
    ] * 4


def test_a_killed_owner_sends_nothing_more(url: str) -> None:
    with Interleaving(url, sagas=[races.ORDER]) as run:
        owner = races.owner_of(run, {}, 60.0)
        at = owner.run_until(races.records_pivot)
        assert at is not None
        assert at.change is not None
        before = dump(url, at.change.saga_id)
        owner.kill()
        owner.wait_done()
        assert isinstance(owner.error, ActorKilled)
        assert dump(url, at.change.saga_id) == before
        assert len(owner.boundaries) == at.index + 1


def test_back_to_back_pauses_are_each_seen(url: str) -> None:
    """Resuming waits until the actor has left its pause: the next wait cannot mistake
    the old pause for the new one, however soon the actor pauses again."""
    with Interleaving(url, sagas=[races.ORDER]) as run:
        owner = races.owner_of(run, {}, 60.0)
        assert [getattr(owner.run_until(k), "index", None) for k in (1, 2, 3)] == [1, 2, 3]
        owner.run_to_end()


def test_an_operator_killed_at_a_read_reports_its_death_and_writes_nothing(url: str) -> None:
    with Interleaving(url, sagas=[races.ORDER]) as run:
        owner = races.owner_of(run, {}, 60.0)
        at = owner.run_until(races.starts_pivot)
        assert at is not None
        assert at.change is not None
        saga_id = at.change.saga_id
        before = dump(url, saga_id)
        coord = run.coordinator()
        op = run.actor("op", lambda: coord.compensate(saga_id), coord)
        assert op.run_until(lambda b: b.kind == "sql" and "FROM saga_steps" in b.sql)
        op.kill()
        op.wait_done()
        assert isinstance(op.error, ActorKilled), repr(op.error)
        assert dump(url, saga_id) == before


def test_a_wait_that_cannot_end_fails_the_test_clearly(url: str) -> None:
    stuck = threading.Event()
    with Interleaving(url, timeout=0.5) as run:
        coord = run.coordinator()
        actor = run.actor("stuck", lambda: stuck.wait(30), coord)
        with pytest.raises(InterleavingError, match=r"stuck pauses.*<actor stuck: running"):
            actor.run_until(0)
        stuck.set()


def test_a_renewal_sent_before_a_takeover_extends_nothing(url: str) -> None:
    with Interleaving(url, sagas=[races.ORDER]) as run:
        owner = races.owner_of(run, {}, 0.5)
        at = owner.run_until(races.starts_pivot)
        assert at is not None
        assert at.change is not None
        saga_id, epoch = at.change.saga_id, at.change.epoch
        renewer = run.coordinator()
        renewal = run.actor(
            "renewal", lambda: renewer.store.renew_many({saga_id: epoch}, 60.0), renewer
        )
        assert renewal.run_until(0) is not None  # the renewal, held before its statement
        run.wait_lease_expired(saga_id)
        takeover = run.coordinator()
        resume = run.actor("resume", lambda: takeover.resume(saga_id), takeover)
        claimed = resume.run_until(lambda b: b.index > 0 and b.kind == "hot.commit")
        assert claimed is not None, resume
        held = dump(url, saga_id)
        renewal.run_to_end()
        assert renewal.result.lost == {saga_id}, renewal.result
        assert dump(url, saga_id) == held
        resume.run_to_end()
        owner.run_to_end()
        assert (resume.outcome, owner.outcome) == ("returned", "LeaseLostError")
        assert run.observer.get(saga_id).status.value == "completed"
