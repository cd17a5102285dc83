"""The owner stalled at any of its statement boundaries while an operator verb takes over.

The other direction of tests/faults/test_operator_races.py. For every free
boundary j of the owner's run of ``reserve -> charge -> ship (pivot) ->
notify`` after the saga's creation (counted by a dry run: :func:`census`),
every verb, on SQLite and PostgreSQL, for an owner whose saga completes and
for one whose ``notify`` fails for good past the pivot:

1. the owner runs up to boundary j and stalls there: its renewals are held, so
   its short lease runs out (polled by the database clock);
2. the verb runs to its end (it may claim the saga, finish it, or be refused);
3. the owner goes on.

If the verb took the saga over (the epoch moved on), the owner must stop with
``LeaseLostError`` and write nothing (its rows are compared before and after
it goes on); otherwise it must finish as an owner may. Either way nothing
before the pivot is compensated once the pivot may have acted, and one
recovery pass leaves the saga terminal, released and with a sound history.
"""

from __future__ import annotations

import pytest

from saga._internal.errors import LeaseLostError
from tests.faults import races
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.faults.races import sweep_cases
from tests.interleave import Boundary, Interleaving

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

PLANS = {"completes": {}, "fails-after-pivot": {"fail": "notify"}}
"""What the owner's saga does left alone: complete, or fail for good past its pivot
(``notify`` raises, which is never retried)."""
WIDTH = {backend: {"completes": 4, "fails-after-pivot": 4} for backend in ("sqlite", "postgres")}
"""Owner boundaries swept after its creation, per backend; :func:`test_the_owner_fits_the_sweep`
fails unless a dry run finds exactly these."""
SHORT = 0.5  # the owner's lease (s): it runs out soon once renewals are held

_CENSUS: dict[tuple[str, str], list[Boundary]] = {}


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    races.reset_calls()


def census(plan: str, backend: str, fresh_url: FreshUrl) -> list[Boundary]:
    """The owner's free boundaries after the saga's creation, from a dry run alone."""
    if (plan, backend) not in _CENSUS:
        with Interleaving(fresh_url(), sagas=[races.ORDER]) as run:
            owner = races.owner_of(run, PLANS[plan], SHORT).run_to_end()
            _CENSUS[plan, backend] = [b for b in owner.boundaries[1:] if b.free]
    return _CENSUS[plan, backend]


@pytest.mark.parametrize("plan", list(PLANS))
def test_the_owner_fits_the_sweep(plan: str, backend: str, fresh_url: FreshUrl) -> None:
    found = census(plan, backend, fresh_url)
    listed = "\n  ".join(map(str, found))
    expected = WIDTH[backend][plan]
    assert len(found) == expected, f"set WIDTH to {len(found)}:\n  {listed}"


@pytest.mark.parametrize(("backend", "plan", "j"), sweep_cases(WIDTH), ids=lambda x: x)
@pytest.mark.parametrize("verb", list(races.VERBS))
def test_a_stalled_owner_is_fenced_by_any_verb_that_takes_over(
    verb: str, plan: str, j: int, backend: str, fresh_url: FreshUrl
) -> None:
    boundaries = census(plan, backend, fresh_url)
    assert j < len(boundaries), f"the owner has {len(boundaries)} free boundaries: fix WIDTH"
    with Interleaving(fresh_url(), sagas=[races.ORDER]) as run:
        saga_id, header, problems = takeover(run, verb, PLANS[plan], boundaries[j])
        problems += races.pivot_unwound(run, saga_id) + races.unsettled(run, saga_id)
    races.verdict(header, problems)


def takeover(
    run: Interleaving, verb: str, data: dict[str, str], target: Boundary
) -> tuple[str, str, list[str]]:
    """Stall the owner at ``target``, run the verb, let the owner go on: the saga's id,
    a header naming the interleaving, and what the actors did wrong."""
    owner = races.owner_of(run, data, SHORT)
    at = owner.run_until(target.index)
    assert at is not None, f"the owner finished before {target}: {owner}"
    assert at.sql == target.sql, f"census mismatch: {at} is not {target}"
    created = owner.boundaries[0].change
    assert created is not None
    saga_id = created.saga_id
    run.wait_lease_expired(saga_id)
    epoch = _epoch(run, saga_id)
    op = races.operator(run, verb, saga_id).run_to_end()
    after_verb = dump(run.url, saga_id)
    took_over = _epoch(run, saga_id) > epoch
    owner.run_to_end()
    header = (
        f"saga {saga_id}: owner stalled at {target}; {verb} {op.outcome} "
        f"({'took over' if took_over else 'did not take over'}), then owner {owner.outcome}"
    )
    problems = races.bad_outcome(verb, op.error, races.VERB_OUTCOMES)
    if took_over:
        problems += races.bad_outcome("the fenced owner", owner.error, (LeaseLostError,))
        problems += races.changed(after_verb, dump(run.url, saga_id), "the fenced owner")
    else:
        problems += races.bad_outcome("the owner", owner.error, races.OWNER_OUTCOMES[:2])
    return saga_id, header, problems


def _epoch(run: Interleaving, saga_id: str) -> int:
    record = run.observer.store.load(saga_id)
    assert record is not None
    return record.epoch
