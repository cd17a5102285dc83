"""An order whose stock reservation lives in a participant's own database, behind
:class:`saga.adapters.integrations.fencing.EffectFence`.

``reserve`` inserts a reservation, ``release`` (its compensation) deletes it;
``charge`` always declines, so a run that gets that far is compensated. With
``freeze`` in the input, ``reserve`` under epoch 1 (the first owner) stops its
process with SIGSTOP before it calls the participant: a zombie whose late call
comes after a recoverer compensated the saga. Every call and its decision is
kept in the participant's ``calls`` table, in order, with the effect.
"""

from __future__ import annotations

import signal
from functools import cache
from typing import Any

from saga.adapters.integrations.fencing import Decision, EffectFence, EffectKey
from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    insert,
    select,
)

from saga import RetryPolicy, Saga, StepContext
from saga._internal import faults

metadata = MetaData()
reservations = Table(
    "reservations",
    metadata,
    Column("key", EffectKey(), primary_key=True),  # as exact as the fence's keys
    Column("sku", String(40), nullable=False),
)
calls = Table(
    "calls",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("epoch", Integer, nullable=False),
    Column("direction", String(8), nullable=False),
    Column("go", Boolean, nullable=False),
    Column("reason", String(200), nullable=False),
)
fence = EffectFence(metadata=metadata)


@cache
def participant(url: str) -> Engine:
    return create_engine(url)


def create(url: str) -> None:
    metadata.create_all(participant(url))


def _noted(connection: Any, ctx: StepContext, direction: str, decision: Decision) -> None:
    row = {"epoch": ctx.epoch, "direction": direction, "go": decision.go}
    connection.execute(insert(calls).values(reason=decision.reason, **row))


order = Saga("fenced-order")


@order.step
def reserve(ctx: StepContext) -> None:
    if ctx.data.get("freeze") and ctx.epoch == 1:
        faults.signal_here(signal.SIGSTOP)  # a long pause: the lease runs out meanwhile
    with participant(ctx.data["participant"]).begin() as connection:
        decision = fence.forward(connection, ctx)
        if decision:
            row = {"key": ctx.idempotency_key, "sku": ctx.data["sku"]}
            connection.execute(insert(reservations).values(row))
        _noted(connection, ctx, "forward", decision)


@reserve.compensation
def release(ctx: StepContext) -> None:
    with participant(ctx.data["participant"]).begin() as connection:
        decision = fence.undo(connection, ctx)
        if decision:
            gone = reservations.c.key == ctx.idempotency_key
            connection.execute(delete(reservations).where(gone))
        _noted(connection, ctx, "undo", decision)


class Declined(Exception):
    """Not transient: the saga unwinds at once."""


@order.step(retry=RetryPolicy(max_attempts=1))
def charge(ctx: StepContext) -> None:
    raise Declined("card declined")


def history(url: str) -> list[tuple[int, str, bool]]:
    """Every call to the participant, in order: (epoch, direction, went ahead)."""
    with participant(url).connect() as connection:
        rows = connection.execute(select(calls).order_by(calls.c.id)).all()
    return [(row.epoch, row.direction, row.go) for row in rows]


def reserved(url: str) -> list[str]:
    with participant(url).connect() as connection:
        return list(connection.execute(select(reservations.c.key)).scalars())
