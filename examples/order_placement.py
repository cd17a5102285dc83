"""Order placement: reserve stock, charge the card, ship (the pivot), notify the customer.

    python examples/order_placement.py                      # embedded SQLite: ./saga.db
    python examples/order_placement.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test

(``$SAGA_DATABASE_URL`` is used when ``--db`` is not given.)

The shop's stock lives in the saga store's own database, so reserving it is
a transactional step: the stock update and the step's success record commit
together, exactly once. Payment, shipping and e-mail are other systems,
stood in for here by small in-process services that honour idempotency
keys, the way Stripe or a carrier's API does.

- ``reserve_stock`` (transactional, compensated by ``release_stock``, also
  transactional);
- ``charge_card`` (compensated by ``refund``, which first asks the payment
  service whether the charge happened at all);
- ``create_shipment``: the pivot; once a parcel is booked the order only goes
  forward;
- ``notify_customer``: retriable; the mailer fails twice, saga retries it
  until it gets through.

Three orders are placed: one goes through (the flaky mailer retried), one
has its card declined (the stock reservation is undone), and the first is
placed again with the same key (its recorded outcome comes back; nothing
runs twice).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections import Counter
from typing import Any

from saga.adapters.integrations.sqlalchemy import store_engine
from sqlalchemy import Column, Integer, MetaData, String, Table, delete, insert, select, update

from saga import Coordinator, RetryPolicy, Saga, SagaFailed, StepContext

# -- the shop's tables (in the saga store's database) ---------------------------------------

shop = MetaData()
stock = Table(
    "shop_stock",
    shop,
    Column("sku", String(40), primary_key=True),
    Column("available", Integer, nullable=False),
)
reservations = Table(
    "shop_reservations",
    shop,
    Column("order_key", String(120), primary_key=True),
    Column("sku", String(40), nullable=False),
    Column("quantity", Integer, nullable=False),
)


class OutOfStockError(Exception):
    pass


class CardDeclinedError(Exception):
    pass


# -- other systems, honouring idempotency keys -------------------------------------------


class PaymentService:
    """Charges are keyed by the caller's idempotency key: a retry never charges twice."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, Any]] = {}

    def charge(self, card: str, amount: int, key: str) -> dict[str, Any]:
        if card == "tok_declined":
            raise CardDeclinedError(f"card {card} was declined")
        return self.charges.setdefault(
            key, {"charge_id": f"ch_{len(self.charges) + 1}", "amount": amount, "refunded": False}
        )

    def find(self, key: str) -> dict[str, Any] | None:
        return self.charges.get(key)

    def refund(self, key: str) -> None:
        self.charges[key]["refunded"] = True


class Carrier:
    def __init__(self) -> None:
        self.parcels: dict[str, str] = {}

    def book(self, address: str, key: str) -> str:
        return self.parcels.setdefault(key, f"parcel-{len(self.parcels) + 1} to {address}")


class Mailer:
    """Fails the first two sends of every message: saga retries it."""

    def __init__(self) -> None:
        self.tries: Counter[str] = Counter()
        self.sent: dict[str, str] = {}

    def send(self, to: str, text: str, key: str) -> None:
        self.tries[key] += 1
        if self.tries[key] <= 2:
            raise ConnectionError("mail server busy")
        self.sent.setdefault(key, f"to {to}: {text}")


payments, carrier, mailer = PaymentService(), Carrier(), Mailer()

# -- the saga -----------------------------------------------------------------------------------

order = Saga("place-order")


@order.step(transactional=True)
def reserve_stock(ctx: StepContext) -> dict[str, Any]:
    sku, quantity = ctx.data["sku"], ctx.data["quantity"]
    taken = ctx.session.execute(
        update(stock)
        .where(stock.c.sku == sku, stock.c.available >= quantity)
        .values(available=stock.c.available - quantity)
    ).rowcount
    if taken != 1:
        raise OutOfStockError(f"not enough {sku} in stock")
    row = {"order_key": ctx.idempotency_key, "sku": sku, "quantity": quantity}
    ctx.session.execute(insert(reservations).values(row))
    return {"reserved": quantity}


@reserve_stock.compensation
def release_stock(ctx: StepContext) -> None:
    # Transactional too: the stock comes back exactly once, with the "compensated" record.
    sku, quantity = ctx.data["sku"], ctx.data["quantity"]
    ctx.session.execute(
        update(stock).where(stock.c.sku == sku).values(available=stock.c.available + quantity)
    )
    ctx.session.execute(delete(reservations).where(reservations.c.order_key == ctx.idempotency_key))


@order.step(retry=RetryPolicy(max_attempts=3, initial_delay=0.05, retry_on=(ConnectionError,)))
def charge_card(ctx: StepContext) -> dict[str, Any]:
    return payments.charge(ctx.data["card"], ctx.data["amount"], key=ctx.idempotency_key)


@charge_card.compensation
def refund(ctx: StepContext) -> None:
    # ctx.result is None when the charge never answered: ask whether it happened.
    if payments.find(ctx.idempotency_key) is None:
        return  # nothing was charged, nothing to refund
    payments.refund(ctx.idempotency_key)


@order.step(pivot=True)
def create_shipment(ctx: StepContext) -> str:
    return carrier.book(ctx.data["address"], key=ctx.idempotency_key)


@order.step(
    retriable=True,
    retry=RetryPolicy(max_attempts=None, initial_delay=0.02, max_delay=0.1, retry_on=(Exception,)),
)
def notify_customer(ctx: StepContext) -> str:
    text = f"your order ships as {ctx.results['create_shipment']}"
    mailer.send(ctx.data["email"], text, key=ctx.idempotency_key)
    return text


# -- running it -------------------------------------------------------------------------------


def restock(coord: Coordinator, levels: dict[str, int]) -> None:
    engine = store_engine(coord)
    shop.create_all(engine)
    with engine.begin() as connection:
        for sku, available in levels.items():
            connection.execute(delete(stock).where(stock.c.sku == sku))
            connection.execute(insert(stock).values(sku=sku, available=available))


def available(coord: Coordinator, sku: str) -> int:
    with store_engine(coord).connect() as connection:
        return int(connection.execute(select(stock.c.available).where(stock.c.sku == sku)).one()[0])


def place(coord: Coordinator, data: dict[str, Any], key: str) -> None:
    print(f"\norder {key}: {data['quantity']} x {data['sku']}, card {data['card']}")
    try:
        view = coord.run(order, data=data, key=key)
    except SagaFailed as failure:
        view = coord.get(failure.saga_id)
        print(f"  saga {view.status.value} (failed at {failure.failed_step}): {failure.__cause__}")
    else:
        print(f"  saga {view.status.value}")
    for step in view.steps:
        print(f"    {step.name:16} {step.status.value:12} attempts={step.attempt}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: $SAGA_DATABASE_URL, else saga.db)")
    args = parser.parse_args(argv)
    run = uuid.uuid4().hex[:6]  # fresh keys, so the example can run again on the same database
    with Coordinator(args.db or os.environ.get("SAGA_DATABASE_URL")) as coord:
        print(f"saga store: {coord.store.url}")
        restock(coord, {"lamp": 10})
        good = {
            "sku": "lamp",
            "quantity": 2,
            "card": "tok_visa",
            "amount": 80,
            "address": "1 Main St",
            "email": "ada@example.com",
        }
        place(coord, good, key=f"{run}-order-1")
        place(coord, {**good, "card": "tok_declined"}, key=f"{run}-order-2")
        print(f"\nstock of lamp: {available(coord, 'lamp')} (10 - 2 shipped; order 2's undone)")
        charges = len(payments.charges)
        place(coord, good, key=f"{run}-order-1")  # a client retrying: same key, same order
        assert len(payments.charges) == charges, "the retried order was charged again"
        print(
            f"\ncharges: {charges}, parcels: {len(carrier.parcels)}, e-mails: {len(mailer.sent)}"
            f" (after {sum(mailer.tries.values())} tries)"
        )
        ok = available(coord, "lamp") == 8 and charges == 1 and len(mailer.sent) == 1
    print("ok: order 1 completed, order 2 compensated, stock restored" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
