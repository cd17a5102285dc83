"""Sagas for the web console's tests, importable as ``tests.web.steps`` (``--app``).

``web-fanout`` runs ``left`` and ``right`` side by side (each waits for the
other to have started, so they truly overlap), then ``join``. ``web-hang``
does ``prepare``, then ``hang`` says it is inside its action (a file) and
waits there until its process is killed.
"""

from __future__ import annotations

import pathlib
import threading
from typing import Any

from saga import RetryPolicy, Saga, StepContext

ONCE = RetryPolicy(max_attempts=1)
FANOUT = Saga("web-fanout", max_concurrency=2)
HANG = Saga("web-hang")
_BOTH_STARTED = threading.Barrier(2)


@FANOUT.step(after=(), retry=ONCE)
def left(ctx: StepContext) -> str:
    _BOTH_STARTED.wait(timeout=30)
    return "L"


@FANOUT.step(after=(), retry=ONCE)
def right(ctx: StepContext) -> str:
    _BOTH_STARTED.wait(timeout=30)
    return "R"


@FANOUT.step(after=("left", "right"), retry=ONCE)
def join(ctx: StepContext) -> dict[str, Any]:
    return {"joined": [ctx.results["left"], ctx.results["right"]]}


@HANG.step(retry=ONCE)
def prepare(ctx: StepContext) -> str:
    return "prepared"


@prepare.compensation
def unprepare(ctx: StepContext) -> None:
    """Nothing outside to undo in the test."""


@HANG.step(retry=ONCE)
def hang(ctx: StepContext) -> None:
    pathlib.Path(ctx.data["ready"]).touch()
    threading.Event().wait(600)  # until SIGKILL


# -- retried forward and backward ----------------------------------------------------------

FLAKY = Saga("web-flaky")
_WAIT = RetryPolicy(max_attempts=3, initial_delay=0.05, max_delay=0.05, retry_on=(ConnectionError,))
_WAIT_ONCE = RetryPolicy(
    max_attempts=2, initial_delay=0.05, max_delay=0.05, retry_on=(ConnectionError,)
)


@FLAKY.step(retry=ONCE)
def book(ctx: StepContext) -> dict[str, str]:
    return {"booking": "B-1"}


@book.compensation
def unbook(ctx: StepContext) -> None:
    """Cancelling a booking that is already gone is fine."""


@FLAKY.step(retry=_WAIT)
def pay(ctx: StepContext) -> None:
    raise ConnectionError("payment provider unreachable")


@pay.compensation(retry=_WAIT_ONCE)
def refund(ctx: StepContext) -> None:
    if ctx.attempt == 1:
        raise ConnectionError("refund timed out; retrying")


# -- a context-manager saga whose participant is down while a file exists -------------------


def transfer(account: str, amount: int, down: str) -> dict[str, Any]:
    return {"account": account, "paid": amount}


def reverse(result: dict[str, Any] | None, account: str, amount: int, down: str) -> None:
    """Idempotent: reversing what was never transferred is a no-op. Fails while ``down`` exists."""
    if pathlib.Path(down).exists():
        raise ConnectionError("bank unreachable")
