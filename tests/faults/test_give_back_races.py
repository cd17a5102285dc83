"""A worker giving back a saga it claimed ahead and never started (``saga worker``: the
saga waited past its patience, or the worker is stopping) racing another process that
takes the saga over in the meantime.

The give-back reads the saga, then releases it in a commit fenced by the epoch it read.
For every free boundary of the give-back (counted by a dry run), on SQLite and
PostgreSQL, it stalls there while its lease runs out (by the database clock) and a
recoverer claims the saga and finishes it; then it goes on. Whatever the boundary, the
taker's saga must stay the taker's: completed, no ``lease_released`` written after the
taker's claim, and the give-back ends quietly (it read a saga no longer its own) or is
fenced (``LeaseLostError``, which the worker's loop takes as "nothing to give back").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from saga.adapters.sql import tables
from sqlalchemy import update

from saga import Coordinator, Saga, SagaStatus, StepContext
from tests.faults.conftest import FreshUrl
from tests.interleave import Boundary, Interleaving, free_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


class Crash(BaseException):
    """Escapes every ``except Exception``: the saga is left as a killed process leaves it."""


def _saga() -> Saga:
    saga = Saga("give-back-race")

    @saga.step()
    def only(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise Crash("its first owner dies here")
        return "done"

    return saga


def _stuck(run: Interleaving, saga: Saga) -> tuple[Coordinator, str]:
    """A stuck saga claimed by a worker with a short lease, as a claim ahead leaves it."""
    with pytest.raises(Crash):
        run.observer.run(saga, key="k")
    record = run.observer.store.find(saga.name, "k")
    assert record is not None
    _expire(run, record.id)  # its dead owner's lease, long run out
    worker = run.coordinator(lease_ttl=0.5)
    assert worker.driver.run(worker.engine.claim_stuck(1)) == [record.id]
    return worker, record.id


def _expire(run: Interleaving, saga_id: str) -> None:
    with run.observer.store.engine.begin() as connection:  # type: ignore[attr-defined]
        connection.execute(
            update(tables.instances)
            .where(tables.instances.c.id == saga_id)
            .values(lease_expires_at=0.0)
        )


def _giving_back(worker: Coordinator, saga_id: str) -> Callable[[], None]:
    """What the worker does for a saga it gives back (``saga.admin.worker``)."""
    return lambda: worker.driver.run(worker.engine.release(saga_id))


def _boundaries(fresh_url: FreshUrl) -> list[Boundary]:
    saga = _saga()
    with Interleaving(fresh_url(), sagas=[saga]) as run:
        worker, saga_id = _stuck(run, saga)
        giver = run.actor(
            "give-back", lambda: worker.driver.run(worker.engine.release(saga_id)), worker
        )
        giver.run_to_end()
        assert giver.outcome == "returned"
        assert run.observer.store.load(saga_id).owner is None  # type: ignore[union-attr]
        return free_until(giver.boundaries, lambda b: b.kind == "hot.commit")


def test_a_give_back_racing_a_takeover_leaves_the_saga_to_the_taker(
    fresh_url: FreshUrl,
) -> None:
    sweep = _boundaries(fresh_url)
    assert sweep[-1].kind == "hot.commit"  # the fenced release itself is in the sweep
    for boundary in sweep:
        saga = _saga()
        with Interleaving(fresh_url(), sagas=[saga]) as run:
            worker, saga_id = _stuck(run, saga)
            taker = run.coordinator()
            giver = run.actor("give-back", _giving_back(worker, saga_id), worker)
            giver.hold_heartbeat()
            assert giver.run_until(boundary.index) is not None
            run.wait_lease_expired(saga_id)
            recoverer = run.actor("taker", taker.recover, taker).run_to_end()
            assert recoverer.outcome == "returned", boundary
            giver.run_to_end()
            assert giver.outcome in ("returned", "LeaseLostError"), (boundary, giver.error)
            if boundary.kind == "hot.commit":  # read as its own, then fenced out
                assert giver.outcome == "LeaseLostError", boundary
            done = run.observer.store.load(saga_id)
            assert done is not None
            assert done.status is SagaStatus.COMPLETED, boundary
            kinds = [event.kind for event in run.observer.history(saga_id)]
            claims = [i for i, kind in enumerate(kinds) if kind == "lease_claimed"]
            assert "lease_released" not in kinds[claims[-1] :], (boundary, kinds)
