"""The sagas of the sibling-commit tests (test_sibling_commits.py), declared at import.

Two root steps run at once (``max_concurrency=2``), and ``c`` runs after ``b``:

* ``a``, transactional: writes one row into ``ack_done`` through ``ctx.session``;
  its compensation, transactional too, one row into ``ack_undone``;
* ``b``, plain (or transactional, writing one row into ``ack_sibling``);
* ``c``, plain.

So a row counted twice is a step's work applied twice. How the steps behave
travels in the saga's input:

* ``wait``: ``{step: gate}``: the step's first attempt waits until that gate (a
  ``threading.Event`` the test registered with :func:`gates`) is set;
* ``flaky``: this step's first attempt then raises :class:`Transient` (retried);
* ``fail``: this step then raises :class:`StepFailure` (the saga unwinds).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select
from sqlalchemy.pool import NullPool

from saga import RetryPolicy, Saga, SagaStatus, StepContext, current_step
from tests import postgres

GATE_LIMIT = 30.0
"""A gated step gives up after this long (s), failing its saga with the gate's name."""

UNDO_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.01, retry_on=())


class Transient(Exception):
    """A step's first attempt failed; it is retried."""


class StepFailure(Exception):
    """A step's business failure: not retried, so the saga unwinds."""


class GateTimeout(Exception):
    """A gate was never opened: the test's ordering did not happen (never retried)."""


RETRY = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.01, retry_on=(Transient,))

# -- gates -------------------------------------------------------------------------------------

_gates: dict[str, threading.Event] = {}


@contextlib.contextmanager
def gates(**events: threading.Event) -> Iterator[None]:
    """Make ``events`` the gates a saga's input may name, for the ``with`` block."""
    _gates.update(events)
    try:
        yield
    finally:
        for name in events:
            _gates.pop(name, None)


def _behave(data: dict[str, Any], step: str, attempt: int) -> None:
    gate = data.get("wait", {}).get(step)
    if gate is not None and attempt == 1 and not _gates[gate].wait(GATE_LIMIT):
        raise GateTimeout(f"step {step!r}: gate {gate!r} not opened within {GATE_LIMIT}s")
    if data.get("flaky") == step and attempt == 1:
        raise Transient(f"{step}: first attempt fails")
    if data.get("fail") == step:
        raise StepFailure(f"{step} failed")


# -- the steps' own tables ---------------------------------------------------------------------

metadata = MetaData()
done = Table(
    "ack_done",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("saga_id", String(36), nullable=False),
    Column("step", String(50), nullable=False),
)
undone = done.to_metadata(metadata, name="ack_undone")
sibling = done.to_metadata(metadata, name="ack_sibling")


def create_tables(url: str) -> None:
    engine = postgres.engine(url, poolclass=NullPool)
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()


def rows(url: str, saga_id: str) -> dict[str, int]:
    """How many rows of the saga each table has (tables without any left out)."""
    engine = postgres.engine(url, poolclass=NullPool)
    counts: dict[str, int] = {}
    try:
        with engine.connect() as connection:
            for table in (done, undone, sibling):
                query = select(table.c.id).where(table.c.saga_id == saga_id)
                found = len(connection.execute(query).all())
                if found:
                    counts[table.name] = found
    finally:
        engine.dispose()
    return counts


def _write(ctx: StepContext, table: Table) -> None:
    ctx.session.execute(insert(table).values(saga_id=ctx.saga_id, step=ctx.step))


# -- declarative sagas ------------------------------------------------------------------------


def tx_step(ctx: StepContext) -> dict[str, str]:
    _behave(ctx.data, ctx.step, ctx.attempt)
    _write(ctx, done if ctx.step == "a" else sibling)
    return {"step": ctx.step}


def tx_undo(ctx: StepContext) -> None:
    _write(ctx, undone)


def plain_step(ctx: StepContext) -> dict[str, str]:
    _behave(ctx.data, ctx.step, ctx.attempt)
    return {"step": ctx.step}


def plain_undo(ctx: StepContext) -> None:
    """Nothing to undo: a plain step's effects are not what these tests count."""


def _declare(name: str, a_tx: bool = True, b_tx: bool = False, parallel: bool = True) -> Saga:
    saga = Saga(name, max_concurrency=2 if parallel else 1)
    root = () if parallel else None
    kinds: list[tuple[str, bool, tuple[str, ...] | None]] = [
        ("a", a_tx, root),
        ("b", b_tx, root),
        ("c", False, ("b",)),
    ]
    for step_name, transactional, after in kinds:
        fn, undo = (tx_step, tx_undo) if transactional else (plain_step, plain_undo)
        declared = saga.step(name=step_name, after=after, transactional=transactional, retry=RETRY)(
            fn
        )
        declared.compensation(retry=UNDO_RETRY)(undo)
    return saga


SEQUENTIAL = _declare("ack-sequential", parallel=False)
PARALLEL = _declare("ack-parallel")
PARALLEL_TX = _declare("ack-parallel-tx", b_tx=True)
PLAIN_ROOTS = _declare("ack-parallel-plain", a_tx=False)
SAGAS = (SEQUENTIAL, PARALLEL, PARALLEL_TX, PLAIN_ROOTS)

# -- a context-manager saga with ``s.parallel`` (importable: stored by reference) -------------

CONTEXT = "ack-context"


def cm_tx(data: dict[str, Any]) -> dict[str, str]:
    ctx = current_step()
    _behave(data, ctx.step, ctx.attempt)
    _write(ctx, done)
    return {"step": ctx.step}


def cm_tx_undo(result: Any, data: dict[str, Any]) -> None:
    del result, data
    _write(current_step(), undone)


def cm_plain(data: dict[str, Any]) -> dict[str, str]:
    ctx = current_step()
    _behave(data, ctx.step, ctx.attempt)
    return {"step": ctx.step}


def cm_undo(result: Any, data: dict[str, Any]) -> None:
    del result, data


def run_block(coord: Any, key: str, data: dict[str, Any]) -> SagaStatus:
    """``a`` (transactional) and ``b`` in one ``s.parallel``, then ``c``; the final status."""
    with coord.saga(CONTEXT, key=key) as s:
        a = s.call(
            cm_tx, data, compensate=cm_tx_undo, transactional=True, step_name="a", retry=RETRY
        )
        b = s.call(cm_plain, data, compensate=cm_undo, step_name="b", retry=RETRY)
        s.parallel(a, b)
        s.step(cm_plain, data, compensate=cm_undo, step_name="c", retry=RETRY)
    status: SagaStatus = s.status
    return status
