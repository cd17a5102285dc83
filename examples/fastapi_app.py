"""A web endpoint that runs one saga per request, keyed by the request's Idempotency-Key.

    pip install 'saga[examples]'                # fastapi, uvicorn, httpx
    python examples/fastapi_app.py serve        # http://127.0.0.1:8000, embedded SQLite
    python examples/fastapi_app.py demo         # starts it, sends requests, prints, stops
    python examples/fastapi_app.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test demo

    curl -X POST localhost:8000/orders -H 'Idempotency-Key: order-42' \\
         -H 'Content-Type: application/json' -d '{"item": "lamp", "card": "tok_visa"}'

``POST /orders`` runs the ``web-order`` saga with the request's
``Idempotency-Key`` as the saga key: a client that retries (a timeout, a
double click) gets the first request's outcome, and nothing runs twice. The
endpoint is a plain ``def``: FastAPI runs it in its thread pool, where
``coord.run`` may block. ``GET /sagas/{id}`` shows a saga.

The app's lifespan opens one ``Coordinator`` and starts a recovery worker:
a thread that calls ``coord.recover()`` every few seconds, so sagas left
behind by a crashed or redeployed server (its lease expired) are finished
by the next one that runs. Several servers may run it at once: a saga is
claimed by one of them only.

Watching it takes three lines: a ``TracingListener`` makes a span per saga and
per step under the request's span (with ``opentelemetry-instrumentation-fastapi``
and an SDK configured; without, the API's tracer does nothing), and a
``MetricsListener`` counts what sagas do, served at ``GET /metrics``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Annotated, Any

try:
    import httpx
    import uvicorn
    from fastapi import FastAPI, Header, HTTPException, Request, Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from pydantic import BaseModel
except ImportError as missing:  # pragma: no cover - explained to whoever runs it
    hint = f"{missing}: install the examples' extras: pip install 'saga[examples]'"
    raise SystemExit(hint) from missing

from saga import Coordinator, RecoveryReport, Saga, SagaFailed, StepContext, UnknownSagaError
from saga.metrics import MetricsListener
from saga.otel import TracingListener

# -- the saga ---------------------------------------------------------------------------------

order = Saga("web-order")


class DeclinedError(Exception):
    pass


@order.step()
def reserve(ctx: StepContext) -> dict[str, Any]:
    return {"reservation": f"res-{ctx.saga_id[:8]}", "item": ctx.data["item"]}


@reserve.compensation
def release(ctx: StepContext) -> None:
    """Idempotent: releasing a reservation twice, or one never made, is harmless."""


@order.step()
def charge(ctx: StepContext) -> dict[str, Any]:
    if ctx.data["card"] == "tok_declined":
        raise DeclinedError("card declined")
    return {"charge": f"ch-{ctx.idempotency_key}"}


# -- the recovery worker ---------------------------------------------------------------------


class RecoveryWorker(threading.Thread):
    """Finishes sagas whose process died: ``coord.recover()`` every ``interval`` seconds."""

    def __init__(self, coord: Coordinator, interval: float = 5.0) -> None:
        super().__init__(name="saga-recovery", daemon=True)
        self.coord = coord
        self.interval = interval
        self.stopping = threading.Event()
        self.reports: list[RecoveryReport] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.reports.append(self.coord.recover())
            except Exception as error:  # a database blip must not kill the worker
                print(f"recovery failed, will retry: {error}", file=sys.stderr)
            self.stopping.wait(self.interval)

    def stop(self) -> None:
        self.stopping.set()
        self.join()


# -- the web app --------------------------------------------------------------------------------


class OrderIn(BaseModel):
    item: str
    card: str


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> Any:
    url = app.state.db_url if hasattr(app.state, "db_url") else None
    coord = Coordinator(url, listeners=[TracingListener()])  # the global TracerProvider
    app.state.metrics = MetricsListener()
    app.state.metrics.watch(coord)  # counts, durations, and gauges read from the database
    coord.register(order)
    worker = RecoveryWorker(coord)
    worker.start()
    app.state.coord = coord
    try:
        yield
    finally:
        worker.stop()
        coord.close()


app = FastAPI(title="saga example", lifespan=lifespan)


@app.post("/orders", status_code=201)
def place_order(
    body: OrderIn, request: Request, idempotency_key: Annotated[str, Header()]
) -> dict[str, Any]:
    coord: Coordinator = request.app.state.coord
    try:
        view = coord.run(order, data=body.model_dump(), key=idempotency_key)
    except SagaFailed as failure:
        # The same answer when the client retries: the same key raises the same SagaFailed,
        # its cause rebuilt from the record (a RecordedError: DeclinedError is ours).
        cause = failure.__cause__
        detail = {
            "saga_id": failure.saga_id,
            "status": failure.status.value,
            "failed_step": failure.failed_step,
            "error": None if cause is None else str(cause),
        }
        raise HTTPException(status_code=422, detail=detail) from failure
    return {"saga_id": view.id, "status": view.status.value, "results": view.results}


@app.get("/sagas/{saga_id}")
def show_saga(saga_id: str, request: Request) -> dict[str, Any]:
    coord: Coordinator = request.app.state.coord
    try:
        view = coord.get(saga_id)
    except UnknownSagaError as error:
        raise HTTPException(status_code=404, detail=str(error)) from error
    steps = [{"name": s.name, "status": s.status.value, "attempt": s.attempt} for s in view.steps]
    return {"id": view.id, "status": view.status.value, "key": view.key, "steps": steps}


@app.get("/metrics")
def metrics(request: Request) -> Response:
    body = generate_latest(request.app.state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


# -- running it -------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(db_url: str | None) -> Iterator[str]:
    """The app on a free port of 127.0.0.1 in a thread; yields its base URL."""
    app.state.db_url = db_url
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def demo(db_url: str | None) -> bool:
    key = f"order-{os.getpid()}-{time.time_ns()}"
    with serving(db_url) as base, httpx.Client(base_url=base, timeout=10.0) as client:
        first = client.post(
            "/orders", headers={"Idempotency-Key": key}, json={"item": "lamp", "card": "tok_visa"}
        )
        print(f"POST /orders (key {key}): {first.status_code} {first.json()}")
        again = client.post(
            "/orders", headers={"Idempotency-Key": key}, json={"item": "lamp", "card": "tok_visa"}
        )
        print(f"the same request again:      {again.status_code} {again.json()}")
        refused, declined_card = (
            {"Idempotency-Key": key + "-b"},
            {"item": "lamp", "card": "tok_declined"},
        )
        declined = client.post("/orders", headers=refused, json=declined_card)
        declined_again = client.post("/orders", headers=refused, json=declined_card)  # a retry
        print(f"a declined card:             {declined.status_code} {declined.json()}")
        print(f"the declined order again:    {declined_again.status_code} {declined_again.json()}")
        shown = client.get(f"/sagas/{first.json()['saga_id']}")
        print(f"GET /sagas/<id>:             {shown.status_code} {shown.json()}")
        missing = client.post("/orders", json={"item": "lamp", "card": "tok_visa"})
        print(f"no Idempotency-Key:          {missing.status_code}")
        scraped = client.get("/metrics").text
        ended = [line for line in scraped.splitlines() if line.startswith("saga_sagas_ended_total")]
        print(f"GET /metrics:                {ended}")
    return (
        first.status_code == 201
        and again.json()["saga_id"] == first.json()["saga_id"]
        and declined.status_code == 422
        and declined.json()["detail"]["status"] == "compensated"
        and declined.json()["detail"]["error"] == "card declined"
        and declined_again.json() == declined.json()
        and missing.status_code == 422
        and 'saga_sagas_ended_total{outcome="compensated",saga="web-order"} 1.0' in ended
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: $SAGA_DATABASE_URL, else saga.db)")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="serve the app until interrupted")
    serve.add_argument("--port", type=int, default=8000)
    commands.add_parser("demo", help="start the app, send a few requests, stop")
    args = parser.parse_args(argv)
    if args.command == "serve":
        app.state.db_url = args.db
        uvicorn.run(app, host="127.0.0.1", port=args.port)
        return 0
    ok = demo(args.db)
    print("ok: one saga per idempotency key" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
