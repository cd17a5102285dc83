"""The httpx helper against a real local service: keys sent, answers sorted, probes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from saga.adapters.integrations.http import (
    HTTPRefusedError,
    RetryableHTTPError,
    aprobe,
    arequest,
    probe,
    request,
)

from saga import Coordinator, RetryPolicy, Saga, SagaFailed, SagaStatus, StepContext
from tests.transactional.service import Service

FAST = RetryPolicy(max_attempts=4, initial_delay=0.001, max_delay=0.01)


@pytest.fixture
def service() -> Iterator[Service]:
    with Service() as running:
        yield running


@pytest.fixture
def coordinator(sqlite_url: str) -> Iterator[Coordinator]:
    with Coordinator(sqlite_url, lease_ttl=5.0) as coord:
        yield coord


booking = Saga("tx-http-booking")


@booking.step(retry=FAST)
def book(ctx: StepContext) -> dict[str, object]:
    with httpx.Client(base_url=ctx.data["url"]) as client:
        return request(client, "POST", "/bookings", json={"seat": "1A"}).json()


@book.compensation
def release(ctx: StepContext) -> None:
    with httpx.Client(base_url=ctx.data["url"]) as client:
        if probe(client, f"/bookings/{ctx.idempotency_key}") is None:
            return  # the booking never happened: nothing to release
        # (a real service would be asked to cancel it here)


@booking.step(retry=FAST)
def pay(ctx: StepContext) -> dict[str, object]:
    with httpx.Client(base_url=ctx.data["url"]) as client:
        return request(client, "POST", "/payments").json()


@pytest.mark.parametrize("status", [409, 425, 429, 500, 503])
def test_retryable_answers_are_retried_with_the_same_key(
    coordinator: Coordinator, service: Service, status: int
) -> None:
    service.script("/bookings", status, status)

    view = coordinator.run(booking, data={"url": service.url})

    assert view.status is SagaStatus.COMPLETED
    posts = [h for method, path, h in service.requests if (method, path) == ("POST", "/bookings")]
    assert len(posts) == 3
    assert {h["idempotency-key"] for h in posts} == {f"{view.id}:book"}
    assert view.steps[0].result == {"id": 1, "key": f"{view.id}:book"}


def test_refused_request_is_not_retried_and_the_saga_unwinds(
    coordinator: Coordinator, service: Service
) -> None:
    service.script("/payments", 422)

    with pytest.raises(SagaFailed) as failed:
        coordinator.run(booking, data={"url": service.url})

    assert failed.value.status is SagaStatus.COMPENSATED
    assert isinstance(failed.value.__cause__, HTTPRefusedError)
    payments = [r for r in service.requests if r[1] == "/payments"]
    assert len(payments) == 1
    probes = [r for r in service.requests if r[0] == "GET"]
    assert [path for _, path, _ in probes] == [f"/bookings/{failed.value.saga_id}:book"]


def test_no_answer_is_retryable_and_says_so(service: Service) -> None:
    service.__exit__()  # nothing listens on the port any more
    with httpx.Client() as client, pytest.raises(RetryableHTTPError) as error:
        request(client, "POST", f"{service.url}/bookings", key="k-1")

    assert error.value.status_code is None
    assert isinstance(error.value, ConnectionError)
    assert RetryPolicy().retries(error.value)


def test_answers_carry_status_and_retry_after(service: Service) -> None:
    service.script("/bookings", 429, 404)
    with httpx.Client(base_url=service.url) as client:
        with pytest.raises(RetryableHTTPError) as slow_down:
            request(client, "POST", "/bookings", key="k-2")
        with pytest.raises(HTTPRefusedError) as missing:
            request(client, "POST", "/bookings", key="k-2")
        accepted = request(client, "POST", "/bookings", key="k-2", accept=(404,))

    assert (slow_down.value.status_code, slow_down.value.retry_after) == (429, 1.0)
    assert missing.value.status_code == 404
    assert not RetryPolicy().retries(missing.value)
    assert accepted.json() == {"id": 1, "key": "k-2"}


def test_probe_tells_missing_from_unknown(service: Service) -> None:
    service.script("/bookings/k-3", 503)
    with httpx.Client(base_url=service.url) as client:
        assert probe(client, "/bookings/k-4") is None
        with pytest.raises(RetryableHTTPError):  # "cannot tell now" is never "did not happen"
            probe(client, "/bookings/k-3")
        request(client, "POST", "/bookings", key="k-3")
        found = probe(client, "/bookings/k-3")

    assert found is not None
    assert found.json()["key"] == "k-3"


def test_async_helpers_send_the_key_and_sort_answers(service: Service) -> None:
    service.script("/bookings", 503)

    async def scenario() -> tuple[int, httpx.Response | None, httpx.Response | None]:
        async with httpx.AsyncClient(base_url=service.url) as client:
            try:
                await arequest(client, "POST", "/bookings", key="k-5")
            except RetryableHTTPError as error:
                status = error.status_code or 0
            await arequest(client, "POST", "/bookings", key="k-5")
            return status, await aprobe(client, "/bookings/k-5"), await aprobe(client, "/x/none")

    status, found, missing = asyncio.run(scenario())

    assert status == 503
    assert found is not None
    assert found.json()["key"] == "k-5"
    assert missing is None
    assert [h["idempotency-key"] for m, _, h in service.requests if m == "POST"] == ["k-5"] * 2
