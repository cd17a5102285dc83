"""The public API section of DESIGN.md, as written, on both backends.

The module-level code below is the contract's code (with small fakes for the
inventory and payment services it calls); the test drives the rest of the
contract's lines against it and checks what the comments there promise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from saga import (
    Coordinator,
    OperationRefusedError,
    RetryPolicy,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
    current_step,
)


class _Inventory:
    def __init__(self) -> None:
        self.reserved: dict[str, str] = {}
        self.released: list[str] = []

    def reserve(self, sku: str, key: str) -> dict[str, str]:
        self.reserved[key] = sku
        return {"reservation_id": f"R-{sku}"}

    def release(self, reservation_id: str) -> None:
        self.released.append(reservation_id)


class _Payments:
    def charge(self, card: str, reservation: dict[str, str]) -> dict[str, Any]:
        if card == "declined":
            raise ValueError("card declined")
        return {"charged": card, "for": reservation["reservation_id"]}


inventory = _Inventory()
payments = _Payments()
ledger: list[tuple[str, Any]] = []

# -- DESIGN.md, "Public API (the contract)", declarative part, unchanged ----------------

order = Saga("place-order")


@order.step(
    retry=RetryPolicy(
        max_attempts=5, initial_delay=0.05, max_delay=2.0, jitter=0.2, retry_on=(ConnectionError,)
    ),
    timeout=10.0,
)
def reserve(ctx: StepContext) -> dict:  # type: ignore[type-arg]
    return inventory.reserve(ctx.data["sku"], key=ctx.idempotency_key)


@reserve.compensation
def release(ctx: StepContext) -> None:
    inventory.release(ctx.result["reservation_id"])  # ctx.result: reserve's output


@order.step()  # runs after the step declared before it
def charge(ctx):  # type: ignore[no-untyped-def]
    return payments.charge(ctx.data["card"], ctx.results["reserve"])


@order.step(pivot=True)  # point of no return, no compensation
def ship(ctx): ...  # type: ignore[no-untyped-def]


# -- the context-manager part's functions ------------------------------------------------


def debit(account: str, amount: int) -> dict[str, Any]:
    ledger.append(("debit", (account, amount, current_step().idempotency_key)))
    return {"hold": f"H-{account}-{amount}"}


def refund(hold: dict[str, Any] | None, account: str, amount: int) -> None:
    ledger.append(("refund", (hold, account, amount)))


def credit(account: str, amount: int) -> str:
    if amount > 100:
        raise ValueError("over the limit")
    ledger.append(("credit", (account, amount, current_step().saga_id, current_step().attempt)))
    return "ok"


def uncredit(result: str | None, account: str, amount: int) -> None:
    ledger.append(("uncredit", (result, account, amount)))


# -- the test ----------------------------------------------------------------------------


@pytest.fixture
def contract_url(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)  # Coordinator() with no URL writes ./saga.db
    monkeypatch.delenv("SAGA_DATABASE_URL", raising=False)
    ledger.clear()
    inventory.released.clear()
    inventory.reserved.clear()
    return db_url


def test_the_constructors_of_the_contract(contract_url: str) -> None:
    coord = Coordinator()  # URL from $SAGA_DATABASE_URL, else "sqlite:///saga.db"
    assert coord.store.url == "sqlite:///saga.db"
    coord.close()
    coord = Coordinator("postgresql+psycopg://user@host/db", lease_ttl=30.0)
    assert coord.lease_ttl == 30.0  # no connection is made until it is used
    coord.close()


def test_the_declarative_contract(contract_url: str) -> None:
    coord = Coordinator(contract_url)
    coord.register(order)
    result = coord.run(order, data={"sku": "A1", "card": "tok"}, key="order-42")
    assert result.id
    assert result.status is SagaStatus.COMPLETED
    assert result.results["charge"] == {"charged": "tok", "for": "R-A1"}
    # Same key again: returns the recorded outcome, runs nothing twice.
    assert coord.run(order, data={"sku": "A1", "card": "tok"}, key="order-42").id == result.id
    assert len(inventory.reserved) == 1
    # Failure: compensations run newest-first (the failed step's too), then SagaFailed.
    with pytest.raises(SagaFailed) as failed:
        coord.run(order, data={"sku": "B2", "card": "declined"}, key="order-43")
    assert failed.value.status is SagaStatus.COMPENSATED
    assert failed.value.failed_step == "charge"
    assert isinstance(failed.value.__cause__, ValueError)
    assert inventory.released == ["R-B2"]
    view = coord.get(failed.value.saga_id)
    assert [(s.name, s.status) for s in view.steps] == [
        ("reserve", StepStatus.COMPENSATED),
        ("charge", StepStatus.FAILED),  # it has no compensation: nothing to undo
    ]
    assert [v.id for v in coord.list(status=SagaStatus.COMPENSATED, limit=100)] == [view.id]
    # Operations on finished sagas are refused with a clear error.
    with pytest.raises(OperationRefusedError):
        coord.compensate(result.id)  # unwind now (refused past a pivot)
    with pytest.raises(OperationRefusedError):
        coord.resume(result.id)
    with pytest.raises(OperationRefusedError):
        coord.cancel(result.id)
    assert coord.recover().outcomes == []
    coord.close()


def test_the_context_manager_contract(contract_url: str) -> None:
    coord = Coordinator(contract_url)
    with coord.saga("transfer", key="t-7") as s:
        hold = s.step(debit, "alice", 10, compensate=refund)  # refund(hold, "alice", 10)
        s.step(credit, "bob", 10, compensate=uncredit)
    assert hold == {"hold": "H-alice-10"}
    assert coord.get(s.id).status is SagaStatus.COMPLETED
    assert ("credit", ("bob", 10, s.id, 1)) in ledger
    # An exception in the block unwinds what was done and raises SagaFailed from it.
    ledger.clear()
    with pytest.raises(SagaFailed) as failed, coord.saga("transfer", key="t-8") as s:  # noqa: PT012
        s.step(debit, "alice", 500, compensate=refund)
        s.step(credit, "bob", 500, compensate=uncredit)
    assert failed.value.status is SagaStatus.COMPENSATED
    assert isinstance(failed.value.__cause__, ValueError)
    assert [entry[0] for entry in ledger] == ["debit", "uncredit", "refund"]
    assert coord.list(name="transfer")[0].id == failed.value.saga_id  # newest first
    coord.close()


# -- DESIGN.md, "Contract additions", the lines built so far ----------------------------

greeting = Saga("contract-additions")


@greeting.step()
def greet(ctx: StepContext) -> str:
    assert (ctx.epoch, ctx.attempt) == (1, 1)  # fencing for participants
    assert ctx.idempotency_key == f"{ctx.saga_id}:greet"
    return f"{ctx.resources['settings']['greeting']}, {ctx.data}"  # ctx.resources


def make_coordinator() -> Coordinator:
    """What ``saga --app tests.test_design_contract:make_coordinator ...`` calls."""
    coord = Coordinator(resources={"settings": {"greeting": "hello"}})
    coord.register(greeting)
    return coord


def test_the_contract_additions_built_so_far(contract_url: str) -> None:
    from saga import admin

    with admin.application(apps=["tests.test_design_contract:make_coordinator"]) as coord:
        view = coord.run(greeting, data="ada", key="g-1")
        assert view.results["greet"] == "hello, ada"
        assert coord.get(key="g-1", name="contract-additions").id == view.id  # by key
    assert RetryPolicy(retry_on=lambda exc: isinstance(exc, KeyError)).retries(KeyError())
