"""recover(): claim expired sagas and finish them; one saga's problem never stops the rest."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    RecoveryReport,
    Saga,
    SagaEvent,
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
    kinds,
    set_compensation_ref,
    wait_until_expired,
)

LOG: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    LOG.clear()


def _crashing(name: str, on_crash: Any = "resume") -> Saga:
    """one -> two (dies on its first attempt) -> three, each compensatable."""
    saga = Saga(name, on_crash=on_crash)

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
            raise Crash("the process dies inside 'two'")
        return "2"

    @two.compensation
    def undo_two(ctx: StepContext) -> None:
        LOG.append(("undo_two", ctx.result))

    @saga.step()
    def three(ctx: StepContext) -> str:
        LOG.append(("three", ctx.attempt))
        return "3"

    return saga


def _crash(coord: Coordinator, saga: Saga) -> str:
    with pytest.raises(Crash):
        coord.run(saga)
    return coord.list(limit=1)[0].id


def test_recover_claims_expired_sagas_and_resumes_them_forward(
    make_coord: MakeCoordinator,
) -> None:
    saga = _crashing("recover-forward")
    # A lease far longer than the test: "live" must not depend on the machine's speed.
    dead = make_coord(lease_ttl=600)
    saga_id = _crash(dead, saga)
    recoverer = make_coord(lease_ttl=0.3)
    # While the lease is live, nothing is claimed.
    assert recoverer.recover().outcomes == []
    expire_lease(recoverer, saga_id)  # as if the dead process's lease had run out
    report = recoverer.recover()
    assert [(o.saga_id, o.status, o.error) for o in report.outcomes] == [
        (saga_id, SagaStatus.COMPLETED, None)
    ]
    assert report.ok
    assert LOG == [("one", 1), ("two", 1), ("two", 2), ("three", 1)]
    view = recoverer.get(saga_id)
    assert view.status is SagaStatus.COMPLETED
    assert view.epoch == 2
    assert view.step("two").attempt == 2
    claims = [e for e in recoverer.history(saga_id) if e.kind == "lease_claimed"]
    assert [e.epoch for e in claims] == [2]
    assert_history_replays(recoverer, saga_id)
    assert recoverer.recover().outcomes == []


def test_on_crash_compensate_unwinds_instead(make_coord: MakeCoordinator) -> None:
    saga = _crashing("recover-on-crash", on_crash="compensate")
    dead = make_coord(lease_ttl=0.3)
    saga_id = _crash(dead, saga)
    recoverer = make_coord(lease_ttl=0.3)
    wait_until_expired(recoverer, saga_id)
    report = recoverer.recover()
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
    # 'two' may have acted before the crash: compensated with no result, then 'one'.
    assert LOG == [("one", 1), ("two", 1), ("undo_two", None), ("undo_one", "1")]
    assert recoverer.get(saga_id).status is SagaStatus.COMPENSATED
    assert_history_replays(recoverer, saga_id)


def test_recover_with_compensate_unwinds_a_resumable_saga(make_coord: MakeCoordinator) -> None:
    saga = _crashing("recover-compensate-flag")
    dead = make_coord(lease_ttl=0.3)
    saga_id = _crash(dead, saga)
    recoverer = make_coord(lease_ttl=0.3)
    wait_until_expired(recoverer, saga_id)
    assert recoverer.recover(compensate=True).outcomes[0].status is SagaStatus.COMPENSATED
    assert ("three", 1) not in LOG


def test_a_compensating_saga_keeps_compensating(make_coord: MakeCoordinator) -> None:
    saga = Saga("recover-compensating")

    @saga.step()
    def one(ctx: StepContext) -> str:
        LOG.append(("one", ctx.attempt))
        return "1"

    @one.compensation
    def undo_one(ctx: StepContext) -> None:
        LOG.append(("undo_one", ctx.attempt))
        if ctx.attempt == 1:
            raise Crash("the process dies while compensating")

    @saga.step()
    def two(ctx: StepContext) -> str:
        LOG.append(("two", ctx.attempt))
        raise RuntimeError("business failure")

    @two.compensation
    def undo_two(ctx: StepContext) -> None:
        LOG.append(("undo_two", ctx.attempt))

    dead = make_coord(lease_ttl=0.3)
    saga_id = _crash(dead, saga)
    assert dead.get(saga_id).status is SagaStatus.COMPENSATING
    recoverer = make_coord(lease_ttl=0.3)
    wait_until_expired(recoverer, saga_id)
    report = recoverer.recover()
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
    # Nothing went forward again, and 'two' was not compensated twice.
    assert LOG == [("one", 1), ("two", 1), ("undo_two", 1), ("undo_one", 1), ("undo_one", 2)]
    view = recoverer.get(saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("one").compensation_attempt == 2
    assert_history_replays(recoverer, saga_id)


def _abandoned_transfer(coord: Coordinator, name: str) -> str:
    """A context-manager saga whose process died between its two steps."""
    with pytest.raises(Crash), coord.saga(name) as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.refund)
        s.step(steps.credit, "bob", 10, compensate=steps.uncredit)
        raise Crash("the process dies before the block ends")
    return s.id


def test_recover_compensates_running_context_manager_sagas(make_coord: MakeCoordinator) -> None:
    dead = make_coord(lease_ttl=0.3)
    saga_id = _abandoned_transfer(dead, "recover-cm")
    assert dead.get(saga_id).status is SagaStatus.RUNNING
    recoverer = make_coord(lease_ttl=0.3)
    wait_until_expired(recoverer, saga_id)
    report = recoverer.recover()
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
    hold = {"hold": "alice-10", "key": f"{saga_id}:debit"}
    assert steps.CALLS[-2:] == [("uncredit", 10, "bob", 10), ("refund", hold, "alice", 10)]
    view = recoverer.get(saga_id)
    assert [s.status for s in view.steps] == [StepStatus.COMPENSATED, StepStatus.COMPENSATED]
    assert view.epoch == 2
    assert_history_replays(recoverer, saga_id)


@pytest.mark.parametrize(
    "forged",
    [
        "os:system",
        "no_such_module_for_saga_tests:undo",
        "tests.integration.steps:unsafe",  # importable, but neither known nor trusted
    ],
)
def test_an_untrusted_reference_is_refused_and_the_others_recover(
    make_coord: MakeCoordinator, forged: str
) -> None:
    dead = make_coord(lease_ttl=0.3)
    bad = _abandoned_transfer(dead, "recover-forged")
    good = _abandoned_transfer(dead, "recover-good")
    # The older step's reference is forged: no compensation may run, not even the newer one's.
    set_compensation_ref(dead, bad, "debit", forged)
    calls_before = list(steps.CALLS)
    told: list[SagaEvent] = []
    recoverer = make_coord(lease_ttl=0.3)
    recoverer.add_listener(told.append, inline=True)
    wait_until_expired(recoverer, good)
    report = recoverer.recover()

    refusal = [e for e in told if e.kind == "recovery_refused"]
    assert [(e.saga_id, e.durable) for e in refusal] == [(bad, True)]  # told, after its record
    by_id = {o.saga_id: o for o in report.outcomes}
    assert by_id[good].status is SagaStatus.COMPENSATED
    assert by_id[good].error is None
    error = by_id[bad].error
    assert error is not None
    assert forged in error
    assert not report.ok
    assert [o.saga_id for o in report.errors] == [bad]
    good_hold = {"hold": "alice-10", "key": f"{good}:debit"}
    assert steps.CALLS[len(calls_before) :] == [
        ("uncredit", 10, "bob", 10),
        ("refund", good_hold, "alice", 10),
    ]
    refused = [e for e in recoverer.history(bad) if e.kind == "recovery_refused"]
    assert len(refused) == 1
    assert refused[0].detail is not None
    assert forged in refused[0].detail["error"]
    view = recoverer.get(bad)
    assert view.status is SagaStatus.RUNNING  # nothing recorded was changed
    assert [s.status for s in view.steps] == [StepStatus.SUCCEEDED, StepStatus.SUCCEEDED]
    assert view.owner is None  # released, for a process that trusts the module
    assert_history_replays(recoverer, bad)


def test_trusted_modules_let_a_stored_reference_resolve(make_coord: MakeCoordinator) -> None:
    dead = make_coord(lease_ttl=0.3)
    saga_id = _abandoned_transfer(dead, "recover-trusted")
    set_compensation_ref(dead, saga_id, "debit", "tests.integration.steps:unsafe")
    recoverer = make_coord(lease_ttl=0.3, trusted_modules=["tests.integration"])
    wait_until_expired(recoverer, saga_id)
    report = recoverer.recover()
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
    assert steps.CALLS[-1][0] == "unsafe"


def test_an_unknown_definition_is_reported_and_does_not_stop_the_others(
    make_coord: MakeCoordinator,
) -> None:
    dead = make_coord(lease_ttl=0.3)
    orphan = _crash(dead, _crashing("recover-orphan"))
    survivor = _crash(dead, _crashing("recover-survivor"))
    recoverer = make_coord(lease_ttl=0.3)
    from saga._internal import definition

    definition._catalog.pop(("recover-orphan", 1))  # this "process" never imported that saga
    wait_until_expired(recoverer, survivor)
    report = recoverer.recover()
    by_id = {o.saga_id: o for o in report.outcomes}
    assert "recover-orphan" in (by_id[orphan].error or "")
    assert by_id[survivor].status is SagaStatus.COMPLETED
    assert "recovery_refused" in kinds(recoverer, orphan)
    assert recoverer.get(orphan).status is SagaStatus.RUNNING


def test_the_async_recoverer_refuses_a_forged_reference_too(
    db_url: str, make_coord: MakeCoordinator
) -> None:
    dead = make_coord(lease_ttl=0.3)
    bad = _abandoned_transfer(dead, "recover-forged-async")
    set_compensation_ref(dead, bad, "debit", "os:system")
    calls_before = list(steps.CALLS)
    wait_until_expired(dead, bad)

    async def recover() -> RecoveryReport:
        async with AsyncCoordinator(db_url, lease_ttl=0.3) as recoverer:
            return await recoverer.recover()

    report = asyncio.run(recover())
    assert [o.saga_id for o in report.errors] == [bad]
    assert calls_before == steps.CALLS  # not even the newer step's compensation ran
    view = dead.get(bad)
    assert view.status is SagaStatus.RUNNING
    assert "recovery_refused" in kinds(dead, bad)
