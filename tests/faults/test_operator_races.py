"""An operator verb paused between its first read and its claim, while the owner passes the pivot.

For every verb (compensate, cancel, resume, retry-compensation, recover_saga,
recover, and the async compensate / cancel / resume) and every free statement
boundary k of that verb up to and including its claim (counted by a dry run
on the same starting state: :func:`census`), on SQLite and PostgreSQL:

1. the owner runs ``reserve -> charge`` and pauses just before the commit that
   starts the pivot (``ship``); its lease renewals are held, so nothing it
   does changes a row while the verb runs;
2. the verb runs up to boundary k and pauses;
3. the owner moves on, as the scenario says:

   * ``pivot-held``: it runs the pivot and ``notify`` and pauses before its
     final commit, alive (a long lease);
   * ``pivot-then-fail``: ``notify`` fails for good, so the saga ends
     ``failed`` past its pivot, its lease released;
   * ``dies-after-pivot-acted``: the pivot's action ran, then the owner dies
     before recording it; its short lease runs out (polled by the database clock);
   * ``dies-after-pivot-recorded``: the pivot's success is durable, then the
     owner dies the same way;

4. the verb goes on to its end; a live owner then finishes.

The pivot may have acted in every scenario, so no step before it may ever be
compensated and the saga may never end compensated or cancelled. A verb that
was refused (``OperationRefusedError`` / ``SagaBusyError``) must have
changed nothing: the saga's rows are compared across both stretches where the
verb alone ran. Finally one recovery pass must leave the saga terminal,
released, with a history that agrees with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tests.faults import races
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.faults.races import sweep_cases
from tests.interleave import Actor, Boundary, Interleaving, free_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

_COUNTS = {"compensate": 2, "cancel": 3, "resume": 2, "retry": 1, "retry-compensation": 1}
WIDTH = {
    backend: {
        **_COUNTS,
        "recover-saga": 1,
        "recover": 1,
        **{f"async-{verb}": _COUNTS[verb] for verb in ("compensate", "cancel", "resume", "retry")},
    }
    for backend in ("sqlite", "postgres")
}
"""Free boundaries of each verb up to its claim, per backend (the same on both since a
saga's read is one statement on PostgreSQL and SQLite's IMMEDIATE transactions have
none inside): :func:`test_every_verb_fits_the_sweep` fails unless a dry run finds
exactly these, so every boundary is swept and none is a case that cannot happen."""
LONG, SHORT = 60.0, 0.5  # owner lease (s): alive owners keep it; dead ones lose it soon


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    data: dict[str, str]
    lease_ttl: float
    advance: Callable[[Interleaving, Actor, str], None]


def _pause_alive(run: Interleaving, owner: Actor, saga_id: str) -> None:
    owner.run_until(races.is_final)


def _run_to_failure(run: Interleaving, owner: Actor, saga_id: str) -> None:
    owner.run_to_end()


def _dies_before(rule: Callable[[Boundary], bool]) -> Callable[[Interleaving, Actor, str], None]:
    def advance(run: Interleaving, owner: Actor, saga_id: str) -> None:
        owner.run_until(rule)
        owner.kill()
        owner.wait_done()
        run.wait_lease_expired(saga_id)

    return advance


SCENARIOS = [
    Scenario("pivot-held", {}, LONG, _pause_alive),
    Scenario("pivot-then-fail", {"fail": "notify"}, LONG, _run_to_failure),
    Scenario("dies-after-pivot-acted", {}, SHORT, _dies_before(races.records_pivot)),
    Scenario("dies-after-pivot-recorded", {}, SHORT, _dies_before(races.is_final)),
]

_CENSUS: dict[tuple[str, str], list[Boundary]] = {}


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    races.reset_calls()


def owner_before_pivot(run: Interleaving, scenario: Scenario) -> tuple[Actor, str]:
    """The owner, paused just before the commit that starts the pivot; the saga's id."""
    owner = races.owner_of(run, scenario.data, scenario.lease_ttl)
    at = owner.run_until(races.starts_pivot)
    change = at.change if at is not None else None
    assert change is not None, f"the owner never reached the pivot: {owner}"
    return owner, change.saga_id


def census(verb: str, backend: str, fresh_url: FreshUrl) -> list[Boundary]:
    """The verb's free boundaries up to its claim, from a dry run on the starting state."""
    if (verb, backend) not in _CENSUS:
        with Interleaving(fresh_url(), sagas=[races.ORDER]) as run:
            _, saga_id = owner_before_pivot(run, SCENARIOS[0])
            dry = races.operator(run, verb, saga_id)
            dry.run_to_end()
            _CENSUS[verb, backend] = free_until(dry.boundaries, lambda b: b.is_claim)
    return _CENSUS[verb, backend]


@pytest.mark.parametrize("verb", list(races.VERBS))
def test_every_verb_fits_the_sweep(verb: str, backend: str, fresh_url: FreshUrl) -> None:
    found = census(verb, backend, fresh_url)
    listed = "\n  ".join(map(str, found))
    expected = WIDTH[backend][verb]
    assert len(found) == expected, f"{verb}: set WIDTH to {len(found)}:\n  {listed}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
@pytest.mark.parametrize(("backend", "verb", "k"), sweep_cases(WIDTH), ids=lambda x: x)
def test_operator_racing_a_pivot_never_unwinds_it(
    verb: str, k: int, scenario: Scenario, backend: str, fresh_url: FreshUrl
) -> None:
    boundaries = census(verb, backend, fresh_url)
    assert k < len(boundaries), f"{verb} has {len(boundaries)} free boundaries: fix WIDTH"
    with Interleaving(fresh_url(), sagas=[races.ORDER]) as run:
        saga_id, header, problems = race(run, verb, boundaries[k], scenario)
        problems += races.pivot_unwound(run, saga_id) + races.unsettled(run, saga_id)
    races.verdict(header, problems)


def race(
    run: Interleaving, verb: str, target: Boundary, scenario: Scenario
) -> tuple[str, str, list[str]]:
    """Carry out the interleaving: the saga's id, a header naming the interleaving, and
    what the actors did wrong."""
    owner, saga_id = owner_before_pivot(run, scenario)
    op = races.operator(run, verb, saga_id)
    before = dump(run.url, saga_id)
    at = op.run_until(target.index)
    assert at is not None, f"{verb} finished before {target}: {op}"
    assert at.sql == target.sql, f"census mismatch: {at} is not {target}"
    paused = dump(run.url, saga_id)
    scenario.advance(run, owner, saga_id)
    resumed = dump(run.url, saga_id)
    op.run_to_end()
    after = dump(run.url, saga_id)
    if not owner.done:
        owner.run_to_end()
    header = (
        f"saga {saga_id}: {verb} paused at {target}, owner {scenario.name}; "
        f"{verb} {op.outcome}, owner {owner.outcome}"
    )
    problems = races.bad_outcome(verb, op.error, races.VERB_OUTCOMES)
    problems += races.bad_outcome("the owner", owner.error, races.OWNER_OUTCOMES)
    if races.refused(op.error):
        problems += races.changed(before, paused, f"refused {verb}, before its pause,")
        problems += races.changed(resumed, after, f"refused {verb}, after its pause,")
    return saga_id, header, problems
