"""``coord.retry(id, from_step=S)``: a saga that failed past its pivot runs step ``S`` again
(its effect checked by the operator), then every step after it, in order; only where each
step from there that already succeeded is declared idempotent and none is a pivot.
Everything else is refused and leaves the saga as it was."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    OperationRefusedError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
    admin,
)
from tests.integration.support import assert_history_replays, fast


class Warehouse:
    """Participants that note each call. ``label`` prints the wrong label until fixed;
    ``invoice`` refuses a wrong label (the failure that stops the saga)."""

    def __init__(self) -> None:
        self.fixed = False
        self.calls: list[tuple[str, int]] = []

    def step(self, ctx: StepContext) -> Any:
        self.calls.append((ctx.step, ctx.attempt))
        if ctx.step == "label":
            return "label-v2" if self.fixed else "label-v1"
        if ctx.step == "invoice" and ctx.results["label"] != "label-v2":
            raise RuntimeError(f"invoice refuses {ctx.results['label']}")
        return ctx.step


def order(warehouse: Warehouse, name: str, *, label_idempotent: bool = True) -> Saga:
    """charge, ship (pivot), label and pack (idempotent), invoice, notify."""
    saga = Saga(name)
    step = warehouse.step
    saga.step(name="charge", retry=fast(2))(step).compensation()(step)
    saga.step(name="ship", pivot=True, retry=fast(2))(step)
    saga.step(name="label", idempotent=label_idempotent, retry=fast(2))(step)
    saga.step(name="pack", idempotent=True, retry=fast(2))(step)
    saga.step(name="invoice", retry=fast(2, retry_on=(RuntimeError,)))(step)
    saga.step(name="notify", retry=fast(2))(step)
    return saga


def failed(coord: Coordinator, saga: Saga, key: str = "order-1") -> str:
    with pytest.raises(SagaFailed) as raised:
        coord.run(saga, key=key)
    assert raised.value.status is SagaStatus.FAILED
    assert raised.value.failed_step == "invoice"
    return raised.value.saga_id


def test_retry_from_runs_that_step_and_every_later_one_again_in_order(
    coord: Coordinator,
) -> None:
    warehouse = Warehouse()
    saga_id = failed(coord, order(warehouse, "from-label"))
    assert warehouse.calls[-2:] == [("invoice", 1), ("invoice", 2)]
    warehouse.fixed = True  # the label bug is fixed; the operator checked the old label
    before = len(warehouse.calls)

    view = coord.retry(saga_id, from_step="label")

    assert view.status is SagaStatus.COMPLETED
    # In order, attempt numbers going on; nothing before the chosen step runs again.
    assert warehouse.calls[before:] == [("label", 2), ("pack", 2), ("invoice", 3), ("notify", 1)]
    assert view.step("label").result == "label-v2"
    assert [view.step(n).status for n in ("label", "pack", "invoice")] == [StepStatus.SUCCEEDED] * 3
    history = coord.history(saga_id)
    action = next(e for e in history if e.kind == "operator_action")
    assert (action.detail or {})["action"] == "retry"
    assert (action.detail or {})["from_step"] == "label"
    reset = [e for e in history if e.kind == "step_reset"]
    assert [(e.step, (e.detail or {})["was"]) for e in reset] == [
        ("pack", "succeeded"),
        ("invoice", "failed"),
    ]
    assert all((e.detail or {})["from_step"] == "label" for e in reset)
    assert_history_replays(coord, saga_id)


def test_a_step_run_again_gets_its_whole_budget_after_the_attempts_it_made(
    coord: Coordinator,
) -> None:
    warehouse = Warehouse()
    saga_id = failed(coord, order(warehouse, "from-budget"))
    # Not fixed: label runs again (attempt 2), invoice gets two fresh attempts (3 and 4)
    # although its policy allows two in all, and the saga fails past its pivot again.
    with pytest.raises(SagaFailed) as again:
        coord.retry(saga_id, from_step="label")
    assert again.value.status is SagaStatus.FAILED
    assert [a for s, a in warehouse.calls if s == "invoice"] == [1, 2, 3, 4]
    assert coord.get(saga_id).step("charge").status is StepStatus.SUCCEEDED  # nothing undone
    warehouse.fixed = True
    assert coord.retry(saga_id, from_step="label").status is SagaStatus.COMPLETED
    assert [a for s, a in warehouse.calls if s == "label"] == [1, 2, 3]
    assert_history_replays(coord, saga_id)


@pytest.mark.parametrize(
    ("step", "why"),
    [
        ("ship", r"step 'ship' .* is its pivot and acted: a pivot is never run again"),
        ("charge", r"step 'charge' .* not declared idempotent"),
        ("nope", r"has no step 'nope'; its steps: charge, ship, label, pack, invoice, notify"),
        ("notify", r"step 'notify' .* has not run; retry runs it in turn"),
    ],
)
def test_retry_from_refuses_what_must_not_run_again_and_changes_nothing(
    coord: Coordinator, step: str, why: str
) -> None:
    warehouse = Warehouse()
    saga_id = failed(coord, order(warehouse, f"from-refused-{step}"))
    before, epoch = coord.history(saga_id), coord.get(saga_id).epoch
    with pytest.raises(OperationRefusedError, match=why):
        coord.retry(saga_id, from_step=step)
    assert coord.history(saga_id) == before
    assert coord.get(saga_id).epoch == epoch
    assert coord.get(saga_id).status is SagaStatus.FAILED


def test_a_succeeded_step_not_declared_idempotent_is_not_run_again(coord: Coordinator) -> None:
    warehouse = Warehouse()
    saga_id = failed(coord, order(warehouse, "from-not-idempotent", label_idempotent=False))
    before = coord.history(saga_id)
    with pytest.raises(OperationRefusedError, match=r"step 'label' .* not declared idempotent"):
        coord.retry(saga_id, from_step="label")
    assert coord.history(saga_id) == before
    # From a later step whose followers are idempotent or failed, it goes.
    warehouse.fixed = True
    with pytest.raises(SagaFailed):  # the old label stays: invoice refuses it again
        coord.retry(saga_id, from_step="pack")
    assert [s for s, _ in warehouse.calls[-3:]] == ["pack", "invoice", "invoice"]


def test_retry_from_the_failed_step_itself_is_a_plain_retry(coord: Coordinator) -> None:
    warehouse = Warehouse()
    saga_id = failed(coord, order(warehouse, "from-failed"))
    warehouse.fixed = True
    with pytest.raises(SagaFailed):  # label-v1 is still recorded: invoice refuses it
        coord.retry(saga_id, from_step="invoice")
    assert [e.kind for e in coord.history(saga_id)].count("step_reset") == 0


def test_retry_from_through_admin_and_a_filter(coord: Coordinator) -> None:
    warehouse = Warehouse()
    first = failed(coord, order(warehouse, "from-admin"), key="a")
    second = failed(coord, order(warehouse, "from-admin"), key="b")
    warehouse.fixed = True
    assert admin.retry(coord, first[:8], from_step="label").status is SagaStatus.COMPLETED

    verb = admin.verb_with("retry", {"from_step": "label"})
    targets = admin.select_sagas(coord, admin.Selection.parse(name="from-admin"))
    report = admin.act_on_many(coord, targets, verb)
    assert [(i.saga_id, i.outcome) for i in report.items] == [
        (second, admin.Outcome.DONE),
        (first, admin.Outcome.REFUSED),  # completed already
    ]
    assert report.action == "retry"
    with pytest.raises(Exception, match="--from goes with retry"):
        admin.verb_with("compensate", {"from_step": "label"})


def test_async_retry_from(db_url: str) -> None:
    warehouse = Warehouse()
    saga = order(warehouse, "from-async")

    async def scenario() -> SagaStatus:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(SagaFailed) as raised:
                await coord.run(saga, key="async-order")
            warehouse.fixed = True
            return (await coord.retry(raised.value.saga_id, from_step="label")).status

    assert asyncio.run(scenario()) is SagaStatus.COMPLETED
    assert warehouse.calls[-4:] == [("label", 2), ("pack", 2), ("invoice", 3), ("notify", 1)]
