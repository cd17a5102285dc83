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

No ordinary case answers 500: 201 with the results (the first time and every
replay), 422 when the saga failed and was compensated (or the request is not
one), 409 when the key was used with other input, 409 with ``Retry-After``
while another request or server is still running that key's saga (or took it
over from this one, paused past its lease), 503 with ``Retry-After`` when the
database cannot be reached, its schema is another release's, or the server is
shutting down (SIGTERM hands the sagas in flight back for the next server).
docs/examples/fastapi_app.md lists every answer with its body.

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
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Annotated, Any

try:
    import httpx
    import uvicorn
    from fastapi import APIRouter, FastAPI, Header, HTTPException, Request, Response
    from fastapi.responses import JSONResponse
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from pydantic import BaseModel
except ImportError as missing:  # pragma: no cover - explained to whoever runs it
    hint = f"{missing}: install the examples' extras: pip install 'saga[examples]'"
    raise SystemExit(hint) from missing

from saga import (
    Coordinator,
    DatabaseRefusedError,
    InputMismatchError,
    LeaseLostError,
    PayloadError,
    RecoveryReport,
    RetryPolicy,
    Saga,
    SagaBusyError,
    SagaFailed,
    SagaHandedBack,
    SchemaVersionError,
    StepContext,
    StorageUnavailableError,
    UnknownSagaError,
)
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

log = logging.getLogger(__name__)

REQUEST_STORE_RETRY = RetryPolicy(
    max_attempts=None,
    initial_delay=0.05,
    max_delay=0.5,
    retry_on=(StorageUnavailableError,),
    max_elapsed=2.0,
)
"""How long a store call waits out a lost database before giving up: two seconds, not the
library's thirty (made for workers), since a client kept waiting longer has given up and
will retry with its key anyway. A saga cut short by it keeps its record: once its lease
runs out, the client's retry or the recovery worker finishes it."""

DATABASE_RETRY_AFTER = 5
SCHEMA_RETRY_AFTER = 60  # an upgrade takes minutes: no point in asking every few seconds
"""The ``Retry-After`` (seconds) of a 503: about a failover, or a restart of the database."""


class OrderIn(BaseModel):
    item: str
    card: str


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> Any:
    # Nothing connects here: an unreachable database makes requests answer 503, and the
    # server starts anyway, ready for when the database is back.
    tracing = TracingListener()  # spans on the global TracerProvider
    coord = Coordinator(app.state.db_url, store_retry=REQUEST_STORE_RETRY, listeners=[tracing])
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


router = APIRouter()


@router.post("/orders", status_code=201)
def place_order(
    body: OrderIn, request: Request, idempotency_key: Annotated[str, Header()]
) -> dict[str, Any]:
    coord: Coordinator = request.app.state.coord
    try:
        view = coord.run(order, data=body.model_dump(), key=idempotency_key)
    except SagaFailed as failure:
        raise failed(failure) from failure
    except InputMismatchError as reused:
        raise key_reused(reused) from reused
    except SagaBusyError as busy:
        raise in_progress(busy, coord.lease_ttl) from busy
    except PayloadError as refused:
        raise unstorable(refused) from refused
    except LeaseLostError as lost:
        raise taken_over(lost, coord.lease_ttl) from lost
    except SagaHandedBack as handed:
        raise server_stopping(handed) from handed
    return {"saga_id": view.id, "status": view.status.value, "results": view.results}


def failed(failure: SagaFailed) -> HTTPException:
    """422: the saga ran and was undone (or, status ``failed``, could not be: an operator acts).
    The same answer when the client retries: the same key raises the same SagaFailed, its
    cause rebuilt from the record (a RecordedError: DeclinedError is ours)."""
    cause = failure.__cause__
    detail = {
        "problem": "saga_failed",
        "saga_id": failure.saga_id,
        "status": failure.status.value,
        "failed_step": failure.failed_step,
        "error": None if cause is None else str(cause),
    }
    return HTTPException(status_code=422, detail=detail)


def key_reused(reused: InputMismatchError) -> HTTPException:
    """409: the key stands for another order. Not worth retrying: a new order needs a new key."""
    message = "this Idempotency-Key was already used with other input; use a new key"
    detail = {"problem": "key_reused", "saga_id": reused.saga_id, "message": message}
    return HTTPException(status_code=409, detail=detail)


def unstorable(refused: PayloadError) -> HTTPException:
    """422: input no database could store (a key over the size limit, a NUL byte) or a blank
    key, refused before anything was written. Its message names the field and the problem,
    nothing else."""
    detail = {"problem": "unstorable_input", "message": str(refused)}
    return HTTPException(status_code=422, detail=detail)


def in_progress(busy: SagaBusyError, lease_ttl: float) -> HTTPException:
    """409 with Retry-After: another request (or server) is running this key's saga now.

    409 rather than 503: this server is fine and so is the database; the conflict is this
    key's alone, and a 503 would tell load balancers and retrying clients otherwise. The
    holder's message names its host and pid, which a client has no business reading.
    """
    message = "this Idempotency-Key's order is still being placed; ask again later"
    return _still_running(busy.saga_id, retry_after(busy, lease_ttl), message)


def taken_over(lost: LeaseLostError, lease_ttl: float) -> HTTPException:
    """409 with Retry-After: this server paused past its lease (a long GC, a frozen VM)
    and another process took the saga over; it is finishing it, and the same key then
    answers with its outcome. Nothing this server did after the pause was recorded."""
    message = "this order is being finished by another server; ask again later"
    return _still_running(lost.saga_id, max(1, math.ceil(lease_ttl)), message)


def _still_running(saga_id: str, wait: int, message: str) -> HTTPException:
    detail = {"problem": "in_progress", "saga_id": saga_id, "retry_after": wait, "message": message}
    return HTTPException(status_code=409, detail=detail, headers={"Retry-After": str(wait)})


def server_stopping(handed: SagaHandedBack) -> HTTPException:
    """503 with Retry-After: this server is shutting down and handed the saga back at a
    step boundary; another server takes it at once, and the same key answers from there."""
    detail = {
        "problem": "server_stopping",
        "saga_id": handed.saga_id,
        "message": "this server is shutting down; ask again with the same Idempotency-Key",
    }
    return HTTPException(status_code=503, detail=detail, headers={"Retry-After": "1"})


def retry_after(busy: SagaBusyError, lease_ttl: float) -> int:
    """Whole seconds (all Retry-After allows) until the holder's lease runs out, at least 1:
    by then the saga is finished, or its holder died and the next request takes it over."""
    left = busy.lease_remaining if busy.lease_remaining is not None else lease_ttl
    return max(1, math.ceil(left))


async def schema_mismatch(request: Request, error: Exception) -> JSONResponse:
    """503: the database's saga schema is not this release's (``saga db upgrade`` not run,
    or a newer release migrated it). Nothing was written; an operator must act, so the
    log says what, at ERROR, and clients are asked to come back much later."""
    log.error("%s %s: %s", request.method, request.url.path, error)
    message = "the service is being upgraded; try again later with the same Idempotency-Key"
    return _unavailable("schema_mismatch", message, SCHEMA_RETRY_AFTER)


async def database_unavailable(request: Request, error: Exception) -> JSONResponse:
    """503 with Retry-After, from any endpoint: the database cannot be reached (or refuses
    this server). What was recorded is kept; the client retries with the same key. The
    error (host, port) goes to the server's log, not to the client."""
    log.warning("%s %s: database unavailable: %s", request.method, request.url.path, error)
    message = "the database cannot be reached; try again later with the same Idempotency-Key"
    return _unavailable("database_unavailable", message, DATABASE_RETRY_AFTER)


def _unavailable(problem: str, message: str, retry_after: int) -> JSONResponse:
    """503 with Retry-After, in the shape every answer of this app has."""
    return JSONResponse(
        {"detail": {"problem": problem, "message": message}},
        status_code=503,
        headers={"Retry-After": str(retry_after)},
    )


@router.get("/sagas/{saga_id}")
def show_saga(saga_id: str, request: Request) -> dict[str, Any]:
    coord: Coordinator = request.app.state.coord
    try:
        view = coord.get(saga_id)
    except UnknownSagaError as error:
        raise HTTPException(status_code=404, detail=str(error)) from error
    steps = [{"name": s.name, "status": s.status.value, "attempt": s.attempt} for s in view.steps]
    return {"id": view.id, "status": view.status.value, "key": view.key, "steps": steps}


@router.get("/metrics")
def metrics(request: Request) -> Response:
    body = generate_latest(request.app.state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def create_app(db_url: str | None = None) -> FastAPI:
    """The app on ``db_url`` (default: ``$SAGA_DATABASE_URL``, else ``saga.db``); the
    database is opened when the app starts, not here."""
    app = FastAPI(title="saga example", lifespan=lifespan)
    app.state.db_url = db_url
    app.include_router(router)
    for unusable in (StorageUnavailableError, DatabaseRefusedError):
        app.add_exception_handler(unusable, database_unavailable)
    app.add_exception_handler(SchemaVersionError, schema_mismatch)
    return app


app = create_app()  # for `uvicorn examples.fastapi_app:app`


# -- running it -------------------------------------------------------------------------------


class Server(uvicorn.Server):
    """uvicorn's server, which on SIGTERM (or the first Ctrl-C) first tells the app's
    coordinator to drain: the sagas its requests are running are handed back at their next
    step (those requests answer 503 ``server_stopping``) and the next server takes them
    at once, instead of the shutdown waiting for every saga to end."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        coord = getattr(self.config.app.state, "coord", None)
        if coord is not None:
            coord.drain()  # sets a flag: safe here, in a signal handler
        super().handle_exit(sig, frame)


@contextlib.contextmanager
def serving(db_url: str | None, app: FastAPI | None = None) -> Iterator[str]:
    """The app (``create_app(db_url)`` unless given) on a free port of 127.0.0.1 in a
    thread; yields its base URL. Leaving the block shuts it down as SIGTERM does."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app or create_app(db_url), log_level="warning")
    server = Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():  # the app's startup failed: uvicorn logged why
            sock.close()
            raise RuntimeError("the app did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.handle_exit(signal.SIGTERM, None)
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
        reused = client.post(
            "/orders", headers={"Idempotency-Key": key}, json={"item": "desk", "card": "tok_visa"}
        )
        print(f"the same key, another order: {reused.status_code} {reused.json()}")
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
        and again.json() == first.json()
        and reused.status_code == 409
        and reused.json()["detail"]["problem"] == "key_reused"
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
        config = uvicorn.Config(create_app(args.db), host="127.0.0.1", port=args.port)
        Server(config).run()  # uvicorn's, with a drain on SIGTERM
        return 0
    ok = demo(args.db)
    print("ok: one saga per idempotency key" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
