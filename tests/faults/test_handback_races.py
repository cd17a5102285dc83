"""The hand-back of a compensation that waits for its next attempt, against a recoverer
that runs at any of the owner's free statement boundaries (tests/interleave.py): before
the hand-back the owner's lease is live, after it the lease is released only until the
next attempt is due, so at no point does the recoverer take the saga or retry its
compensation early; the owner always hands back. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from saga import (
    Coordinator,
    RetryPolicy,
    Saga,
    SagaStatus,
    StepContext,
)
from tests.faults.conftest import FreshUrl
from tests.interleave import Actor, Interleaving

NEXT_WAIT = 600.0
REFUNDS: list[int] = []

SAGA = Saga("handback-race")


@SAGA.step()
def charge(ctx: StepContext) -> str:
    return "charged"


@charge.compensation(
    retry=RetryPolicy(
        max_attempts=5,
        initial_delay=NEXT_WAIT,
        max_delay=NEXT_WAIT,
        jitter=0,
        retry_on=(Exception,),
    )
)
def refund(ctx: StepContext) -> None:
    REFUNDS.append(ctx.attempt)
    raise ConnectionError("bank unreachable")


@SAGA.step(retry=RetryPolicy(max_attempts=1))
def ship(ctx: StepContext) -> None:
    raise RuntimeError("no courier")


def _owner(run: Interleaving) -> tuple[Actor, Coordinator]:
    coord = run.coordinator()
    return run.actor("owner", lambda: coord.run(SAGA, key="k"), coord), coord


def test_a_recoverer_at_any_point_of_a_hand_back_leaves_the_waiting_saga_alone(
    fresh_url: FreshUrl,
) -> None:
    with Interleaving(fresh_url(), sagas=[SAGA]) as run:
        dry = _owner(run)[0].run_to_end()
    free = [b for b in dry.boundaries[1:] if b.free]
    handing_back = [b for b in free if b.change is not None and b.change.release]
    assert handing_back, "the sweep must pause the owner just before its hand-back commit"
    targets = [b.index for b in free]
    for index in targets:
        REFUNDS.clear()
        with Interleaving(fresh_url(), sagas=[SAGA]) as run:
            owner, coord = _owner(run)
            assert owner.run_until(index) is not None
            recovering = run.coordinator()
            recoverer = run.actor("recoverer", recovering.recover, recovering).run_to_end()
            owner.run_to_end()
            where = f"recoverer at owner boundary {index}"
            assert recoverer.outcome == "returned", where
            assert recoverer.result.outcomes == [], where
            assert owner.outcome == "SagaHandedBack", where
            (view,) = coord.list()
            assert (view.status, view.owner) == (SagaStatus.COMPENSATING, None), where
            assert REFUNDS == [1], where  # not retried early by the recoverer
