"""The sagas the fault tests run, declared at import so any process can resume them.

Steps are named ``s1``..``sN`` and record every call in the crash tests' effect
ledger (:mod:`tests.crash.ledger`), so the crash tests' invariant checks apply
as they are. How a step misbehaves travels in the saga's input (``how``):

* ``abandon``: on its first attempt the step gives up the saga as a dying
  process would (:class:`Abandon`, a ``BaseException``: nothing unwinds, the
  lease is no longer renewed). Only the seeding child uses it, and that
  child is then killed with SIGKILL.
* ``freeze``: after acting, the step stops its own process with SIGSTOP
  (heartbeat included), so its lease runs out while it is frozen: on its
  first attempt, or, with ``freeze_epoch``, under that epoch (a recoverer's
  claim) only. The step holds :data:`FREEZE_GUARD` while it is stopped.
* ``hold`` / ``hold_undo``: the step (or its compensation) waits until the
  file ``gate`` exists, so a test can act while sagas are mid-step.
* ``fail``: the step acts, then raises :class:`StepFailure` (never retried).
* ``nap``: every action and compensation sleeps this long (s) first.

``faults-tx`` has a transactional first step whose effect is a row in
``fault_effects`` in the saga database itself: exactly once, or not at all.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Column, MetaData, String, Table, delete, insert
from sqlalchemy.pool import NullPool

from saga import RetryPolicy, Saga, StepContext, current_step
from saga._internal import faults
from tests import postgres
from tests.crash import ledger

HOLD_LIMIT = 60.0
"""A held step gives up waiting after this long (s): nothing hangs for ever."""

STEPS = 3


class Abandon(BaseException):
    """The process gives the saga up as if it had died here."""


class StepFailure(Exception):
    """A step's business failure: not retried, so the saga unwinds."""


def names(count: int = STEPS) -> list[str]:
    return [f"s{n}" for n in range(1, count + 1)]


def how(book: str, **misbehave: str) -> dict[str, Any]:
    """A saga input: the ledger path and how the steps misbehave."""
    return {"ledger": book, **misbehave}


def _wait_for(gate: str) -> None:
    deadline = time.monotonic() + HOLD_LIMIT
    while not Path(gate).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.005)


FREEZE_GUARD = threading.RLock()
"""Held by a step while it stops its process. A child that takes it around its store
calls (:func:`tests.faults.child.freeze_between_store_calls`) is never frozen inside
one, holding SQLite's write lock or a PostgreSQL row lock. Reentrant: a transactional
step freezes inside its own store call (``transact``)."""


def _freezes_now(data: dict[str, Any], ctx: StepContext) -> bool:
    if "freeze_epoch" in data:
        return bool(ctx.epoch == data["freeze_epoch"])
    return ctx.attempt == 1


def act(data: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
    """A step's action: wait if held, record the call, apply the effect, misbehave if told."""
    book, step = data["ledger"], ctx.step
    time.sleep(data.get("nap", 0.0))
    if data.get("hold") == step and ctx.attempt == 1:
        _wait_for(data["gate"])
    if data.get("abandon") == step and ctx.attempt == 1:
        ledger.attempted(book, ctx.saga_id, step, ctx.attempt, ctx.epoch)
        raise Abandon(step)
    ledger.do(book, ctx.saga_id, step, ctx.idempotency_key, ctx.attempt, ctx.epoch)
    if data.get("freeze") == step and _freezes_now(data, ctx):
        with FREEZE_GUARD:
            faults.signal_here(signal.SIGSTOP)
    if data.get("fail") == step:
        raise StepFailure(f"{step} failed after acting")
    return {"step": step, "key": ctx.idempotency_key}


def undo(data: dict[str, Any], ctx: StepContext) -> None:
    time.sleep(data.get("nap", 0.0))
    if data.get("hold_undo") == ctx.step and ctx.attempt == 1:
        _wait_for(data["gate"])
    ledger.undo(data["ledger"], ctx.saga_id, ctx.step, ctx.attempt, ctx.epoch)


def declared_action(ctx: StepContext) -> dict[str, Any]:
    return act(ctx.data, ctx)


def declared_undo(ctx: StepContext) -> None:
    undo(ctx.data, ctx)


FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.01, jitter=0.0)
FAST_UNDO = RetryPolicy(
    max_attempts=5, initial_delay=0.001, max_delay=0.01, jitter=0.0, retry_on=(Exception,)
)


def _declare(name: str, count: int, on_crash: Any = "resume") -> Saga:
    saga = Saga(name, on_crash=on_crash)
    for step_name in names(count):
        step = saga.step(name=step_name, retry=FAST)(declared_action)
        step.compensation(retry=FAST_UNDO)(declared_undo)
    return saga


PLAIN = _declare("faults-3", STEPS)
"""s1 -> s2 -> s3, each compensatable; a crashed saga resumes forward."""

UNWINDING = _declare("faults-3-oc", STEPS, on_crash="compensate")
"""The same steps; a crashed saga is compensated."""

EVOLVED = os.environ.get("SAGA_FAULTS_EVOLVED") == "1"
"""Set in a child process: it declares ``faults-evolving`` as a later release would."""


def _pivoted() -> Saga:
    saga = Saga("faults-pivot")
    first = saga.step(name="s1", retry=FAST)(declared_action)
    first.compensation(retry=FAST_UNDO)(declared_undo)
    saga.step(name="s2", pivot=True, retry=FAST)(declared_action)
    saga.step(name="s3", retriable=True)(declared_action)
    return saga


PIVOTED = _pivoted()
"""s1 (compensatable) -> s2 (the pivot) -> s3 (retriable): once s2 may have acted,
the saga only goes forward."""


def _evolving() -> Saga:
    """s1 -> s2 -> s3; in the later release s1 -> s3 -> s2: the same names, reordered."""
    saga = _declare("faults-evolving", STEPS)
    if EVOLVED:
        saga.steps[1].after, saga.steps[2].after = ("s3",), ("s1",)
    return saga


EVOLVING = _evolving()


# -- context-manager steps (importable: stored by reference) --------------------------------


def cm_action(data: dict[str, Any]) -> dict[str, Any]:
    return act(data, current_step())


def cm_undo(result: Any, data: dict[str, Any]) -> None:
    del result
    undo(data, current_step())


CONTEXT = "faults-cm"


def run_block(coord: Any, name: str, key: str, data: dict[str, Any], count: int = STEPS) -> Any:
    """A context-manager saga of ``count`` ledger steps; its final status."""
    with coord.saga(name, key=key) as s:
        for step_name in names(count):
            s.step(cm_action, data, compensate=cm_undo, step_name=step_name, retry=FAST)
    return s.status


# -- a transactional step: its effect is a row in the saga database --------------------------

metadata = MetaData()
effects = Table(
    "fault_effects",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("saga_id", String(36), nullable=False),
)


def create_effects_table(url: str) -> None:
    engine = postgres.engine(url, poolclass=NullPool)
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()


def count_effects(url: str) -> dict[str, int]:
    """How many ``fault_effects`` rows each saga has."""
    engine = postgres.engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.execute(effects.select()).all()
    finally:
        engine.dispose()
    found: dict[str, int] = {}
    for row in rows:
        found[row.saga_id] = found.get(row.saga_id, 0) + 1
    return found


TRANSACTIONAL = Saga("faults-tx")


@TRANSACTIONAL.step(name="s1", transactional=True, retry=FAST)
def reserve(ctx: StepContext) -> dict[str, Any]:
    ctx.session.execute(insert(effects).values(key=ctx.idempotency_key, saga_id=ctx.saga_id))
    if ctx.data.get("freeze") == ctx.step and ctx.attempt == 1:  # frozen mid-transaction
        faults.signal_here(signal.SIGSTOP)
    return {"reserved": ctx.idempotency_key}


@reserve.compensation(retry=FAST_UNDO)
def release(ctx: StepContext) -> None:
    ctx.session.execute(delete(effects).where(effects.c.key == ctx.idempotency_key))


@TRANSACTIONAL.step(name="s2", retry=FAST)
def second(ctx: StepContext) -> dict[str, Any]:
    return act(ctx.data, ctx)


@second.compensation(retry=FAST_UNDO)
def undo_second(ctx: StepContext) -> None:
    undo(ctx.data, ctx)


# -- parallel and async declarative sagas --------------------------------------------------


def _parallel() -> Saga:
    saga = Saga("faults-parallel", max_concurrency=2)
    for step_name, after in (("s1", ()), ("s2", ("s1",)), ("s3", ("s1",))):
        step = saga.step(name=step_name, after=after, retry=FAST)(declared_action)
        step.compensation(retry=FAST_UNDO)(declared_undo)
    return saga


PARALLEL = _parallel()
"""s1, then s2 and s3 at once: the stack holds s2 and s3 in the order they started."""


async def async_action(ctx: StepContext) -> dict[str, Any]:
    await asyncio.sleep(ctx.data.get("nap", 0.0))
    return act({**ctx.data, "nap": 0.0}, ctx)


async def async_undo(ctx: StepContext) -> None:
    await asyncio.sleep(ctx.data.get("nap", 0.0))
    undo({**ctx.data, "nap": 0.0}, ctx)


def _async() -> Saga:
    saga = Saga("faults-async")
    for step_name in names():
        step = saga.step(name=step_name, retry=FAST)(async_action)
        step.compensation(retry=FAST_UNDO)(async_undo)
    return saga


ASYNC = _async()
"""s1 -> s2 -> s3 as coroutines: run by an ``AsyncCoordinator``, resumable by any process."""

SAGAS = {
    saga.name: saga
    for saga in (PLAIN, UNWINDING, EVOLVING, TRANSACTIONAL, PIVOTED, PARALLEL, ASYNC)
}
