"""``coord.retry`` and ``coord.skip``: a saga that failed past its pivot runs forward
again once its cause is fixed (the failed step with a fresh attempt budget, its numbers
going on, then the rest), or goes on with that step's result recorded as done by hand.
Everything else is refused and left as it was."""

from __future__ import annotations

import asyncio

import pytest

from saga import (
    AsyncCoordinator,
    ConfigurationError,
    Coordinator,
    DefinitionError,
    OperationRefusedError,
    PayloadError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
    admin,
)
from tests.integration.support import assert_history_replays, fast, kinds


class Outage:
    """A participant that is down until the test fixes it; it notes every call."""

    def __init__(self) -> None:
        self.down = True
        self.calls: list[tuple[str, int]] = []

    def step(self, ctx: StepContext) -> str:
        self.calls.append((ctx.step, ctx.attempt))
        if self.down and ctx.step == "invoice":
            raise RuntimeError("invoice service down")
        return ctx.step


def _order(outage: Outage, name: str, attempts: int = 2) -> Saga:
    saga = Saga(name)
    saga.step(name="charge", retry=fast(attempts))(outage.step).compensation()(outage.step)
    saga.step(name="ship", pivot=True, retry=fast(attempts))(outage.step)
    saga.step(name="invoice", retry=fast(attempts, retry_on=(RuntimeError,)))(outage.step)
    saga.step(name="notify", retry=fast(attempts))(outage.step)
    return saga


def _failed(coord: Coordinator, saga: Saga) -> str:
    with pytest.raises(SagaFailed) as raised:
        coord.run(saga, key="order-1")
    assert raised.value.status is SagaStatus.FAILED
    return raised.value.saga_id


def test_retry_runs_the_failed_step_again_and_then_the_rest(coord: Coordinator) -> None:
    outage = Outage()
    saga_id = _failed(coord, _order(outage, "retry-fixed"))
    assert outage.calls == [("charge", 1), ("ship", 1), ("invoice", 1), ("invoice", 2)]
    outage.down = False  # the fix is deployed

    view = coord.retry(saga_id)

    assert view.status is SagaStatus.COMPLETED
    # The steps before it are not run again; the failed one goes on counting attempts.
    assert outage.calls[4:] == [("invoice", 3), ("notify", 1)]
    assert view.step("invoice").status is StepStatus.SUCCEEDED
    assert view.step("invoice").attempt == 3
    assert view.error is None  # nothing left to act on; the failure stays in the history
    assert view.forward_error == "RuntimeError: invoice service down"
    retried = [e for e in coord.history(saga_id) if e.kind == "operator_action"]
    assert [(e.detail or {}).get("action") for e in retried] == ["retry"]
    assert "by" in (retried[0].detail or {})
    assert kinds(coord, saga_id)[-3:] == ["step_started", "step_succeeded", "saga_completed"]
    assert_history_replays(coord, saga_id)
    # A re-run of the key now answers the completed saga.
    assert coord.run(_order(outage, "retry-fixed"), key="order-1").status is SagaStatus.COMPLETED


def test_each_retry_gives_the_step_its_whole_budget_again(coord: Coordinator) -> None:
    outage = Outage()
    saga = _order(outage, "retry-budget", attempts=2)
    saga_id = _failed(coord, saga)

    with pytest.raises(SagaFailed) as again:  # not fixed yet: two more attempts, then failed
        coord.retry(saga_id)
    assert again.value.status is SagaStatus.FAILED
    assert again.value.failed_step == "invoice"
    assert [a for s, a in outage.calls if s == "invoice"] == [1, 2, 3, 4]
    assert coord.get(saga_id).step("invoice").attempt == 4
    assert coord.get(saga_id).step("charge").status is StepStatus.SUCCEEDED  # nothing undone

    outage.down = False
    assert coord.retry(saga_id).status is SagaStatus.COMPLETED
    assert [a for s, a in outage.calls if s == "invoice"] == [1, 2, 3, 4, 5]
    assert_history_replays(coord, saga_id)


def test_retry_refuses_what_is_not_a_forward_failure(coord: Coordinator) -> None:
    outage = Outage()
    outage.down = False
    done = coord.run(_order(outage, "retry-refusals"), key="done")
    before = coord.history(done.id)
    with pytest.raises(OperationRefusedError, match="completed; retry is for failed sagas"):
        coord.retry(done.id)
    assert coord.history(done.id) == before

    undo_fails = Saga("retry-compensation-failed")

    @undo_fails.step()
    def reserve(ctx: StepContext) -> str:
        return "r"

    @reserve.compensation(retry=fast(1))
    def release(ctx: StepContext) -> None:
        raise RuntimeError("cannot release")

    @undo_fails.step(retry=fast(1))
    def pay(ctx: StepContext) -> None:
        raise RuntimeError("declined")

    with pytest.raises(SagaFailed) as raised:
        coord.run(undo_fails)
    failed = coord.get(raised.value.saga_id)
    assert failed.status is SagaStatus.FAILED
    before = coord.history(failed.id)
    with pytest.raises(OperationRefusedError, match="failed while compensating"):
        coord.retry(failed.id)
    assert coord.history(failed.id) == before
    assert coord.get(failed.id).epoch == failed.epoch


def test_retry_through_the_admin_verbs_and_by_id_prefix(coord: Coordinator) -> None:
    outage = Outage()
    saga_id = _failed(coord, _order(outage, "retry-admin"))
    outage.down = False
    assert admin.retry(coord, saga_id[:8]).status is SagaStatus.COMPLETED
    assert "retry" in admin.VERBS


def test_async_retry(db_url: str) -> None:
    outage = Outage()
    saga = _order(outage, "retry-async")

    async def scenario() -> SagaStatus:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(SagaFailed) as raised:
                await coord.run(saga, key="async-order")
            outage.down = False
            return (await coord.retry(raised.value.saga_id)).status

    assert asyncio.run(scenario()) is SagaStatus.COMPLETED
    assert outage.calls[-2:] == [("invoice", 3), ("notify", 1)]


# -- skip: a failed step done by hand -------------------------------------------------------


def test_skip_records_the_result_done_by_hand_and_goes_on(coord: Coordinator) -> None:
    outage = Outage()
    saga_id = _failed(coord, _order(outage, "skip-by-hand"))
    calls_before = list(outage.calls)

    view = coord.skip(saga_id, step="invoice", result={"invoice": "INV-7"}, reason="sent by hand")

    assert view.status is SagaStatus.COMPLETED
    assert outage.calls[len(calls_before) :] == [("notify", 1)]  # invoice itself not run
    invoice = view.step("invoice")
    assert invoice.status is StepStatus.SUCCEEDED
    assert invoice.result == {"invoice": "INV-7"}
    history = coord.history(saga_id)
    action = next(e for e in history if e.kind == "operator_action")
    assert (action.detail or {})["action"] == "skip"
    assert (action.detail or {})["reason"] == "sent by hand"
    done = next(e for e in history if e.kind == "step_succeeded" and e.step == "invoice")
    assert (done.detail or {})["reason"] == "sent by hand"
    assert "marked_by" in (done.detail or {})
    assert_history_replays(coord, saga_id)


def test_skip_refuses_a_step_that_did_not_fail_and_changes_nothing(coord: Coordinator) -> None:
    outage = Outage()
    saga_id = _failed(coord, _order(outage, "skip-refused"))
    before = coord.history(saga_id)
    with pytest.raises(OperationRefusedError, match=r"step 'ship' .* did not fail"):
        coord.skip(saga_id, step="ship", result=None, reason="r")
    with pytest.raises(OperationRefusedError, match="did not fail; the failed steps: invoice"):
        coord.skip(saga_id, step="nope", result=None, reason="r")
    with pytest.raises(ConfigurationError, match="reason"):
        coord.skip(saga_id, step="invoice", result=None, reason=" ")
    with pytest.raises(PayloadError):
        coord.skip(saga_id, step="invoice", result=float("nan"), reason="r")
    assert coord.history(saga_id) == before
    assert coord.get(saga_id).status is SagaStatus.FAILED


def test_async_skip(db_url: str) -> None:
    outage = Outage()
    saga = _order(outage, "skip-async")

    async def scenario() -> SagaStatus:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(SagaFailed) as raised:
                await coord.run(saga, key="async-skip")
            view = await coord.skip(raised.value.saga_id, step="invoice", reason="by hand")
            return view.status

    assert asyncio.run(scenario()) is SagaStatus.COMPLETED


# -- versions side by side ------------------------------------------------------------------


def _versioned(outage: Outage, name: str, version: int, extra: bool = False) -> Saga:
    saga = Saga(name, version=version)
    saga.step(name="charge", retry=fast(1))(outage.step).compensation()(outage.step)
    saga.step(name="ship", pivot=True, retry=fast(1))(outage.step)
    saga.step(name="invoice", retry=fast(1, retry_on=(RuntimeError,)))(outage.step)
    if extra:
        saga.step(name="survey", retry=fast(1))(outage.step)
    return saga


def test_retry_runs_the_version_the_saga_started_with(db_url: str) -> None:
    outage = Outage()
    v1 = _versioned(outage, "retry-versions", 1)
    with Coordinator(db_url) as coord:
        coord.register(v1)
        saga_id = _failed(coord, v1)
    outage.down = False
    v2 = _versioned(outage, "retry-versions", 2, extra=True)  # the fix shipped as version 2
    with Coordinator(db_url) as coord:
        coord.register(_versioned(outage, "retry-versions", 1), v2)  # side by side
        view = coord.retry(saga_id)
    assert view.status is SagaStatus.COMPLETED
    assert (view.version, view.fingerprint) == (1, v1.fingerprint)
    assert "survey" not in [step for step, _ in outage.calls]  # version 2's step: not run


def test_retry_under_a_definition_changed_in_place_is_refused_naming_both(db_url: str) -> None:
    outage = Outage()
    v1 = _versioned(outage, "retry-in-place", 1)
    with Coordinator(db_url) as coord:
        coord.register(v1)
        saga_id = _failed(coord, v1)
        before = coord.history(saga_id)
    edited = _versioned(outage, "retry-in-place", 1, extra=True)  # same version, new steps
    with Coordinator(db_url) as coord:
        coord.register(edited)
        with pytest.raises(DefinitionError, match="its steps changed in place") as refused:
            coord.retry(saga_id)
        assert v1.fingerprint in str(refused.value)
        assert edited.fingerprint in str(refused.value)
        assert coord.history(saga_id) == before
