"""Sagas for the admin command's tests, importable as ``tests.cli.steps`` (``--app``).

``cli-order`` is reserve -> charge -> pack -> ship (the pivot). The input
steers it: ``fail_at`` makes a step fail, ``crash_at`` stops the process's
work inside a step's first attempt the way a crash would (nothing records
the outcome), ``kill_at`` kills the process there (SIGKILL), ``fail_attempts``
(step -> attempt numbers) makes those attempts fail, and ``refund_blocked``
names a file whose existence makes the refund fail, so that a test can turn
the failure off from outside the process that runs the compensation.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from saga import RetryPolicy, Saga, StepContext

ONCE = RetryPolicy(max_attempts=1)
ORDER = Saga("cli-order")


class SimulatedCrash(BaseException):
    """Escapes every ``except Exception``: the saga is left exactly as a crash leaves it."""


def _steer(ctx: StepContext) -> None:
    if ctx.data.get("crash_at") == ctx.step and ctx.attempt == 1:
        raise SimulatedCrash(ctx.step)
    if ctx.data.get("kill_at") == ctx.step and ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # a real crash: nothing runs after this
    if ctx.attempt in ctx.data.get("fail_attempts", {}).get(ctx.step, ()):
        raise ConnectionError(f"{ctx.step} attempt {ctx.attempt} timed out")
    if ctx.data.get("fail_at") == ctx.step:
        raise ValueError(f"{ctx.step} refused the order")


@ORDER.step(retry=ONCE)
def reserve(ctx: StepContext) -> dict[str, Any]:
    _steer(ctx)
    return {"reserved": ctx.data["sku"]}


@reserve.compensation(retry=ONCE)
def release(ctx: StepContext) -> None:
    _steer_undo(ctx)


@ORDER.step(retry=RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.001))
def charge(ctx: StepContext) -> dict[str, Any]:
    _steer(ctx)
    return {"charged": ctx.data["amount"]}


@charge.compensation(retry=ONCE)
def refund(ctx: StepContext) -> None:
    blocker = ctx.data.get("refund_blocked")
    if blocker and os.path.exists(blocker):
        raise ConnectionError("payment provider unreachable")


@ORDER.step(retry=ONCE)
def pack(ctx: StepContext) -> str:
    _steer(ctx)
    return "box-1"


@ORDER.step(pivot=True, retry=ONCE)
def ship(ctx: StepContext) -> dict[str, str]:
    _steer(ctx)
    return {"parcel": "P-" + ctx.data["sku"]}


def _steer_undo(ctx: StepContext) -> None:
    if ctx.data.get("undo_fail_at") == ctx.step:
        raise RuntimeError(f"cannot undo {ctx.step}")


# -- a context-manager saga's functions ---------------------------------------------------


def debit(account: str, amount: int) -> dict[str, Any]:
    return {"account": account, "debited": amount}


def credit_back(result: dict[str, Any] | None, account: str, amount: int) -> None:
    """Idempotent: crediting back what was never debited is a no-op."""


GATHERED = Saga("cli-gathered")
"""One step, ``gather``, that dies in its first process and, in the process that recovers
it, returns only once ``data["parties"]`` sagas run it at the same time."""
_BARRIERS: dict[int, threading.Barrier] = {}
_BARRIERS_LOCK = threading.Lock()


@GATHERED.step(retry=RetryPolicy(max_attempts=2))  # its first attempt dies with its process
def gather(ctx: StepContext) -> str:
    if ctx.epoch == 1:
        raise SimulatedCrash("gather")
    parties = int(ctx.data["parties"])
    with _BARRIERS_LOCK:
        barrier = _BARRIERS.setdefault(parties, threading.Barrier(parties, timeout=120))
    barrier.wait()  # BrokenBarrierError (the saga fails) unless they are all in flight at once
    return "gathered"
