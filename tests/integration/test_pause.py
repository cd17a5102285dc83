"""Pause instead of giving up: ``coord.pause`` / ``coord.resume`` and ``on_exhausted``.

A pause holds a running saga at its next step boundary (lease handed back, status
``paused``, nothing compensated); no recoverer claims it; ``resume`` goes on. A step
with ``on_exhausted="pause"`` parks the saga instead of unwinding when its retries
run out. Every test runs on SQLite and PostgreSQL; nothing waits on the clock: the
tests synchronise on events and expire leases (and deadlines) on purpose.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from saga.adapters.sql import tables
from sqlalchemy import update

from saga import (
    Coordinator,
    OperationRefusedError,
    Saga,
    SagaBusyError,
    SagaFailed,
    SagaHandedBack,
    SagaStatus,
    StepContext,
    StepStatus,
)
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import (
    assert_history_replays,
    expire_lease,
    fast,
    kinds,
    sql_store,
)

LOG: list[tuple[str, Any]] = []
OUTAGE: dict[str, bool] = {}


@pytest.fixture(autouse=True)
def _clear() -> None:
    LOG.clear()
    OUTAGE.clear()


def _blocking_saga(name: str, started: threading.Event, go_on: threading.Event) -> Saga:
    """hold (waits for ``go_on``) -> capture."""
    saga = Saga(name)

    @saga.step()
    def hold(ctx: StepContext) -> str:
        LOG.append(("hold", ctx.saga_id))
        started.set()
        assert go_on.wait(30)
        return "held"

    @hold.compensation
    def release(ctx: StepContext) -> None:
        LOG.append(("release", ctx.result))

    @saga.step()
    def capture(ctx: StepContext) -> str:
        LOG.append(("capture", ctx.attempt))
        return "captured"

    return saga


def _crashing_saga(name: str) -> Saga:
    """one -> two (its process dies on attempt 1) -> three."""
    saga = Saga(name)

    @saga.step()
    def one(ctx: StepContext) -> str:
        LOG.append(("one", ctx.attempt))
        return "1"

    @one.compensation
    def undo_one(ctx: StepContext) -> None:
        LOG.append(("undo_one", ctx.result))

    @saga.step()
    def two(ctx: StepContext) -> str:
        LOG.append(("two", ctx.attempt))
        if ctx.attempt == 1:
            raise Crash("dies")
        return "2"

    @saga.step()
    def three(ctx: StepContext) -> str:
        LOG.append(("three", ctx.attempt))
        return "3"

    return saga


def _outage_saga(name: str, **saga_options: Any) -> Saga:
    """reserve -> charge (raises ConnectionError while OUTAGE["charge"]) -> ship; charge
    pauses when its two attempts are used up (unless the saga says so for every step)."""
    saga = Saga(name, **saga_options)
    per_step: dict[str, Any] = {} if saga_options else {"on_exhausted": "pause"}

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        LOG.append(("reserve", ctx.attempt))
        return "r"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        LOG.append(("release", ctx.result))

    @saga.step(retry=fast(2, retry_on=(ConnectionError,)), **per_step)
    def charge(ctx: StepContext) -> str:
        LOG.append(("charge", ctx.attempt))
        if OUTAGE.get("charge"):
            raise ConnectionError("payments down")
        if OUTAGE.get("refuse"):
            raise ValueError("card declined")
        if OUTAGE.get("crash"):
            raise Crash("its process dies")
        return "c"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        LOG.append(("refund", ctx.result))

    @saga.step()
    def ship(ctx: StepContext) -> str:
        LOG.append(("ship", ctx.attempt))
        return "s"

    return saga


def _stuck(make_coord: MakeCoordinator, saga: Saga) -> tuple[Coordinator, str]:
    """A saga whose process died in step two, its lease still live (600 s: "still live"
    never depends on the machine's speed); an operator's coordinator knowing it."""
    dead = make_coord(lease_ttl=600)
    with pytest.raises(Crash):
        dead.run(saga)
    operator = make_coord(lease_ttl=5.0)
    operator.register(saga)
    return operator, operator.list(limit=1)[0].id


def _in_thread(coord: Coordinator, saga: Saga, outcome: list[object]) -> threading.Thread:
    def run() -> None:
        try:
            outcome.append(coord.run(saga))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("same_coordinator", [True, False], ids=["same", "other"])
def test_pause_stops_a_running_saga_at_its_next_step_boundary(
    make_coord: MakeCoordinator, same_coordinator: bool
) -> None:
    runner = make_coord(lease_ttl=5.0)
    operator = runner if same_coordinator else make_coord(lease_ttl=5.0)
    started, go_on = threading.Event(), threading.Event()
    saga = _blocking_saga(f"pause-live-{same_coordinator}", started, go_on)
    operator.register(saga)
    outcome: list[object] = []
    thread = _in_thread(runner, saga, outcome)
    try:
        assert started.wait(30)
        saga_id = str(LOG[0][1])
        view = operator.pause(saga_id)
        # The live owner is not disturbed mid-step: it still holds the lease.
        assert view.status is SagaStatus.PAUSED
        assert view.owner is not None
        assert view.epoch == 1
    finally:
        go_on.set()
        thread.join(30)
    handed = outcome[0]
    assert isinstance(handed, SagaHandedBack), handed
    assert handed.status is SagaStatus.PAUSED
    assert ("capture", 1) not in LOG  # stopped at the boundary
    assert ("release", "held") not in LOG  # nothing compensated
    paused = operator.get(saga_id)
    assert paused.status is SagaStatus.PAUSED
    assert paused.owner is None
    assert paused.step("hold").status is StepStatus.SUCCEEDED
    assert [k for k in kinds(operator, saga_id) if k in ("operator_action", "saga_paused")] == [
        "operator_action",
        "saga_paused",
    ]
    action = next(e for e in operator.history(saga_id) if e.kind == "operator_action")
    assert action.detail is not None
    assert action.detail["action"] == "pause"
    assert "by" in action.detail  # who paused it
    assert_history_replays(operator, saga_id)

    done = operator.resume(saga_id)
    assert done.status is SagaStatus.COMPLETED
    # Started in the commit that learnt of the pause, never run: that attempt counts.
    assert [entry for entry in LOG if entry[0] == "capture"] == [("capture", 2)]
    assert "attempt_not_run" in kinds(operator, saga_id)
    assert_history_replays(operator, saga_id)


def test_pause_of_an_idle_saga_hands_it_back_by_the_operators_claim(
    make_coord: MakeCoordinator,
) -> None:
    operator, saga_id = _stuck(make_coord, _crashing_saga("pause-idle"))
    expire_lease(operator, saga_id)  # its process is gone: nobody would honour a request
    view = operator.pause(saga_id)
    assert view.status is SagaStatus.PAUSED
    assert view.owner is None
    assert view.epoch == 2  # the operator's claim
    assert view.step("two").status is StepStatus.RUNNING  # in doubt: resume re-runs it
    assert "saga_paused" in kinds(operator, saga_id)
    assert LOG == [("one", 1), ("two", 1)]  # nothing ran, nothing compensated

    done = operator.resume(saga_id)
    assert done.status is SagaStatus.COMPLETED
    assert LOG == [("one", 1), ("two", 1), ("two", 2), ("three", 1)]
    assert_history_replays(operator, saga_id)


def test_a_recoverer_never_claims_a_paused_saga(make_coord: MakeCoordinator) -> None:
    operator, saga_id = _stuck(make_coord, _crashing_saga("pause-worker"))
    # Paused while its (dead) owner's lease was still live: the claim waits, the
    # request stands, and a recoverer must leave the saga alone once the lease runs out.
    with_live_lease = operator.pause(saga_id)
    assert with_live_lease.status is SagaStatus.PAUSED
    assert with_live_lease.owner is not None
    expire_lease(operator, saga_id)
    worker = make_coord(lease_ttl=5.0)
    worker.register(_crashing_saga("pause-worker"))
    assert worker.recover().outcomes == []
    assert worker.store.stuck_count() == 0
    with pytest.raises(OperationRefusedError, match="paused"):
        worker.recover_saga(saga_id)
    assert worker.get(saga_id).status is SagaStatus.PAUSED
    assert worker.get(saga_id).epoch == 1
    assert LOG == [("one", 1), ("two", 1)]
    assert [v.id for v in worker.list(status=SagaStatus.PAUSED)] == [saga_id]
    assert worker.store.status_counts().get(SagaStatus.PAUSED) == 1
    assert worker.resume(saga_id).status is SagaStatus.COMPLETED


def test_the_paused_gauge_counts_paused_sagas(make_coord: MakeCoordinator) -> None:
    from saga.metrics import MetricsListener  # the saga[metrics] extra

    coord = make_coord(lease_ttl=5.0)
    metrics = MetricsListener()
    metrics.watch(coord, every=0)  # no cache: each scrape reads the store
    assert metrics.registry.get_sample_value("saga_paused") == 0
    OUTAGE["charge"] = True
    with pytest.raises(SagaHandedBack):
        coord.run(_outage_saga("pause-gauge"))
    assert metrics.registry.get_sample_value("saga_paused") == 1
    assert metrics.registry.get_sample_value("saga_in_flight") == 0


def test_on_exhausted_pause_parks_instead_of_compensating_then_resume_completes(
    coord: Coordinator,
) -> None:
    saga = _outage_saga("pause-exhausted")
    OUTAGE["charge"] = True
    with pytest.raises(SagaHandedBack) as handed:
        coord.run(saga, key="order-1")
    assert handed.value.status is SagaStatus.PAUSED
    assert "charge" in str(handed.value)
    saga_id = handed.value.saga_id
    parked = coord.get(saga_id)
    assert parked.status is SagaStatus.PAUSED
    assert parked.owner is None
    charge = parked.step("charge")
    assert (charge.status, charge.attempt) == (StepStatus.FAILED, 2)
    assert LOG == [("reserve", 1), ("charge", 1), ("charge", 2)]  # nothing compensated
    # The same key again runs nothing: the saga waits for an operator.
    with pytest.raises(SagaHandedBack, match="paused"):
        coord.run(saga, key="order-1")

    OUTAGE.clear()  # the participant is back
    done = coord.resume(saga_id)
    assert done.status is SagaStatus.COMPLETED
    assert done.step("charge").attempt == 3  # attempts keep counting
    assert LOG[3:] == [("charge", 3), ("ship", 1)]
    assert_history_replays(coord, saga_id)


def test_a_resumed_step_gets_its_attempts_again_and_pauses_again(coord: Coordinator) -> None:
    saga = _outage_saga("pause-again", on_exhausted="pause")  # the saga-wide default
    OUTAGE["charge"] = True
    with pytest.raises(SagaHandedBack) as handed:
        coord.run(saga)
    saga_id = handed.value.saga_id
    with pytest.raises(SagaHandedBack) as again:  # the outage goes on
        coord.resume(saga_id)
    assert again.value.status is SagaStatus.PAUSED
    assert [entry for entry in LOG if entry[0] == "charge"] == [("charge", n) for n in (1, 2, 3, 4)]
    assert coord.get(saga_id).status is SagaStatus.PAUSED
    OUTAGE.clear()
    assert coord.resume(saga_id).status is SagaStatus.COMPLETED


def test_the_fresh_attempts_of_a_resume_outlive_the_resuming_process(
    make_coord: MakeCoordinator,
) -> None:
    saga = _outage_saga("pause-resume-dies")
    OUTAGE["charge"] = True
    with pytest.raises(SagaHandedBack) as handed:
        make_coord(lease_ttl=5.0).run(saga)
    saga_id = handed.value.saga_id
    OUTAGE.clear()
    OUTAGE["crash"] = True  # the resumed attempt (3) kills its process
    resumer = make_coord(lease_ttl=600)
    with pytest.raises(Crash):
        resumer.resume(saga_id)
    OUTAGE.clear()
    expire_lease(resumer, saga_id)
    worker = make_coord(lease_ttl=5.0)
    worker.register(saga)
    (outcome,) = worker.recover().outcomes
    # Attempts 3 and 4 are the resume's two: recovery runs the 4th, not gives up.
    assert outcome.status is SagaStatus.COMPLETED
    assert worker.get(saga_id).step("charge").attempt == 4
    assert [entry for entry in LOG if entry[0] == "charge"][-2:] == [("charge", 3), ("charge", 4)]
    assert_history_replays(worker, saga_id)


def test_an_error_the_policy_does_not_retry_still_unwinds(coord: Coordinator) -> None:
    OUTAGE["refuse"] = True  # a business refusal, not an outage: nothing to wait for
    with pytest.raises(SagaFailed) as failed:
        coord.run(_outage_saga("pause-refused"))
    assert failed.value.status is SagaStatus.COMPENSATED
    assert ("release", "r") in LOG


def test_a_paused_saga_can_be_compensated_instead(make_coord: MakeCoordinator) -> None:
    operator = make_coord(lease_ttl=5.0)
    OUTAGE["charge"] = True
    with pytest.raises(SagaHandedBack) as handed:
        operator.run(_outage_saga("pause-then-compensate"))
    view = operator.compensate(handed.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert LOG[-2:] == [("refund", None), ("release", "r")]


def test_a_deadline_passed_while_paused_unwinds_on_resume(coord: Coordinator) -> None:
    OUTAGE["charge"] = True
    with pytest.raises(SagaHandedBack) as handed:
        coord.run(_outage_saga("pause-deadline"), deadline=3600)
    saga_id = handed.value.saga_id
    with sql_store(coord).engine.begin() as connection:  # its hour passed, on purpose
        connection.execute(
            update(tables.instances).where(tables.instances.c.id == saga_id).values(deadline=0.0)
        )
    assert coord.get(saga_id).status is SagaStatus.PAUSED  # a pause never acts by itself
    OUTAGE.clear()
    with pytest.raises(SagaFailed) as failed:
        coord.resume(saga_id)
    assert failed.value.status is SagaStatus.COMPENSATED
    assert ("charge", 3) not in LOG  # nothing runs past the deadline
    assert ("ship", 1) not in LOG
    assert ("release", "r") in LOG


def test_pause_refuses_what_cannot_pause(make_coord: MakeCoordinator) -> None:
    coord = make_coord(lease_ttl=5.0)
    done = coord.run(_outage_saga("pause-refusals"))
    with pytest.raises(OperationRefusedError, match="completed; only a running saga pauses"):
        coord.pause(done.id)
    with pytest.raises(OperationRefusedError, match="only a running or paused saga resumes"):
        coord.resume(done.id)
    with coord.saga("pause-cm") as s:
        s.step(steps.debit, "alice", 1, compensate=steps.refund)
    with pytest.raises(OperationRefusedError, match="context-manager"):
        coord.pause(s.id)


def test_a_paused_saga_still_held_by_its_owner_waits_for_it(
    make_coord: MakeCoordinator,
) -> None:
    operator, saga_id = _stuck(make_coord, _crashing_saga("pause-held"))
    operator.pause(saga_id)  # its owner's lease is live: the pause waits for it
    with pytest.raises(SagaBusyError):
        operator.resume(saga_id)
    # Pausing it again changes nothing while its owner's lease is live, and hands it back
    # once no live process holds it (what a pause killed before its claim left).
    assert operator.pause(saga_id).owner is not None
    expire_lease(operator, saga_id)
    handed = operator.pause(saga_id)
    assert (handed.status, handed.owner, handed.epoch) == (SagaStatus.PAUSED, None, 2)
    with pytest.raises(OperationRefusedError, match="paused already"):
        operator.pause(saga_id)


def test_a_step_reconciled_as_not_done_when_out_of_attempts_pauses_when_asked(
    make_coord: MakeCoordinator,
) -> None:
    from tests.integration.test_reconcile import ONCE, Provider, _crashed, _order

    provider = Provider()
    provider.die = "before"  # its only attempt dies before reaching the provider
    saga = _order(provider, "pause-reconciled", pivot=True, retry=ONCE, on_exhausted="pause")
    coord, saga_id = _crashed(make_coord, saga)
    coord.recover()
    view = coord.get(saga_id)
    # Out of attempts, and the provider says it never charged: parked, nothing undone.
    assert view.status is SagaStatus.PAUSED
    assert view.step("charge").status is StepStatus.FAILED
    assert provider.calls == ["charge#1", "reconcile#1"]
    assert coord.resume(saga_id).status is SagaStatus.COMPLETED
    assert provider.calls[-2:] == ["charge#2", "ship"]
