"""Trip booking: flight, hotel and car booked in parallel over HTTP; the car fails, all is undone.

    python examples/trip_booking.py                      # embedded SQLite: ./saga.db
    python examples/trip_booking.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test

The example starts three small booking services of its own on 127.0.0.1
(``http.server`` in threads). Each honours the ``Idempotency-Key`` header:
a POST repeated with the same key returns the first booking instead of
making a second one. The saga books the three at once
(``Saga("book-trip", max_concurrency=3)``, each step ``after=()``), through
``saga.adapters.integrations.http``:

- the hotel answers 503 the first time: the step is retried with the same
  key, so the hotel still holds exactly one booking;
- the car rental answers 422 "no cars left": a definite no, not retried;
  the saga unwinds, cancelling the flight and the hotel. The car's own
  compensation runs too (its request might have been applied before the
  answer got lost), and first probes ``GET /bookings/<key>``: nothing there,
  nothing to cancel.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from saga.adapters.integrations.http import probe, request

from saga import Coordinator, RetryPolicy, Saga, SagaFailed, StepContext

# -- the booking services --------------------------------------------------------------------


class BookingService:
    """A booking API on 127.0.0.1: POST /bookings, GET and DELETE /bookings/<key>."""

    def __init__(
        self, name: str, *, latency: float, unavailable: int = 0, refuse: str = ""
    ) -> None:
        self.name = name
        self.latency = latency
        self.unavailable = unavailable  # answer 503 this many times first
        self.refuse = refuse  # answer 422 with this reason
        self.bookings: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, method: str, path: str, key: str, body: Any) -> tuple[int, Any]:
        time.sleep(self.latency)
        with self.lock:
            if method == "POST" and path == "/bookings":
                return self._book(key, body)
            booking = self.bookings.get(path.removeprefix("/bookings/"))
            if booking is None:
                return 404, {"error": "no such booking"}
            if method == "DELETE":
                booking["status"] = "cancelled"
            return 200, booking

    def _book(self, key: str, body: Any) -> tuple[int, Any]:
        if not key:
            return 400, {"error": "Idempotency-Key header required"}
        if key in self.bookings:  # a retry: the first answer again, nothing booked twice
            return 200, self.bookings[key]
        if self.unavailable > 0:
            self.unavailable -= 1
            return 503, {"error": "try again"}
        if self.refuse:
            return 422, {"error": self.refuse}
        booking = {"id": f"{self.name}-{len(self.bookings) + 1}", "status": "booked", **body}
        self.bookings[key] = booking
        return 200, booking


def _handler(service: BookingService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def do_DELETE(self) -> None:
            self._answer("DELETE")

        def _answer(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            key = self.headers.get("Idempotency-Key", "")
            status, reply = service.handle(method, self.path, key, body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    return Handler


# -- the saga ---------------------------------------------------------------------------------

trip = Saga("book-trip", max_concurrency=3)
RETRY = RetryPolicy(max_attempts=4, initial_delay=0.05, max_delay=0.5)  # ConnectionError included


def book(ctx: StepContext, service: str) -> dict[str, Any]:
    with httpx.Client(base_url=ctx.data["services"][service], timeout=5.0) as client:
        return request(client, "POST", "/bookings", json=ctx.data[service]).json()


def cancel(ctx: StepContext, service: str) -> None:
    with httpx.Client(base_url=ctx.data["services"][service], timeout=5.0) as client:
        where = f"/bookings/{ctx.idempotency_key}"
        if probe(client, where) is None:
            return  # never booked (a refusal, or the request never arrived): nothing to cancel
        request(client, "DELETE", where)


@trip.step(after=(), retry=RETRY)
def flight(ctx: StepContext) -> dict[str, Any]:
    return book(ctx, "flight")


@flight.compensation
def cancel_flight(ctx: StepContext) -> None:
    cancel(ctx, "flight")


@trip.step(after=(), retry=RETRY)
def hotel(ctx: StepContext) -> dict[str, Any]:
    return book(ctx, "hotel")


@hotel.compensation
def cancel_hotel(ctx: StepContext) -> None:
    cancel(ctx, "hotel")


@trip.step(after=(), retry=RETRY)
def car(ctx: StepContext) -> dict[str, Any]:
    return book(ctx, "car")


@car.compensation
def cancel_car(ctx: StepContext) -> None:
    cancel(ctx, "car")


@trip.step(after=("flight", "hotel", "car"))
def itinerary(ctx: StepContext) -> str:
    return " + ".join(ctx.results[s]["id"] for s in ("flight", "hotel", "car"))


# -- running it -------------------------------------------------------------------------------


def show_history(coord: Coordinator, saga_id: str) -> None:
    events = coord.history(saga_id)
    start = events[0].at
    for event in events:
        step = f" {event.step}" if event.step else ""
        print(f"  +{event.at - start:5.2f}s {event.kind}{step}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: $SAGA_DATABASE_URL, else saga.db)")
    args = parser.parse_args(argv)
    services = {
        "flight": BookingService("flight", latency=0.06),
        "hotel": BookingService("hotel", latency=0.03, unavailable=1),
        "car": BookingService("car", latency=0.1, refuse="no cars left at LIS"),
    }
    for service in services.values():
        service.start()
    data = {
        "services": {name: service.url for name, service in services.items()},
        "flight": {"from": "BER", "to": "LIS", "date": "2025-06-01"},
        "hotel": {"city": "Lisbon", "nights": 3},
        "car": {"city": "Lisbon", "days": 3},
    }
    try:
        with Coordinator(args.db or os.environ.get("SAGA_DATABASE_URL")) as coord:
            try:
                coord.run(trip, data=data)
                print("trip booked?! the car rental was supposed to fail")
                return 1
            except SagaFailed as failure:
                print(
                    f"trip {failure.status.value}: {failure.failed_step} failed: "
                    f"{failure.__cause__}"
                )
                show_history(coord, failure.saga_id)
    finally:
        for service in services.values():
            service.stop()
    for name, service in services.items():
        held = [f"{b['id']} {b['status']}" for b in service.bookings.values()]
        print(f"{name:7} bookings: {', '.join(held) or 'none'}")
    flight_held, hotel_held = services["flight"].bookings, services["hotel"].bookings
    ok = (
        len(flight_held) == 1
        and len(hotel_held) == 1
        and not services["car"].bookings
        and all(b["status"] == "cancelled" for b in [*flight_held.values(), *hotel_held.values()])
    )
    print("ok: everything booked was cancelled" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
