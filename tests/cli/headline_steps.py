"""A trip booking whose unwinding an operator must read, importable as
``tests.cli.headline_steps`` (``--app``): ``book_hotel`` -> ``book_flight`` ->
``charge_card``, which is always rejected (``BookingRejected``). The input steers it:
``refused`` makes the airline refuse to cancel the flight for good
(``FlightCancellationError``), ``crash`` stops the process's work inside
``charge_card``'s first attempt the way a crash would (nothing records it), so that
another process or runtime recovers the saga and runs the compensations.

What the compensations return is typed: ``cancel_flight`` by its return annotation,
``cancel_hotel`` (no annotation) by ``result_type=``; ``result_type`` of the latter
can be swapped for a type that no longer reads what was stored (``STAY``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from saga import RetryPolicy, Saga, StepContext

ONCE = RetryPolicy(max_attempts=1)
TRIP = Saga("headline-trip")


class BookingRejected(Exception):
    """The participant's own error class of the forward step."""


class FlightCancellationError(Exception):
    """The participant's own error class of the compensation."""


class SimulatedCrash(BaseException):
    """Escapes every ``except Exception``: the saga is left exactly as a crash leaves it."""


@dataclasses.dataclass(frozen=True)
class Ticket:
    flight: str


@dataclasses.dataclass(frozen=True)
class Refund:
    refund_id: str
    amount: int


@TRIP.step(retry=ONCE)
def book_hotel(ctx: StepContext) -> dict[str, str]:
    return {"room": "R-12"}


@book_hotel.compensation(retry=ONCE, result_type=Refund)
def cancel_hotel(ctx):  # type: ignore[no-untyped-def]  # typed by result_type= alone
    return {"refund_id": "re_hotel", "amount": 80}


@TRIP.step(retry=ONCE)
def book_flight(ctx: StepContext) -> Ticket:
    return Ticket("FL-" + str(ctx.data.get("flight", "101")))


@book_flight.compensation(retry=ONCE)
def cancel_flight(ctx: StepContext) -> Refund:
    if ctx.data.get("refused"):
        raise FlightCancellationError(
            f"airline refused to cancel {ctx.result.flight}: ticket already issued"
        )
    return Refund(f"re_{ctx.result.flight}", 120)


@TRIP.step(retry=RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.001))
def charge_card(ctx: StepContext) -> Any:
    if ctx.data.get("crash") and ctx.attempt == 1:
        raise SimulatedCrash("charge_card")
    raise BookingRejected("charge_card rejected: card ending 4242 declined")
