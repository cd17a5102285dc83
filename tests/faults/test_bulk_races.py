"""A bulk operator action racing a recoverer, and racing a live owner.

The bulk action is ``admin.act_on_many(compensate)`` over a selection of running
``cli-order`` sagas (tests/cli/steps.py), as ``saga compensate --name cli-order
--status running --yes`` runs it, with a coordinator of its own (tests/interleave.py).

* A recoverer: two stuck sagas, A (the newest, acted on first) and B. For every free
  statement boundary k of the bulk action up to and including its claim of A (counted
  by a dry run on the same starting state), on SQLite and PostgreSQL, the action pauses
  before k, a recoverer finishes A forward (``recover_saga``), and the action goes on.
  A must end completed and never compensated: the action either did not select it (it
  read the selection after the recoverer) or was refused, changing none of A's rows,
  and said so in its report; B is compensated all the same.
* A live owner: the owner runs a saga and is paused mid-way, alive (long lease, renewals
  held); the action selects that saga and a stuck one. The owner's saga is refused
  (``SagaBusyError``), its rows unchanged, and the stuck one is compensated; the owner
  then finishes its saga.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from saga import Coordinator, SagaStatus, admin
from tests.cli import steps
from tests.cli.conftest import crashed, order
from tests.crash.invariants import check_history
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.interleave import Actor, Boundary, Interleaving, free_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

RUNNING_ORDERS = admin.Selection(name=steps.ORDER.name, statuses=(SagaStatus.RUNNING,))


def bulk_compensate(run: Interleaving) -> Actor:
    """The bulk action as an actor, with its own coordinator."""
    coord = run.coordinator()
    chosen = admin.select_sagas(coord, RUNNING_ORDERS)
    return run.actor("bulk", lambda: admin.act_on_many(coord, chosen, "compensate"), coord)


def two_stuck(run: Interleaving) -> tuple[str, str]:
    """B, then A: two sagas whose process died in ``charge``; A is the newest."""
    b = crashed(run.observer)
    a = crashed(run.observer)
    newest = [view.id for view in run.observer.list(name=steps.ORDER.name, limit=2)]
    return (a, b) if newest[0] == a else (b, a)


def compensated_steps(coord: Coordinator, saga_id: str) -> list[str]:
    events = coord.store.events(saga_id)
    return [e.step or "" for e in events if e.kind.startswith("compensation_")]


def census(fresh_url: FreshUrl) -> list[Boundary]:
    """The bulk action's free boundaries up to its claim of the first saga it acts on (a
    claim locks, so the last is the one before it: the recoverer may come just then)."""
    with Interleaving(fresh_url(), sagas=[steps.ORDER]) as run:
        two_stuck(run)
        dry = bulk_compensate(run)
        dry.run_to_end()
        found = free_until(dry.boundaries, lambda b: b.is_claim)
    assert any(b.is_claim for b in dry.boundaries), "the bulk action never claimed"
    assert found, "the bulk action reached no free boundary"
    return found


def test_a_recoverer_finishing_a_saga_first_is_reported_and_the_rest_acted_on(
    backend: str, fresh_url: FreshUrl
) -> None:
    refusals = 0
    for target in census(fresh_url):
        with Interleaving(fresh_url(), sagas=[steps.ORDER]) as run:
            problems, refused = race_recoverer(run, target)
        assert not problems, f"{backend}: bulk paused at {target}:\n  " + "\n  ".join(problems)
        refusals += refused
    assert refusals, "in no interleaving did the bulk action select A and get refused"


def race_recoverer(run: Interleaving, target: Boundary) -> tuple[list[str], bool]:
    """What went wrong, and whether the bulk action selected A and was refused."""
    a, b = two_stuck(run)
    bulk = bulk_compensate(run)
    at = bulk.run_until(target.index)
    assert at is not None, f"the bulk action finished before {target}: {bulk}"
    assert at.sql == target.sql, f"census mismatch: {at} is not {target}"
    recoverer = run.coordinator()
    run.actor("recoverer", lambda: recoverer.recover_saga(a), recoverer).run_to_end()
    recovered = dump(run.url, a)
    bulk.run_to_end()
    problems = [] if bulk.error is None else [f"the bulk action raised {bulk.error!r}"]
    report: admin.BulkReport = bulk.result
    items = {item.saga_id: item for item in report.items} if report else {}
    if a in items and items[a].outcome is not admin.Outcome.REFUSED:
        problems.append(f"A was not refused: {items[a]}")
    if dump(run.url, a) != recovered:
        problems.append("the bulk action changed A's rows after the recoverer finished it")
    if b not in items or items[b].outcome is not admin.Outcome.DONE:
        problems.append(f"B was not acted on: {items.get(b)}")
    problems += settled(run.observer, a, SagaStatus.COMPLETED)
    problems += settled(run.observer, b, SagaStatus.COMPENSATED)
    if compensated_steps(run.observer, a):
        problems.append(f"A was compensated: {compensated_steps(run.observer, a)}")
    return problems, a in items


def settled(coord: Coordinator, saga_id: str, status: SagaStatus) -> list[str]:
    view = coord.get(saga_id)
    if view.status is not status:
        return [f"{saga_id} ended {view.status.value}, not {status.value}"]
    try:
        check_history(view, coord.store.events(saga_id))
    except AssertionError as error:
        return [f"{saga_id}: {error}"]
    return []


def _packing(b: Boundary) -> bool:
    return b.writes_step("pack", "running")


def test_a_saga_its_owner_holds_is_refused_unchanged_and_the_rest_acted_on(
    fresh_url: FreshUrl,
) -> None:
    with Interleaving(fresh_url(), sagas=[steps.ORDER]) as run:
        stuck = crashed(run.observer)
        owner = owner_paused(run, _packing)
        live = run.observer.get(key="live").id
        held = dump(run.url, live)
        bulk = bulk_compensate(run).run_to_end()
        assert bulk.error is None, bulk.error
        items = {item.saga_id: item for item in bulk.result.items}
        assert items[live].outcome is admin.Outcome.REFUSED
        assert items[live].reason is not None
        assert "held by" in items[live].reason or "lease" in items[live].reason
        assert dump(run.url, live) == held
        assert (items[stuck].outcome, items[stuck].status) == (
            admin.Outcome.DONE,
            SagaStatus.COMPENSATED,
        )
        owner.release_heartbeat()
        owner.run_to_end()
        assert owner.error is None, owner.error
        assert not settled(run.observer, live, SagaStatus.COMPLETED)
        assert compensated_steps(run.observer, live) == []


def owner_paused(run: Interleaving, rule: Callable[[Boundary], bool]) -> Actor:
    """An owner running a ``cli-order`` saga (key ``live``), paused alive where ``rule``
    holds: a long lease, its renewals held."""
    coord = run.coordinator(lease_ttl=60.0)
    owner = run.actor("owner", lambda: coord.run(steps.ORDER, data=order(), key="live"), coord)
    owner.hold_heartbeat()
    assert owner.run_until(rule) is not None, f"the owner never got there: {owner}"
    return owner
