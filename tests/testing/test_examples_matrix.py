"""The examples' sagas crashed at every durable point through the public plugin, each
checked against its own books: stock (order placement) and money (transfer)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from saga import Coordinator, SagaStatus, SagaView
from saga.testing import CrashMatrix
from saga.testing.report import Case

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.crash


@pytest.fixture(scope="module")
def examples() -> Iterator[None]:
    """examples/ importable here and in the matrix's children (they get this sys.path)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield
    finally:
        sys.path.remove(str(EXAMPLES))


def test_order_placement_keeps_its_stock(crash_matrix: CrashMatrix, examples: None) -> None:
    import order_placement as shop

    def restock(url: str) -> None:
        with Coordinator(url) as coord:
            shop.restock(coord, {"lamp": 10})

    def stock_balances(view: SagaView, case: Case) -> None:
        engine = create_engine(case.url)
        try:
            with engine.connect() as connection:
                available = connection.execute(select(shop.stock.c.available)).scalar_one()
                held = connection.execute(
                    select(func.coalesce(func.sum(shop.reservations.c.quantity), 0))
                ).scalar_one()
        finally:
            engine.dispose()
        assert available + held == 10, f"{available} available + {held} reserved != 10"
        assert held == (2 if view.status is SagaStatus.COMPLETED else 0), f"{held} reserved"

    data = {"sku": "lamp", "quantity": 2, "card": "tok_visa", "amount": 80}
    data |= {"address": "1 Main St", "email": "ada@example.com"}
    report = crash_matrix(
        shop.order, data=data, check=stock_balances, setup=restock, fail=["charge_card"]
    )
    assert report.ok, report.table()
    assert any(r.case.point == "after_action:reserve_stock" for r in report.rows)


def test_money_transfer_conserves_money(
    crash_matrix: CrashMatrix, examples: None, tmp_path: Path
) -> None:
    import money_transfer as bank

    bank_b = f"sqlite:///{tmp_path / 'bank_b.db'}"

    def open_banks(url: str) -> None:
        with Coordinator(url) as coord:
            bank.open_banks(coord, bank_b)

    def conserved(view: SagaView, case: Case) -> None:
        moved = _movements(bank_b, f"{view.id}:credit")
        debited = _movements(case.url, f"{view.id}:debit")
        refunded = _movements(case.url, f"{view.id}:debit:refund")
        if view.status is SagaStatus.COMPLETED:
            assert (debited, refunded, moved) == (-10, 0, 10), (debited, refunded, moved)
        else:
            assert debited + refunded == 0, (debited, refunded)
            assert moved == 0, moved

    data: dict[str, Any] = {"from": "A-1", "to": "B-1", "amount": 10, "bank_b": bank_b}
    report = crash_matrix(bank.transfer, data=data, check=conserved, setup=open_banks)
    assert report.ok, report.table()
    assert {r.case.failing for r in report.rows} == {None, "debit", "credit"}


def _movements(url: str, key: str) -> int:
    """The amount a bank's movement row of ``key`` moved (0: there is none)."""
    import money_transfer as bank

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            query = select(bank.movements.c.amount).where(bank.movements.c.key == key)
            return int(connection.execute(query).scalar() or 0)
    finally:
        engine.dispose()


def test_trip_booking_leaves_no_booking_behind(crash_matrix: CrashMatrix, examples: None) -> None:
    import trip_booking as trips

    services = {
        name: trips.BookingService(name, latency=0.0) for name in ("flight", "hotel", "car")
    }
    for service in services.values():
        service.start()  # in this process: the matrix's children book over HTTP

    def bookings(view: SagaView) -> None:
        for name, service in services.items():
            booking = service.bookings.get(f"{view.id}:{name}")
            live = booking is not None and booking.get("status") != "cancelled"
            assert live == (view.status is SagaStatus.COMPLETED), f"{name}: {booking}"

    data = {"services": {name: s.url for name, s in services.items()}}
    data |= {"flight": {"to": "LIS"}, "hotel": {"nights": 3}, "car": {"days": 3}}
    try:
        # Parallel branches: recover only, one failing branch (the example's own story).
        report = crash_matrix(
            trips.trip, data=data, check=bookings, fail=["car"], modes=["recover"]
        )
    finally:
        for service in services.values():
            service.stop()
    assert report.ok, report.table()
    points = {r.case.point for r in report.rows}
    assert {f"after_action:{name}" for name in services} <= points
    assert "after_undo:flight" in points
