"""An operator's pause racing the saga's live owner, and racing a recoverer.

The saga is a ``cli-order`` (tests/cli/steps.py: reserve, charge, pack, then the
pivot ship); every actor has a coordinator of its own (tests/interleave.py), and
every sweep covers each free statement boundary, counted by a dry run on the same
starting state, on SQLite and PostgreSQL.

* The owner: paused alive (long lease, renewals held) before each of its boundaries
  after the saga exists, while ``coord.pause`` runs to its end; then the owner goes
  on. The pause either took (the owner hands the saga back ``paused`` at its next step
  boundary, or its final commit had already been decided and it completes) or was
  refused because the saga had completed, changing nothing. Nothing is ever
  compensated, and a paused saga resumes to completion with a consistent history.
* A recoverer: the saga's process died (lease expired). The pause is stopped before
  each of its boundaries while ``coord.recover()`` runs to its end, then goes on.
  Either the recoverer finished the saga first and the pause was refused, changing
  nothing, or the pause's guarded write came first and the recoverer claimed nothing:
  never both, never neither.
"""

from __future__ import annotations

import pytest

from saga import Coordinator, SagaStatus
from tests.cli import steps
from tests.cli.conftest import crashed, order
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.faults.test_bulk_races import compensated_steps, settled
from tests.interleave import Actor, Boundary, Interleaving, free_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]


def owner_of(run: Interleaving) -> Actor:
    """An owner running a ``cli-order`` saga (key ``live``), alive: renewals held."""
    coord = run.coordinator(lease_ttl=60.0)
    owner = run.actor("owner", lambda: coord.run(steps.ORDER, data=order(), key="live"), coord)
    owner.hold_heartbeat()
    return owner


def pause_of(run: Interleaving, saga_id: str) -> Actor:
    coord = run.coordinator()
    return run.actor("operator", lambda: coord.pause(saga_id), coord)


def owner_census(fresh_url: FreshUrl) -> list[Boundary]:
    """The owner's free boundaries once its saga exists (the operator needs its id)."""
    with Interleaving(fresh_url(), sagas=[steps.ORDER]) as run:
        dry = owner_of(run).run_to_end()
        assert dry.error is None, dry.error
    created = next(b.index for b in dry.boundaries if b.kind == "hot.create")
    found = [b for b in free_until(dry.boundaries, lambda _: False) if b.index > created]
    assert found, "the owner reached no free boundary after creating its saga"
    return found


def test_a_pause_racing_the_live_owner_parks_or_is_refused_and_never_unwinds(
    backend: str, fresh_url: FreshUrl
) -> None:
    outcomes: set[str] = set()
    for target in owner_census(fresh_url):
        with Interleaving(fresh_url(), sagas=[steps.ORDER]) as run:
            problems, outcome = race_owner(run, target)
        assert not problems, f"{backend}: owner paused at {target}:\n  " + "\n  ".join(problems)
        outcomes.add(outcome)
    # The sweep must have met both a pause that parked the saga and one overtaken by the
    # owner's final commit (decided before the pause was written: all steps done).
    assert {"paused", "completed"} <= outcomes, outcomes


def race_owner(run: Interleaving, target: Boundary) -> tuple[list[str], str]:
    """What went wrong, and how it ended: paused, completed (the pause was overtaken
    by the owner's final commit), or refused (the saga had completed)."""
    owner = owner_of(run)
    at = owner.run_until(target.index)
    assert at is not None, f"it finished before {target}"
    assert at.sql == target.sql, f"census mismatch: {at} is not {target}"
    saga_id = run.observer.get(key="live", name=steps.ORDER.name).id
    operator = pause_of(run, saga_id).run_to_end()
    owner.release_heartbeat()
    owner.run_to_end()
    view = run.observer.get(saga_id)
    problems = [] if not compensated_steps(run.observer, saga_id) else ["it was compensated"]
    if operator.outcome == "OperationRefusedError":
        problems += settled(run.observer, saga_id, SagaStatus.COMPLETED)
        return problems, "refused"
    if operator.outcome != "returned":
        return [*problems, f"the pause raised {operator.error!r}"], "?"
    if view.status is SagaStatus.COMPLETED:  # the final commit was on its way
        return problems + settled(run.observer, saga_id, SagaStatus.COMPLETED), "completed"
    problems += settled(run.observer, saga_id, SagaStatus.PAUSED)
    if owner.outcome != "SagaHandedBack" or view.owner is not None:
        problems.append(f"the owner ended {owner.outcome}, holder {view.owner}")
    resumed = run.observer.resume(saga_id)
    problems += settled(run.observer, saga_id, SagaStatus.COMPLETED)
    if resumed.status is not SagaStatus.COMPLETED:
        problems.append(f"resumed, it ended {resumed.status.value}")
    return problems, "paused"


def stuck_one(run: Interleaving) -> str:
    """A saga whose process died in ``charge``: its lease expired."""
    return crashed(run.observer)


def pause_census(fresh_url: FreshUrl) -> list[Boundary]:
    with Interleaving(fresh_url(), sagas=[steps.ORDER]) as run:
        dry = pause_of(run, stuck_one(run)).run_to_end()
        assert dry.error is None, dry.error
    found = free_until(dry.boundaries, lambda _: False)
    assert any(b.is_claim for b in dry.boundaries), "the pause never claimed the idle saga"
    return found


def test_a_pause_racing_a_recoverer_either_parks_or_is_refused_never_both(
    backend: str, fresh_url: FreshUrl
) -> None:
    outcomes: set[str] = set()
    for target in pause_census(fresh_url):
        with Interleaving(fresh_url(), sagas=[steps.ORDER]) as run:
            problems, outcome = race_recoverer(run, target)
        assert not problems, f"{backend}: pause stopped at {target}:\n  " + "\n  ".join(problems)
        outcomes.add(outcome)
    assert outcomes == {"paused", "refused"}, outcomes


def race_recoverer(run: Interleaving, target: Boundary) -> tuple[list[str], str]:
    saga_id = stuck_one(run)
    operator = pause_of(run, saga_id)
    at = operator.run_until(target.index)
    assert at is not None, f"it finished before {target}"
    assert at.sql == target.sql, f"census mismatch: {at} is not {target}"
    recoverer: Coordinator = run.coordinator()
    worker = run.actor("recoverer", recoverer.recover, recoverer).run_to_end()
    assert worker.error is None, worker.error
    claimed = [o.saga_id for o in worker.result.outcomes]
    before = dump(run.url, saga_id)
    operator.run_to_end()
    problems = [] if not compensated_steps(run.observer, saga_id) else ["it was compensated"]
    if operator.outcome == "OperationRefusedError" or operator.outcome == "SagaChangedError":
        if dump(run.url, saga_id) != before:
            problems.append("the refused pause changed the saga's rows")
        if claimed != [saga_id]:
            problems.append(f"refused, yet the recoverer claimed {claimed}")
        return problems + settled(run.observer, saga_id, SagaStatus.COMPLETED), "refused"
    if operator.outcome != "returned":
        return [*problems, f"the pause raised {operator.error!r}"], "?"
    if claimed:
        problems.append(f"paused, yet the recoverer claimed {claimed}")
    problems += settled(run.observer, saga_id, SagaStatus.PAUSED)
    if run.observer.get(saga_id).owner is not None:
        problems.append("paused, yet still held")
    return problems, "paused"
