"""A recoverer that asked a reconcile function, then paused past its lease, racing the
recoverer that took the saga over, on SQLite and PostgreSQL.

``charge`` died inside its action after the ledger recorded the charge. Recoverer A
claims the saga, asks the ledger (done), and is paused just before it records the
answer, its lease renewals held; the lease is expired on purpose and recoverer B takes
the saga over and finishes it. When A goes on, its write is fenced: it records nothing,
the saga stays as B left it, and the charge happened once.
"""

from __future__ import annotations

import pytest

from saga import Reconciled, Saga, SagaStatus, StepContext
from tests.crash.invariants import check_history
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.integration.steps import Crash
from tests.integration.support import expire_lease
from tests.interleave import Interleaving

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

LEDGER: dict[str, int] = {}
DIE = {"charge": False}
ORDER = Saga("reconcile-race-order")


@ORDER.step()
def charge(ctx: StepContext) -> dict[str, int]:
    LEDGER[ctx.idempotency_key] = LEDGER.get(ctx.idempotency_key, 0) + 1
    if DIE["charge"]:
        DIE["charge"] = False
        raise Crash("died after the ledger recorded the charge")
    return {"charged": 1}


@charge.reconcile
def charge_happened(ctx: StepContext) -> Reconciled:
    times = LEDGER.get(ctx.idempotency_key)
    return Reconciled.not_done() if times is None else Reconciled.done({"charged": times})


@ORDER.step()
def ship(ctx: StepContext) -> str:
    return "shipped"


def test_a_recoverer_paused_past_its_lease_records_nothing_of_its_answer(
    backend: str, fresh_url: FreshUrl
) -> None:
    LEDGER.clear()
    with Interleaving(fresh_url(), sagas=[ORDER]) as run:
        DIE["charge"] = True
        with pytest.raises(Crash):
            run.observer.run(ORDER)
        (stuck,) = run.observer.list()
        expire_lease(run.observer, stuck.id)

        coord_a = run.coordinator(lease_ttl=60.0)
        a = run.actor("recoverer A", lambda: coord_a.recover_saga(stuck.id), coord_a)
        a.hold_heartbeat()
        at = a.run_until(lambda b: b.writes_step("charge", "succeeded"))
        assert at is not None, a
        expire_lease(run.observer, stuck.id)  # A paused past its lease
        coord_b = run.coordinator()
        b = run.actor("recoverer B", lambda: coord_b.recover_saga(stuck.id), coord_b)
        b.run_to_end()
        assert b.outcome == "returned", b
        finished = dump(run.url, stuck.id)

        a.release_heartbeat()
        a.run_to_end()

        assert dump(run.url, stuck.id) == finished, f"{backend}: the fenced recoverer wrote"
        view = run.observer.get(stuck.id)
        assert view.status is SagaStatus.COMPLETED
        assert sum(LEDGER.values()) == 1  # charged once: nobody ran it again
        check_history(view, run.observer.store.events(stuck.id))
