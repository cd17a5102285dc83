"""A small application for the transactional tests: an effect table and sagas that write it.

``tx_effects`` lives in the saga store's own database and stands for the
application's tables. Every forward action inserts one ``do`` row and every
compensation one ``undo`` row through ``ctx.session``; the table has no
unique key, so an effect applied twice would show as two rows. Each
action returns the id of the row it inserted, so the recorded result can be
matched against the row that committed with it.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.engine import Row

from saga import Saga, StepContext, current_step

metadata = MetaData()
effects = Table(
    "tx_effects",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("saga_id", String(36), nullable=False),
    Column("step", String(50), nullable=False),
    Column("kind", String(4), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("pid", Integer, nullable=False),
)


class Refused(Exception):
    """A business failure: never retried, so the saga unwinds."""


def create_tables(url: str) -> None:
    engine = create_engine(url)
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()


def read_effects(url: str) -> list[Row[Any]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(select(effects).order_by(effects.c.id)))
    finally:
        engine.dispose()


def write_effect(ctx: StepContext, kind: str) -> int:
    """Insert one effect row through the step's session; return its id."""
    assert ctx.session is not None, "a transactional step always has a session"
    values = {
        "saga_id": ctx.saga_id,
        "step": ctx.step,
        "kind": kind,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
    }
    return int(ctx.session.execute(insert(effects).values(values)).inserted_primary_key[0])


# -- declarative ---------------------------------------------------------------------------


def act(ctx: StepContext) -> dict[str, int]:
    row = write_effect(ctx, "do")
    if ctx.data.get("fail") == ctx.step:  # written, then refused: the transaction rolls back
        raise Refused(f"{ctx.step} refused")
    return {"row": row}


def undo(ctx: StepContext) -> None:
    write_effect(ctx, "undo")


def declare(name: str, steps: int = 2, on_crash: str = "resume") -> Saga:
    saga = Saga(name, on_crash="compensate" if on_crash == "compensate" else "resume")
    for number in range(1, steps + 1):
        saga.step(name=f"s{number}", transactional=True)(act).compensation(undo)
    return saga


FORWARD = declare("tx-forward")
ON_CRASH = declare("tx-on-crash", on_crash="compensate")


# -- context manager -----------------------------------------------------------------------


def cm_act(fail: bool = False) -> dict[str, int]:
    ctx = current_step()
    row = write_effect(ctx, "do")
    if fail:
        raise Refused(f"{ctx.step} refused")
    return {"row": row}


def cm_undo(result: Any, fail: bool = False) -> None:
    del result, fail
    write_effect(current_step(), "undo")
