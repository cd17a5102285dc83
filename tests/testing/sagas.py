"""Sagas for the plugin's own tests: declarative, context-manager and async, all writing
to the participant double (``saga.testing.Ledger``, found through ``$SAGA_TEST_LEDGER``)."""

from __future__ import annotations

from typing import Any

from saga import AsyncCoordinator, Coordinator, Saga, StepContext, current_step
from saga._internal.views import SagaView
from saga.testing import Ledger

book = Ledger()

# -- declarative: reserve, charge, ship (the pivot) ---------------------------------------------

order = Saga("plugin-order")


@order.step()
def reserve(ctx: StepContext) -> dict[str, Any]:
    book.apply("reserve", ctx.idempotency_key)
    return {"sku": ctx.data["sku"]}


@reserve.compensation
def release(ctx: StepContext) -> None:
    book.revert("reserve", ctx.idempotency_key)


@order.step()
def charge(ctx: StepContext) -> dict[str, Any]:
    if ctx.data.get("declined"):  # fails on its own, every time: the card is refused
        raise ValueError(f"card {ctx.data['card']} declined")
    book.apply("charge", ctx.idempotency_key)
    return {"card": ctx.data["card"]}


@charge.compensation
def refund(ctx: StepContext) -> None:
    book.revert("charge", ctx.idempotency_key)


@order.step(pivot=True)
def ship(ctx: StepContext) -> str:
    book.apply("ship", ctx.idempotency_key)
    return "parcel-1"


def books_balance(view: SagaView) -> None:
    """Completed: each effect applied once; otherwise nothing left applied."""
    want = 1 if view.status.value == "completed" else 0
    for kind in ("reserve", "charge", "ship"):
        assert book.applied(kind, saga=view.id) == want, f"{kind} applied != {want}"
        assert book.count(kind, saga=view.id) <= 1, f"{kind} applied twice"
        assert book.count(kind, saga=view.id, op="revert") <= 1, f"{kind} reverted twice"


# -- context manager: debit then credit -----------------------------------------------------------


def debit(account: str, amount: int) -> str:
    book.apply("debit", current_step().idempotency_key, amount)
    return f"hold-{account}"


def undebit(hold: str | None, account: str, amount: int) -> None:
    book.revert("debit", current_step().idempotency_key)


def credit(account: str, amount: int) -> None:
    book.apply("credit", current_step().idempotency_key, amount)


def uncredit(result: None, account: str, amount: int) -> None:
    book.revert("credit", current_step().idempotency_key)


def transfer(coord: Coordinator, data: dict[str, Any], key: str) -> None:
    """A context-manager saga, as the matrix takes it: ``(coord, data, key)``."""
    with coord.saga("plugin-transfer", key=key) as s:
        s.step(debit, data["from"], data["amount"], compensate=undebit)
        s.step(credit, data["to"], data["amount"], compensate=uncredit)


def money_balances(view: SagaView) -> None:
    want = 1 if view.status.value == "completed" else 0
    for kind in ("debit", "credit"):
        assert book.applied(kind, saga=view.id) == want, f"{kind} applied != {want}"


# -- async: the same transfer with AsyncCoordinator ----------------------------------------------


async def transfer_async(coord: AsyncCoordinator, data: dict[str, Any], key: str) -> None:
    async with coord.saga("plugin-transfer-async", key=key) as s:
        await s.step(debit, data["from"], data["amount"], compensate=undebit)
        await s.step(credit, data["to"], data["amount"], compensate=uncredit)


# -- async declarative: one coroutine step -----------------------------------------------------

paid = Saga("plugin-async-pay")


@paid.step()
async def pay(ctx: StepContext) -> str:
    book.apply("pay", ctx.idempotency_key)
    return "paid"
