"""The FastAPI example answers every ordinary case with a status its doc lists, never a 500.

Real HTTP requests to the example's ASGI app served by uvicorn on a free port of
127.0.0.1 (the example's own ``serving``, as its demo does), on a real SQLite file and
on PostgreSQL: replays, a key
used with another order, a declined card, a key whose saga another request or another
server is running (held open at a fault point, so its lease is live), input no database
could store, and a database that cannot be reached.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="fastapi is not installed (pip install saga[examples])")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install saga[examples])")

import httpx
from saga.adapters.sql import revisions
from sqlalchemy import create_engine, text

from examples import fastapi_app
from saga import Coordinator, SagaBusyError, SagaStatus
from saga._internal import faults
from tests import children
from tests.integration.support import expire_lease
from tests.transactional import fastapi_child

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "examples" / "fastapi_app.md"
ORDER = fastapi_child.ORDER
DECLINED = {"item": "lamp", "card": "tok_declined"}


@contextlib.contextmanager
def served(db_url: str) -> Iterator[httpx.Client]:
    """A client of the example app on ``db_url`` (its store calls may wait out a lost
    database for a few seconds: the timeout is well beyond that)."""
    with fastapi_app.serving(db_url) as base, httpx.Client(base_url=base, timeout=60.0) as client:
        yield client


@pytest.fixture
def client(db_url: str) -> Iterator[httpx.Client]:
    with served(db_url) as running:
        yield running


def take_over(rival: Coordinator, saga_id: str) -> None:
    """Expire the saga's lease until another process holds it: the rival, or the server's
    own recovery worker (every 5 s). Between an expiry and the rival's claim the server's
    heartbeat may renew the lease (its held request is still alive) or its worker may
    claim the saga first; either way the held request's next write is fenced out."""

    def claimed() -> bool:
        if rival.get(saga_id).epoch == 1:
            expire_lease(rival, saga_id)
            with contextlib.suppress(SagaBusyError):  # renewed, or claimed by the worker
                rival.recover_saga(saga_id)
        return rival.get(saga_id).epoch > 1

    children.wait_until(claimed, timeout=60.0)


def place(client: httpx.Client, key: str, order: dict[str, str] = ORDER) -> httpx.Response:
    return client.post("/orders", headers={"Idempotency-Key": key}, json=order)


def problem(answer: httpx.Response) -> str:
    detail: dict[str, Any] = answer.json()["detail"]
    return str(detail["problem"])


def retry_after(answer: httpx.Response) -> int:
    """The Retry-After header, which must be a positive whole number of seconds."""
    value = answer.headers.get("Retry-After", "")
    assert re.fullmatch(r"[1-9][0-9]*", value), f"Retry-After is {value!r}"
    return int(value)


# -- completed, failed, reused ----------------------------------------------------------------


def test_a_replayed_order_gets_the_first_answer_again(client: httpx.Client) -> None:
    first = place(client, "order-1")
    again = place(client, "order-1")

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert first.json()["status"] == "completed"
    assert set(first.json()["results"]) == {"reserve", "charge"}


def test_a_key_used_with_another_order_is_409_and_runs_nothing(client: httpx.Client) -> None:
    first = place(client, "order-2")
    other = place(client, "order-2", {"item": "desk", "card": "tok_visa"})

    assert other.status_code == 409
    assert problem(other) == "key_reused"
    assert other.json()["detail"]["saga_id"] == first.json()["saga_id"]
    assert "other input" in other.json()["detail"]["message"]
    assert "Retry-After" not in other.headers  # asking again cannot help
    assert place(client, "order-2").json() == first.json()  # the first order is untouched


def test_a_declined_order_is_compensated_and_answered_422_every_time(client: httpx.Client) -> None:
    declined = place(client, "order-3", DECLINED)
    again = place(client, "order-3", DECLINED)

    assert declined.status_code == again.status_code == 422
    assert again.json() == declined.json()
    detail = declined.json()["detail"]
    assert (detail["problem"], detail["status"]) == ("saga_failed", "compensated")
    assert (detail["failed_step"], detail["error"]) == ("charge", "card declined")


def test_input_no_database_could_store_is_422_before_anything_runs(client: httpx.Client) -> None:
    too_long = place(client, "k" * 2001)
    with_nul = place(client, "order-4", {"item": "lamp\x00", "card": "tok_visa"})
    blank_key = place(client, "")  # every such request would otherwise be one order

    for answer in (too_long, with_nul, blank_key):
        assert answer.status_code == 422, answer.text
        assert problem(answer) == "unstorable_input"
    assert "over the limit" in too_long.json()["detail"]["message"]
    assert blank_key.json()["detail"]["message"].startswith("key: is empty")
    assert place(client, "order-4").status_code == 201  # nothing was recorded under the key


def test_a_saga_is_shown_by_its_id_and_an_unknown_id_is_404(client: httpx.Client) -> None:
    placed = place(client, "order-8").json()

    shown = client.get(f"/sagas/{placed['saga_id']}")
    missing = client.get("/sagas/no-such-saga")

    assert shown.status_code == 200
    assert (shown.json()["key"], shown.json()["status"]) == ("order-8", "completed")
    assert missing.status_code == 404
    assert "no-such-saga" in missing.json()["detail"]


def test_a_request_without_a_key_is_refused_by_validation(client: httpx.Client) -> None:
    refused = client.post("/orders", json=ORDER)

    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["header", "idempotency-key"]


# -- a key whose saga is still running -----------------------------------------------------------


@contextlib.contextmanager
def held_at_first_step() -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold the next saga of this process just after its creation is durable, until
    ``release`` is set; ``started`` is set once it is held (its lease live and renewed)."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(120.0)

    faults.arm(fastapi_child.HOLD_AT, how=hold)
    try:
        yield started, release
    finally:
        release.set()
        faults.disarm()


def test_a_second_request_while_the_first_runs_is_409_with_retry_after(
    client: httpx.Client,
) -> None:
    answers: list[httpx.Response] = []
    with held_at_first_step() as (started, release):
        first = threading.Thread(target=lambda: answers.append(place(client, "order-5")))
        first.start()
        assert started.wait(60.0), "the first request never reached its first step"

        double_click = place(client, "order-5")
        release.set()
        first.join(60.0)

    assert double_click.status_code == 409
    assert problem(double_click) == "in_progress"
    assert double_click.json()["detail"]["retry_after"] == retry_after(double_click)
    [placed] = answers
    assert placed.status_code == 201
    assert double_click.json()["detail"]["saga_id"] == placed.json()["saga_id"]
    assert place(client, "order-5").json() == placed.json()


def test_a_key_another_server_is_running_is_409_with_retry_after(
    client: httpx.Client, db_url: str, tmp_path: Path
) -> None:
    other_server = children.spawn(
        "tests.transactional.fastapi_child",
        [db_url, "order-6", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        children.wait_for(tmp_path / "started", timeout=60.0)
        busy = place(client, "order-6")
        (tmp_path / "go").touch()
        output, _ = other_server.communicate(timeout=60.0)
    finally:
        other_server.kill()
        other_server.wait()

    assert other_server.returncode == 0, output
    assert busy.status_code == 409, busy.text
    assert problem(busy) == "in_progress"
    assert retry_after(busy) > 0
    done = place(client, "order-6")
    assert done.status_code == 201
    assert done.json()["saga_id"] == busy.json()["detail"]["saga_id"]
    assert f'"saga_id": "{done.json()["saga_id"]}"' in output


def test_a_server_that_paused_past_its_lease_answers_409_not_500(
    client: httpx.Client, db_url: str
) -> None:
    """The request's saga was taken over while the server was held (a long pause): its
    next write is fenced out, and the answer says the order is being finished elsewhere."""
    answers: list[httpx.Response] = []
    with held_at_first_step() as (started, release), Coordinator(db_url) as rival:
        first = threading.Thread(target=lambda: answers.append(place(client, "order-8")))
        first.start()
        assert started.wait(60.0), "the request never reached its first step"
        faults.disarm()  # the rival must not be held too
        saga_id = rival.get(key="order-8").id
        rival.register(fastapi_app.order)
        take_over(rival, saga_id)  # as if the server had paused past its lease
        children.wait_until(lambda: rival.get(saga_id).status is SagaStatus.COMPLETED, 60.0)
        release.set()
        first.join(60.0)
    [lost] = answers
    assert lost.status_code == 409, lost.text
    assert problem(lost) == "in_progress"
    assert retry_after(lost) > 0
    done = place(client, "order-8")
    assert done.status_code == 201, done.text
    assert (done.status_code, done.json()["saga_id"]) == (201, saga_id)


def test_a_server_shutting_down_hands_its_sagas_back_and_answers_503(db_url: str) -> None:
    """SIGTERM (here, leaving ``serving``) drains the coordinator: the held request's saga
    is handed back after its step in progress, and the next server finishes it at once."""
    app = fastapi_app.create_app(db_url)
    answers: list[httpx.Response] = []
    with held_at_first_step() as (started, release):
        serving = fastapi_app.serving(db_url, app)
        base = serving.__enter__()
        with httpx.Client(base_url=base, timeout=60.0) as client:
            first = threading.Thread(target=lambda: answers.append(place(client, "order-9")))
            first.start()
            assert started.wait(60.0), "the request never reached its first step"
            stopping = threading.Thread(target=lambda: serving.__exit__(None, None, None))
            stopping.start()
            children.wait_until(lambda: app.state.coord.draining, timeout=60.0)
            release.set()
            first.join(60.0)
            stopping.join(60.0)
    [handed] = answers
    assert handed.status_code == 503, handed.text
    assert problem(handed) == "server_stopping"
    assert retry_after(handed) == 1
    saga_id = handed.json()["detail"]["saga_id"]
    with served(db_url) as next_server, Coordinator(db_url) as reader:
        done = place(next_server, "order-9")  # no lease to wait out
        if done.status_code == 409 and problem(done) == "in_progress":
            # The next server's recovery worker, at its start, took the handed-back saga
            # first (it is stuck from the hand-back on); the client asks again once it ends.
            children.wait_until(lambda: reader.get(saga_id).status.is_finished, timeout=60.0)
            done = place(next_server, "order-9")
    assert (done.status_code, done.json()["saga_id"]) == (201, saga_id), done.text


def test_a_schema_from_another_release_is_503_and_writes_nothing(db_url: str) -> None:
    with Coordinator(db_url) as maker:  # a newer release migrated this database
        maker.create_schema()
    database = create_engine(db_url)
    try:
        with database.begin() as connection:
            connection.execute(text(f"UPDATE {revisions.VERSION_TABLE} SET version_num = '9001'"))
        with served(db_url) as client:
            refused = place(client, "order-10")
        with database.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM saga_instances")).scalar() == 0
    finally:
        database.dispose()
    assert refused.status_code == 503, refused.text
    assert problem(refused) == "schema_mismatch"
    assert retry_after(refused) == fastapi_app.SCHEMA_RETRY_AFTER


# -- no database ----------------------------------------------------------------------------


@pytest.fixture(
    params=[
        "postgresql+psycopg://postgres@127.0.0.1:1/test",  # nothing listens on port 1
        "sqlite:///{tmp}/no/such/directory/saga.db",
    ],
    ids=["postgres-closed-port", "sqlite-missing-directory"],
)
def unreachable(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(request.param).format(tmp=tmp_path)


def test_an_unreachable_database_is_503_with_retry_after_on_every_route(unreachable: str) -> None:
    with served(unreachable) as client:
        answers = [place(client, "order-7"), client.get("/sagas/some-id"), client.get("/metrics")]

    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert problem(answer) == "database_unavailable"
        assert retry_after(answer) == fastapi_app.DATABASE_RETRY_AFTER
        assert "127.0.0.1" not in answer.text  # where the database is stays in the log
        assert "no/such" not in answer.text


# -- the doc ------------------------------------------------------------------------------------

ANSWERS = [
    ("201", None),
    ("409", "key_reused"),
    ("409", "in_progress"),
    ("422", "saga_failed"),
    ("422", "unstorable_input"),
    ("422", "Idempotency-Key"),
    ("503", "database_unavailable"),
    ("503", "server_stopping"),
    ("503", "schema_mismatch"),
    ("404", None),
]
"""Every answer the tests above see: (status, what its row of the doc's table names)."""


def test_the_doc_lists_every_answer_in_its_table() -> None:
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    for status, names in ANSWERS:
        assert any(
            row.startswith(f"| {status} ") and (names is None or names in row) for row in rows
        ), f"docs/examples/fastapi_app.md has no row for {status} {names or ''}"
