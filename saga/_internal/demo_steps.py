"""The order saga that ``saga demo`` runs, and the pretend shop it talks to.

Inventory, payments and shipping live in one small JSON ledger file, so that
every process of the demo (including the one that is killed mid-step) sees
the same outside world. Each call carries the step's idempotency key, and a
repeated call returns what the first one did instead of acting twice, as real
payment and shipping APIs do. That is what makes re-running a step whose
outcome was lost in a crash safe.

Run as a module, it places one order in this process (the demo starts it in
a child process and kills it part-way)::

    SAGA_DATABASE_URL=sqlite:///saga.db python -m saga._internal.demo_steps '{"sku": ...}' KEY
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from saga._internal.context import StepContext
from saga._internal.coordinator import Coordinator
from saga._internal.definition import Saga

DECLINED_CARD = "tok_declined"
CHILD_LEASE_TTL = 1.0
"""The child's lease: short, so that the demo can recover its saga a second after the kill."""

ORDER = Saga("demo-place-order")


class CardDeclinedError(Exception):
    """The payment provider refused the card: a business failure, never retried."""


class Ledger:
    """The shop's systems, as one JSON file rewritten atomically.

    Only one demo process touches it at a time (the parent waits for the
    child), so it needs no lock; ``os.replace`` makes each write all or
    nothing even under SIGKILL.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, dict[str, Any]]:
        try:
            state: dict[str, dict[str, Any]] = json.loads(self.path.read_text())
        except FileNotFoundError:
            state = {}
        for system in ("reservations", "charges", "shipments"):
            state.setdefault(system, {})
        return state

    def _write(self, state: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(scratch, self.path)

    def _once(self, system: str, key: str, create: dict[str, Any]) -> dict[str, Any]:
        """The entry under ``key``, created on the first request; every request is counted."""
        state = self.read()
        entry: dict[str, Any] = state[system].setdefault(key, create)
        entry["requests"] = entry.get("requests", 0) + 1
        self._write(state)
        return entry

    def _set(self, system: str, key: str, status: str) -> bool:
        """Move an existing entry to ``status``; False when there is nothing under ``key``."""
        state = self.read()
        entry = state[system].get(key)
        if entry is None:
            return False
        entry["status"] = status
        self._write(state)
        return True

    def reserve(self, key: str, sku: str, quantity: int) -> dict[str, Any]:
        new = {"id": _new_id("res"), "sku": sku, "quantity": quantity, "status": "held"}
        entry = self._once("reservations", key, new)
        return {"reservation": entry["id"], "sku": sku, "quantity": quantity}

    def release(self, key: str) -> bool:
        return self._set("reservations", key, "released")

    def charge(self, key: str, card: str, amount_cents: int) -> dict[str, Any]:
        new = {
            "id": _new_id("ch"),
            "card": card,
            "amount_cents": amount_cents,
            "status": "captured",
        }
        entry = self._once("charges", key, new)
        return {"charge": entry["id"], "amount_cents": amount_cents}

    def refund(self, key: str) -> bool:
        return self._set("charges", key, "refunded")

    def ship(self, key: str, address: str) -> dict[str, Any]:
        new = {"id": _new_id("shp"), "address": address, "status": "booked"}
        entry = self._once("shipments", key, new)
        return {"shipment": entry["id"]}


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _ledger(ctx: StepContext) -> Ledger:
    return Ledger(ctx.data["ledger"])


@ORDER.step()
def reserve_stock(ctx: StepContext) -> dict[str, Any]:
    return _ledger(ctx).reserve(ctx.idempotency_key, ctx.data["sku"], ctx.data["quantity"])


@reserve_stock.compensation
def release_stock(ctx: StepContext) -> None:
    _ledger(ctx).release(ctx.idempotency_key)


@ORDER.step()
def charge_card(ctx: StepContext) -> dict[str, Any]:
    card = ctx.data["card"]
    if card == DECLINED_CARD:
        raise CardDeclinedError(f"card {card} was declined: insufficient funds")
    return _ledger(ctx).charge(ctx.idempotency_key, card, ctx.data["amount_cents"])


@charge_card.compensation
def refund_card(ctx: StepContext) -> None:
    # ctx.result is None when the charge never returned; the provider may
    # still have charged, so ask it by key rather than trusting the result.
    _ledger(ctx).refund(ctx.idempotency_key)


@ORDER.step(pivot=True)
def create_shipment(ctx: StepContext) -> dict[str, Any]:
    """The point of no return: once a parcel is booked, the order only goes forward."""
    return _ledger(ctx).ship(ctx.idempotency_key, ctx.data["address"])


def main(argv: list[str] | None = None) -> int:
    """Place one order (``ORDER_JSON KEY``) on ``$SAGA_DATABASE_URL``."""
    order_json, key = argv if argv is not None else sys.argv[1:3]
    with Coordinator(lease_ttl=CHILD_LEASE_TTL) as coord:
        coord.run(ORDER, data=json.loads(order_json), key=key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
