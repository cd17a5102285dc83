"""The SQL store's saga writes: creation, fenced commits, and the check after a lost
acknowledgement. The portable path; the dialects' hot paths write the same rows.

Each function runs in the caller's transaction (``connection``). A commit is
fenced by the saga's epoch: the saga row is updated first, only while the
epoch is the commit's, and when that matches nothing, ``LeaseLostError``
rolls the transaction back with nothing written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, Label, and_, insert, or_, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from saga._internal.errors import LeaseLostError
from saga._internal.ports import Commit, Event, SagaRecord, StepWrite
from saga._internal.status import SagaStatus

from . import folding, reads
from . import tables as t
from .dialect import Dialect
from .messages import clash_not_found, unavailable
from .rows import STEP_UPDATE_COLUMNS, event_values, instance_values, step_values

T = TypeVar("T")
_CONFLICT_SQLSTATES = ("40001", "40P01")  # serialization failure, deadlock detected


def stop(dialect: Dialect) -> Label[bool]:
    """True when the saga must stop at its next step: cancel requested, paused by an
    operator (its owner hands it back), or deadline passed."""
    i = t.instances.c
    deadline_passed = and_(i.deadline.is_not(None), i.deadline < dialect.now())
    paused = i.status == SagaStatus.PAUSED.value
    return or_(i.cancel_requested, paused, deadline_passed).label("stop")


def insert_saga(
    connection: Connection, dialect: Dialect, saga: SagaRecord, first: Commit, lease_ttl: float
) -> bool:
    """Insert ``saga`` and apply ``first``; False (nothing written) when its id or its
    (name, key) is taken."""
    now = dialect.now()
    values = {
        **instance_values(saga),
        "created_at": dialect.creation_time(),
        "updated_at": now,
        "lease_expires_at": now + lease_ttl,
        "commit_token": first.token,
        "deadline": None if saga.deadline is None else now + saga.deadline,
    }
    inserted = connection.execute(
        dialect.insert_ignoring_conflicts(t.instances).values(values).returning(t.instances.c.id)
    ).first()
    if inserted is None:
        return False
    write_body(connection, dialect, first)
    return True


def clash(connection: Connection, saga: SagaRecord) -> tuple[SagaRecord, bool]:
    """The row ``saga`` clashed with: ours (created) if a lost acknowledgement hid our
    insert, else the existing saga with its (name, key) (not created)."""
    mine = reads.load(connection, saga.id)
    if mine is not None:  # ids are fresh uuid4s: a row with ours is our own write
        return mine, True
    assert saga.key is not None
    existing = reads.find(connection, saga.name, saga.key)
    if existing is None:
        raise clash_not_found(saga)
    return existing, False


def landed(connection: Connection, dialect: Dialect, change: Commit) -> bool | None:
    """After a lost acknowledgement: did our earlier attempt commit? (its stop flag if so).

    The saga row's token names the saga's latest commit, which may be a sibling
    step's (parallel steps commit on their own); the step rows a commit wrote keep
    its token until that step is written again, which only its own driver does,
    after this call returns. So either one naming ours proves that it landed.
    """
    i = t.instances.c
    row = connection.execute(
        select(i.commit_token, stop(dialect)).where(i.id == change.saga_id)
    ).first()
    if row is None:
        return None
    if row.commit_token == change.token or _wrote_steps(connection, change):
        return bool(row.stop)
    return None


def _wrote_steps(connection: Connection, change: Commit) -> bool:
    if not change.steps:
        return False
    s = t.steps.c
    found = connection.execute(
        select(s.seq).where(s.saga_id == change.saga_id, s.commit_token == change.token).limit(1)
    ).first()
    return found is not None


def apply(connection: Connection, dialect: Dialect, change: Commit) -> bool:
    """Apply ``change`` fenced by its epoch (``LeaseLostError`` if it moved on); return
    whether the saga must stop."""
    now = dialect.now()
    values: dict[str, Any] = {"updated_at": now, "commit_token": change.token}
    # The lease is left alone (the heartbeat renews it), as on the hot path.
    if change.release:  # expired at once (an unfinished saga shows as stuck), or when due
        values.update(owner=None, lease_expires_at=now + change.release_for)
    if change.status is not None:
        values["status"] = change.status.value
    if change.error is not None:
        values["error"] = change.error
    i = t.instances.c
    row = connection.execute(
        update(t.instances)
        .where(i.id == change.saga_id, i.epoch == change.epoch)
        .values(values)
        .returning(stop(dialect))
    ).first()
    if row is None:
        raise LeaseLostError(change.saga_id, change.epoch)
    write_body(connection, dialect, change)
    return bool(row.stop)


def write_body(connection: Connection, dialect: Dialect, change: Commit) -> None:
    """The commit's steps, in order, then its events (the fence already matched)."""
    for write in change.steps:
        _write_step(connection, dialect, change, write)
    if change.events:
        connection.execute(
            insert(t.events).values(at=dialect.now()),
            [event_values(change.saga_id, change.epoch, e) for e in change.events],
        )


def _write_step(connection: Connection, dialect: Dialect, change: Commit, write: StepWrite) -> None:
    step, saga_id = write.step, change.saga_id
    # The row remembers which commit wrote it: see landed.
    stamped: dict[str, Any] = {"commit_token": change.token}
    if write.stamp:
        stamped[write.stamp + "_at"] = dialect.now()
    values = step_values(step)
    if write.new:
        connection.execute(insert(t.steps).values({**values, "saga_id": saga_id, **stamped}))
        return
    folding.unfold(connection, saga_id, step.seq)
    connection.execute(
        update(t.steps)
        .where(t.steps.c.saga_id == saga_id, t.steps.c.seq == step.seq)
        .values({**{name: values[name] for name in STEP_UPDATE_COLUMNS}, **stamped})
    )


def append(
    connection: Connection, dialect: Dialect, saga_id: str, epoch: int | None, event: Event
) -> None:
    """Append one event to the saga's history, under ``epoch``."""
    values = {**event_values(saga_id, epoch, event), "at": dialect.now()}
    connection.execute(insert(t.events).values(values))


def append_to_each(
    connection: Connection, dialect: Dialect, sagas: Sequence[tuple[str, int]], event: Event
) -> None:
    """Append ``event`` to the history of each (saga id, epoch) in ``sagas``, in one
    statement (a worker claims many sagas at once: one INSERT each was most of its
    claim's time)."""
    if sagas:
        rows = [event_values(saga_id, epoch, event) for saga_id, epoch in sagas]
        connection.execute(insert(t.events).values(at=dialect.now()), rows)


# -- transactional steps ---------------------------------------------------------------


class StepRaised(Exception):  # noqa: N818 - internal carrier, never escapes the store
    """A step's own error, carried through the store's error translation untouched."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def work_in(
    connection: Connection,
    factory: Callable[..., Session],
    work: Callable[[Session], T],
    url: str,
) -> T:
    """A transactional step's own work, in a session joining ``connection``'s transaction
    through a savepoint; its errors kept apart from the store's (:class:`StepRaised`)."""
    session = factory(bind=connection, join_transaction_mode="create_savepoint")
    try:
        with session:
            result = work(session)
            session.commit()  # releases the savepoint; the transaction stays open
    except Exception as error:
        if _is_conflict(error) or _is_disconnect(error):  # rolled back: safe to run again
            raise unavailable(url, error) from error
        raise StepRaised(error) from error
    return result


def step_named(change: Commit) -> str | None:
    """The first step ``change`` writes, if any (a crash point's label)."""
    return change.steps[0].step.name if change.steps else None


def _is_conflict(error: BaseException) -> bool:
    """A transaction the database aborted because of concurrent ones (retry it)."""
    original = getattr(error, "orig", error)
    if getattr(original, "sqlstate", None) in _CONFLICT_SQLSTATES:
        return True
    return "database is locked" in str(original)


def _is_disconnect(error: BaseException) -> bool:
    """The connection dropped under the step's session: its transaction is gone with it."""
    return isinstance(error, DBAPIError) and error.connection_invalidated
