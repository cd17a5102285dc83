"""What a compensation returns is kept in its ``compensation_done`` event and shown in the
history; a value that cannot be stored is noted there and fails nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from saga import AsyncCoordinator, Coordinator, RetryPolicy, Saga, SagaFailed, StepContext
from saga.cli import app

ONCE = RetryPolicy(max_attempts=1)


class Declined(Exception):
    pass


def _refunds(returned: Any) -> Saga:
    """``charge`` then a ``ship`` that always fails: ``refund`` returns ``returned``."""
    order = Saga(f"undo-result-{id(returned)}-{type(returned).__name__}")

    @order.step
    def charge(ctx: StepContext) -> str:
        return "ch_1"

    @charge.compensation
    def refund(ctx: StepContext) -> Any:
        return returned

    @order.step(retry=ONCE)
    def ship(ctx: StepContext) -> None:
        raise Declined("no courier")

    return order


def _done_detail(coord: Coordinator, saga_id: str) -> Any:
    (done,) = [e for e in coord.history(saga_id) if e.kind == "compensation_done"]
    return done.detail


def _failed_id(run: Any) -> str:
    with pytest.raises(SagaFailed) as failed:
        run()
    return failed.value.saga_id


def test_a_compensations_result_is_kept_and_shown_in_the_history(
    coord: Coordinator, db_url: str
) -> None:
    order = _refunds({"refund": "re_1", "amount": 42})
    saga_id = _failed_id(lambda: coord.run(order, data={}))
    assert _done_detail(coord, saga_id) == {"result": {"amount": 42, "refund": "re_1"}}
    shown = CliRunner().invoke(app, ["--db", db_url, "history", saga_id])
    assert shown.exit_code == 0, shown.output
    assert 'step charge compensated, returning {"amount": 42, "refund": "re_1"}' in shown.output


def test_a_compensation_returning_nothing_keeps_no_detail(coord: Coordinator) -> None:
    saga_id = _failed_id(lambda: coord.run(_refunds(None), data={}))
    assert _done_detail(coord, saga_id) is None


def test_a_result_that_cannot_be_stored_is_noted_and_the_saga_still_compensated(
    coord: Coordinator,
) -> None:
    saga_id = _failed_id(lambda: coord.run(_refunds(object()), data={}))
    detail = _done_detail(coord, saga_id)
    assert list(detail) == ["result_not_kept"]
    assert "result of the compensation of step 'charge'" in detail["result_not_kept"]
    assert coord.get(saga_id).status.value == "compensated"


def test_an_oversized_result_is_noted_not_kept(coord: Coordinator) -> None:
    saga_id = _failed_id(lambda: coord.run(_refunds("x" * 5000), data={}))
    assert "over the payload limit of 4096 bytes" in _done_detail(coord, saga_id)["result_not_kept"]


def test_a_transactional_compensations_result_commits_with_it(coord: Coordinator) -> None:
    order = Saga("undo-result-transactional")

    @order.step(transactional=True)
    def book(ctx: StepContext) -> None:
        ctx.session.execute(text("SELECT 1"))

    @book.compensation
    def unbook(ctx: StepContext) -> dict[str, int]:
        ctx.session.execute(text("SELECT 1"))
        return {"released": 1}

    @order.step(retry=ONCE)
    def pay(ctx: StepContext) -> None:
        raise Declined("card declined")

    saga_id = _failed_id(lambda: coord.run(order, data={}))
    assert _done_detail(coord, saga_id) == {"result": {"released": 1}}


def reserve(sku: str) -> str:
    return f"R-{sku}"


def release(reservation: str, sku: str) -> dict[str, str]:
    return {"released": reservation}


def test_a_context_manager_sagas_compensation_result_is_kept(coord: Coordinator) -> None:
    def run() -> None:
        with coord.saga("undo-result-cm", key="cm-1") as s:
            s.step(reserve, "mug", compensate=release)
            raise Declined("the caller changed its mind")

    saga_id = _failed_id(run)
    assert _done_detail(coord, saga_id) == {"result": {"released": "R-mug"}}


def test_an_async_compensations_result_is_kept(db_url: str) -> None:
    order = Saga("undo-result-async")

    @order.step
    async def charge(ctx: StepContext) -> str:
        return "ch_1"

    @charge.compensation
    async def refund(ctx: StepContext) -> dict[str, str]:
        await asyncio.sleep(0)
        return {"refund": "re_2"}

    @order.step(retry=ONCE)
    async def ship(ctx: StepContext) -> None:
        raise Declined("no courier")

    async def main() -> str:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(SagaFailed) as failed:
                await coord.run(order, data={})
            return failed.value.saga_id

    saga_id = asyncio.run(main())
    with Coordinator(db_url) as coord:
        assert _done_detail(coord, saga_id) == {"result": {"refund": "re_2"}}
