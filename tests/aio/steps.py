"""Module-level step functions for the context-manager tests (they must be importable).

Every call is logged in ``LOG`` (thread-safe). ``STORE`` is the store of the
test's coordinator, so that a step can wait until another step's outcome is
durable: that orders completions without timing. The ``log`` fixture resets
both around each test.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from saga import StepStatus, current_step
from saga._internal.ports import SagaStore
from tests.aio.support import step_status, wait_for_step

LOG: list[tuple[Any, ...]] = []
_LOCK = threading.Lock()
STORE: list[SagaStore] = []
RELEASE = threading.Event()
"""Set at the end of each test: steps that wait forever (timeouts) return then."""
BARRIERS: dict[str, threading.Barrier] = {}
CRASHES: dict[str, int] = {}


class Crash(BaseException):
    """The process dying mid-step: nothing unwinds it."""


def note(*entry: Any) -> None:
    with _LOCK:
        LOG.append(entry)


def _wait_for(step: str, status: StepStatus) -> None:
    wait_for_step(STORE[0], current_step().saga_id, step, status)


def book(item: str) -> str:
    note("book", item, current_step().step, current_step().attempt)
    return f"{item}-booked"


def unbook(result: str | None, item: str) -> None:
    note("unbook", item, result)


def book_after(item: str, other: str, status: str = "succeeded") -> str:
    """Book once step ``other`` is durably ``status``: completions in a known order."""
    _wait_for(other, StepStatus(status))
    return book(item)


def unbook_after(result: str | None, item: str, other: str, status: str = "succeeded") -> None:
    unbook(result, item)


def meet(item: str, barrier: str) -> str:
    """Book once every party of ``BARRIERS[barrier]`` is running: proof they overlap."""
    ctx = current_step()
    note("saw", item, step_status(STORE[0], ctx.saga_id, ctx.step))
    BARRIERS[barrier].wait()
    return book(item)


def unmeet(result: str | None, item: str, barrier: str) -> None:
    unbook(result, item)


def refuse(item: str) -> str:
    note("refuse", item)
    raise ValueError(f"{item} refused")


def refuse_after(item: str, other: str, status: str = "succeeded") -> str:
    _wait_for(other, StepStatus(status))
    return refuse(item)


def crash_after(item: str, other: str) -> str:
    """Dies (``Crash``) once ``other`` succeeded, while ``CRASHES[item]`` > 0."""
    if CRASHES.get(item, 0) > 0:
        _wait_for(other, StepStatus.SUCCEEDED)
        CRASHES[item] -= 1
        note("crash", item)
        raise Crash(item)
    return book(item)


def hang(item: str) -> str:
    """Runs far past any timeout (until the test ends)."""
    note("hang", item, current_step().attempt)
    RELEASE.wait(60)
    return item


async def abook(item: str) -> str:
    await asyncio.sleep(0)
    note("abook", item, current_step().step, current_step().attempt)
    return f"{item}-booked"


async def aunbook(result: str | None, item: str) -> None:
    note("aunbook", item, result)


async def ahang(item: str) -> str:
    """An async step that never finishes by itself: only cancellation ends it."""
    note("ahang", item, current_step().attempt)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        note("ahang cancelled", item)
        raise
    return item


async def arefuse_after(item: str, other: str) -> str:
    """Fails once ``other`` is durably running (it is, from the group's start)."""
    await asyncio.to_thread(_wait_for, other, StepStatus.RUNNING)
    note("arefuse", item)
    raise ValueError(f"{item} refused")


async def aunbook_after(result: str | None, item: str, other: str) -> None:
    note("aunbook", item, result)
