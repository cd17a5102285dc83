"""Calling HTTP services from steps with httpx: idempotency keys and retryable answers.

Every request carries an ``Idempotency-Key`` header, by default the running
step's ``idempotency_key`` (stable across attempts, crashes and processes),
so a service that honours it applies a retried request once. Answers are
sorted into three kinds::

    2xx, 3xx                      the response is returned
    409, 425, 429, 5xx, no answer RetryableHTTPError: a ConnectionError, so the
                                  default RetryPolicy retries it with backoff
    any other 4xx                 HTTPRefusedError: a definite "no"; not retried,
                                  the saga unwinds

409 is "a request with this key is still in progress" in the IETF
Idempotency-Key draft, 425 "too early", 429 "slow down": each is worth
another attempt with the same key. A request that got no answer (connection
refused, reset, timed out) may or may not have been applied; retrying it
with the same key is what makes that safe.

``request``/``probe`` take an ``httpx.Client``; ``arequest``/``aprobe`` an
``httpx.AsyncClient``. Install with the ``http`` extra (``saga[http]``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import httpx

from saga._internal.context import current_step
from saga._internal.signature import taking

__all__ = [
    "IDEMPOTENCY_HEADER",
    "HTTPRefusedError",
    "RetryableHTTPError",
    "aprobe",
    "arequest",
    "checked",
    "idempotency_headers",
    "probe",
    "request",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRYABLE_STATUS_CODES = frozenset({409, 425, 429})
MISSING_STATUS_CODES = frozenset({404, 410})
_SNIPPET = 200


class RetryableHTTPError(ConnectionError):
    """The service did not take the request now (409/425/429/5xx, or no answer).

    A ``ConnectionError``, so the default ``RetryPolicy`` retries the step.
    ``status_code`` is None when no answer came; ``retry_after`` is the
    service's ``Retry-After`` in seconds, when it gave one.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class HTTPRefusedError(Exception):
    """The service refused the request for good (a 4xx other than 409/425/429)."""

    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


def idempotency_headers(key: str | None = None) -> dict[str, str]:
    """``{"Idempotency-Key": key}``; by default the running step's idempotency key."""
    return {IDEMPOTENCY_HEADER: key if key is not None else current_step().idempotency_key}


def checked(response: httpx.Response, accept: Iterable[int] = ()) -> httpx.Response:
    """``response`` if it succeeded (or its status is in ``accept``); else raise the
    error that says whether to try again."""
    code = response.status_code
    if code < 400 or code in set(accept):
        return response
    request = response.request
    text = f"{request.method} {request.url} answered {code} {response.reason_phrase}"
    snippet = response.text[:_SNIPPET].strip()
    message = f"{text}: {snippet}" if snippet else text
    if code in RETRYABLE_STATUS_CODES or code >= 500:
        retry_after = _seconds(response.headers.get("Retry-After"))
        raise RetryableHTTPError(message, status_code=code, retry_after=retry_after)
    raise HTTPRefusedError(message, status_code=code)


@dataclasses.dataclass(frozen=True)
class _Sending:
    """A request as ``request`` and ``arequest`` send it: the idempotency key in its
    headers, and what else the client takes in ``options``."""

    method: str
    url: str
    headers: dict[str, str]
    accept: Iterable[int]
    options: dict[str, Any]


def _sending(
    method: str,
    url: str,
    *,
    key: str | None = None,
    accept: Iterable[int] = (),
    headers: Mapping[str, str] | None = None,
    **options: Any,
) -> _Sending:
    """The arguments of ``request`` and ``arequest`` after the client, written once (see
    :mod:`saga._internal.signature`)."""
    merged = {**(headers or {}), **idempotency_headers(key)}
    return _Sending(method, url, merged, accept, options)


@taking(_sending)
def request(client: httpx.Client, sending: _Sending) -> httpx.Response:
    """Send ``method url`` with the idempotency key; see the module for what is raised."""
    with _answered(sending.method, sending.url):
        response = client.request(
            sending.method, sending.url, headers=sending.headers, **sending.options
        )
    return checked(response, sending.accept)


@taking(_sending)
async def arequest(client: httpx.AsyncClient, sending: _Sending) -> httpx.Response:
    """The asyncio twin of :func:`request`."""
    with _answered(sending.method, sending.url):
        response = await client.request(
            sending.method, sending.url, headers=sending.headers, **sending.options
        )
    return checked(response, sending.accept)


def probe(client: httpx.Client, url: str, **options: Any) -> httpx.Response | None:
    """Ask the service whether something exists ("did my request happen?").

    ``GET url``: the response when it does, ``None`` on 404/410. A service
    that cannot answer now raises ``RetryableHTTPError``, never ``None``:
    "I don't know" must not be mistaken for "it did not happen".
    """
    with _answered("GET", url):
        response = client.get(url, **options)
    return _probed(response)


async def aprobe(client: httpx.AsyncClient, url: str, **options: Any) -> httpx.Response | None:
    """The asyncio twin of :func:`probe`."""
    with _answered("GET", url):
        response = await client.get(url, **options)
    return _probed(response)


@contextlib.contextmanager
def _answered(method: str, url: str) -> Iterator[None]:
    """A request that got no answer (refused, reset, timed out) raises
    ``RetryableHTTPError``: it may or may not have been applied."""
    try:
        yield
    except httpx.TransportError as error:
        kind = type(error).__name__
        raise RetryableHTTPError(f"{method} {url} got no answer ({kind}: {error})") from error


def _probed(response: httpx.Response) -> httpx.Response | None:
    if response.status_code in MISSING_STATUS_CODES:
        return None
    return checked(response)


def _seconds(value: str | None) -> float | None:
    """``Retry-After`` in seconds; None when absent or given as an HTTP date."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
