"""The SQL store's lease and operator writes: renewals, claims, cancel requests,
events outside a commit, deletion.

Each function runs in the caller's transaction (``connection``). A claim
raises the saga's epoch, which fences out every commit of the previous owner;
every condition of a claim (lease free, status, an operator's
:class:`~saga._internal.ports.ClaimGuard`) is checked by the statement that raises it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import (
    ColumnElement,
    Connection,
    Update,
    and_,
    case,
    delete,
    func,
    or_,
    select,
    tuple_,
    update,
)

from saga._internal.errors import (
    OperationRefusedError,
    SagaBusyError,
    SagaChangedError,
    UnknownSagaError,
)
from saga._internal.ports import ClaimGuard, Event, Renewal, Runnable, SagaRecord, guard_broken
from saga._internal.status import MAY_HAVE_ACTED, PIVOT_ACTED, SagaStatus, StepKind, StepStatus

from . import reads
from . import tables as t
from .dialect import Dialect
from .liveness import owner_gone, suspect
from .writes import append, append_to_each, stop

# failed and paused: an operator may act on it (a recoverer's claim takes ACTIVE only)
CLAIMABLE = (*reads.ACTIVE, SagaStatus.FAILED.value, SagaStatus.PAUSED.value)
_RENEW_CHUNK = 500  # leases renewed per statement (bounds the bound parameters)


def renew(
    connection: Connection, dialect: Dialect, held: Sequence[tuple[str, int]], lease_ttl: float
) -> Renewal:
    """Extend the leases of ``held`` (saga id, epoch) still at their epoch. A lease given
    up at that epoch (owner cleared: the saga finished or was handed back) is left as it
    is, free, or a renewal between that commit and the holder letting go would make the
    next owner wait a whole lease; it is not reported lost either."""
    i = t.instances.c
    must_stop: set[str] = set()
    kept: set[str] = set()
    renewed = case((i.owner.is_(None), i.lease_expires_at), else_=dialect.now() + lease_ttl)
    for start in range(0, len(held), _RENEW_CHUNK):
        rows = connection.execute(
            update(t.instances)
            .where(tuple_(i.id, i.epoch).in_(held[start : start + _RENEW_CHUNK]))
            .values(lease_expires_at=renewed)
            .returning(i.id, stop(dialect))
        ).all()
        kept.update(row.id for row in rows)
        must_stop.update(row.id for row in rows if row.stop)
    return Renewal(frozenset(must_stop), frozenset(saga_id for saga_id, _ in held) - kept)


def claim(
    connection: Connection,
    dialect: Dialect,
    saga_id: str,
    owner: str,
    lease_ttl: float,
    event: Event,
    guard: ClaimGuard | None,
    token: str,
) -> SagaRecord:
    """Take the saga (epoch + 1, marked with ``token``) or raise why not."""
    if guard is not None:
        lock_row(connection, saga_id)
    i = t.instances.c
    row = connection.execute(
        update(t.instances)
        .where(*_claimable(connection, dialect, saga_id, owner, guard))
        .values(
            epoch=i.epoch + 1,
            owner=owner,
            lease_expires_at=dialect.now() + lease_ttl,
            commit_token=token,
        )
        .returning(i.epoch)
    ).first()
    if row is None:
        raise _refusal(connection, dialect, saga_id, guard)
    # The history says who took the saga, whatever the caller's event says.
    detail = {"owner": owner, **(event.detail or {})}
    append(
        connection,
        dialect,
        saga_id,
        row.epoch,
        Event(event.kind, event.step, event.attempt, detail),
    )
    loaded = reads.load(connection, saga_id)
    assert loaded is not None
    return loaded


def lock_row(connection: Connection, saga_id: str) -> None:
    """Lock the saga row until this transaction ends. Every commit of the owner updates
    it first, so from here on no step can change, and a guard's step check (a later
    statement, with a later snapshot) sees every commit made before ours."""
    i = t.instances.c
    connection.execute(select(i.id).where(i.id == saga_id).with_for_update())


def _claimable(
    connection: Connection,
    dialect: Dialect,
    saga_id: str,
    claimer: str,
    guard: ClaimGuard | None,
) -> list[ColumnElement[bool]]:
    """The conditions under which the saga may be taken, all checked in the claim."""
    i = t.instances.c
    # A live lease is never taken, not even from this owner: another thread of
    # the same coordinator may be executing the saga right now. Only a lease whose
    # owner is known dead is (liveness.owner_gone: never this live process).
    free = or_(
        i.owner.is_(None),
        i.lease_expires_at < dialect.now(),
        owner_gone(connection, dialect, [saga_id], claimer),
    )
    unfinished = i.status.in_(CLAIMABLE)  # it may have finished since the caller read it
    return [i.id == saga_id, free, unfinished, *guarded(saga_id, guard)]


def guarded(saga_id: str, guard: ClaimGuard | None) -> list[ColumnElement[bool]]:
    """``guard`` as SQL conditions on the saga row (and its pivot steps)."""
    if guard is None:
        return []
    i, s = t.instances.c, t.steps.c
    conditions: list[ColumnElement[bool]] = [
        i.status.in_([status.value for status in guard.statuses])
    ]
    if guard.epoch is not None:
        conditions.append(i.epoch == guard.epoch)
    if guard.before_pivot:
        acted = select(s.seq).where(
            s.saga_id == saga_id,
            s.kind == StepKind.PIVOT.value,
            s.status.in_([status.value for status in PIVOT_ACTED]),
        )
        conditions.append(~acted.exists())
    return conditions


def _refusal(
    connection: Connection, dialect: Dialect, saga_id: str, guard: ClaimGuard | None
) -> OperationRefusedError | UnknownSagaError:
    """Why a claim matched no row, read in the claim's own transaction."""
    current = reads.load(connection, saga_id)
    if current is None:
        return UnknownSagaError(f"no saga with id {saga_id}")
    if current.status.value not in CLAIMABLE:
        return OperationRefusedError(saga_id, f"saga {saga_id} is already {current.status.value}")
    changed = guard_broken(current, guard)
    if changed is not None:
        return SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {changed}")
    return SagaBusyError(
        saga_id,
        f"saga {saga_id} is held by {current.owner} whose lease is still live",
        lease_remaining=_lease_remaining(connection, dialect, saga_id),
    )


def _lease_remaining(connection: Connection, dialect: Dialect, saga_id: str) -> float | None:
    """Seconds left on the saga's lease, by the database clock (the client's may differ)."""
    i = t.instances.c
    left = connection.execute(
        select(i.lease_expires_at - dialect.now()).where(i.id == saga_id)
    ).scalar_one_or_none()
    return None if left is None else float(left)


def claim_expired(
    connection: Connection,
    dialect: Dialect,
    owner: str,
    lease_ttl: float,
    limit: int,
    token: str,
    runnable: Runnable | None = None,
) -> list[str]:
    """Claim up to ``limit`` active sagas whose lease ran out, oldest lease first (with
    ``runnable``: only those it admits; the others are not even locked)."""
    now = dialect.now()
    i = t.instances.c
    suspect(connection, dialect)  # an owner whose session went: taken a grace later
    stuck = dialect.lock_for_claim(
        select(i.id)
        .where(i.status.in_(reads.ACTIVE), orphaned(connection, dialect, now, owner))
        .where(*runnable_only(runnable))
        .order_by(i.lease_expires_at)
        .limit(limit)
    )
    rows = connection.execute(
        update(t.instances)
        .where(i.id.in_(stuck.scalar_subquery()))
        .values(
            epoch=i.epoch + 1, owner=owner, lease_expires_at=now + lease_ttl, commit_token=token
        )
        .returning(i.id, i.epoch)
    ).all()
    claimed = [(row.id, row.epoch) for row in rows]
    append_to_each(connection, dialect, claimed, Event("lease_claimed", detail={"owner": owner}))
    return [saga_id for saga_id, _ in claimed]


def runnable_only(runnable: Runnable | None) -> list[ColumnElement[bool]]:
    """``runnable`` (``Runnable.admits``) as a condition on the saga row and its steps."""
    if runnable is None:
        return []
    i, s = t.instances.c, t.steps.c
    version = func.coalesce(i.version, "1")
    pairs = {(name, v) for name, v, _ in runnable.definitions}
    declarative = and_(
        i.kind == "declarative",
        or_(
            tuple_(i.name, version, i.fingerprint).in_(sorted(runnable.definitions)),
            and_(i.fingerprint.is_(None), tuple_(i.name, version).in_(sorted(pairs))),
        ),
    )
    trusted: list[ColumnElement[bool]] = [s.compensation_ref.in_(sorted(runnable.functions))]
    for module in runnable.modules:  # the module itself or a submodule: "m:f", "m.sub:f"
        for mark in (":", "."):
            prefix = module + mark
            trusted.append(func.substr(s.compensation_ref, 1, len(prefix)) == prefix)
    # A compensation still to run (``ports.undone``) that this process cannot resolve.
    unresolvable = select(s.seq).where(
        s.saga_id == i.id,
        s.compensation_ref.is_not(None),
        s.kind == StepKind.COMPENSATABLE.value,
        s.status.in_([status.value for status in MAY_HAVE_ACTED]),
        ~and_(
            s.transactional.is_(True),
            s.status.in_([StepStatus.FAILED.value, StepStatus.RUNNING.value]),
        ),
        ~or_(*trusted),
    )
    return [or_(declarative, and_(i.kind == "imperative", ~unresolvable.exists()))]


def orphaned(
    connection: Connection,
    dialect: Dialect,
    now: ColumnElement[float],
    claimer: str | None = None,
) -> ColumnElement[bool]:
    """A saga no live process holds: its lease ran out, or its owner is known dead (a
    killed process need not be waited for: see :mod:`.liveness`)."""
    i = t.instances.c
    return or_(i.lease_expires_at < now, owner_gone(connection, dialect, claimer=claimer))


def claimed_ids(connection: Connection, token: str, saga_id: str | None = None) -> list[str]:
    """After a lost acknowledgement: the sagas our earlier try claimed (and still holds)."""
    i = t.instances.c
    query = select(i.id).where(i.commit_token == token)
    if saga_id is not None:
        query = query.where(i.id == saga_id)
    return list(connection.execute(query.order_by(i.lease_expires_at)).scalars())


def request_cancel(
    connection: Connection, dialect: Dialect, saga_id: str, event: Event, guard: ClaimGuard | None
) -> None:
    """Mark a running saga for cancelling (see ``SagaStore.request_cancel``)."""
    i = t.instances.c
    request = (
        update(t.instances)
        .where(i.id == saga_id, i.status == SagaStatus.RUNNING.value)
        .where(i.cancel_requested.is_(False), *guarded(saga_id, guard))
        .values(cancel_requested=True)
    )
    current = _requested(connection, dialect, saga_id, event, guard, request)
    if current is None:
        return
    changed = guard_broken(current, guard)
    if current.status is SagaStatus.RUNNING and changed is not None:
        raise SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {changed}")
    # else it finished meanwhile, or the request is already recorded (maybe by
    # our own earlier try, whose acknowledgement was lost): nothing to write


def request_pause(
    connection: Connection, dialect: Dialect, saga_id: str, event: Event, guard: ClaimGuard | None
) -> None:
    """Pause a running saga (see ``SagaStore.request_pause``): its status turns ``paused``
    in one statement with ``guard``'s check, so a saga that moved meanwhile is left as
    it is; its owner, if alive, sees it in its next commit's answer and hands it back."""
    i = t.instances.c
    request = (
        update(t.instances)
        .where(i.id == saga_id, i.status == SagaStatus.RUNNING.value, *guarded(saga_id, guard))
        .values(status=SagaStatus.PAUSED.value)
    )
    current = _requested(connection, dialect, saga_id, event, guard, request)
    if current is None:
        return
    if current.status is SagaStatus.PAUSED:
        return  # paused already (maybe by our own earlier try, whose acknowledgement was lost)
    changed = guard_broken(current, guard) or f"it is {current.status.value} now"
    raise SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {changed}")


def _requested(
    connection: Connection,
    dialect: Dialect,
    saga_id: str,
    event: Event,
    guard: ClaimGuard | None,
    request: Update,
) -> SagaRecord | None:
    """Run an operator's request, one guarded UPDATE of the saga's row (locked first when
    guarded), and append ``event`` if it wrote: None. Else the saga as it stands, for the
    caller to say why nothing was written."""
    if guard is not None:
        lock_row(connection, saga_id)
    row = connection.execute(request.returning(t.instances.c.epoch)).first()
    if row is not None:
        append(connection, dialect, saga_id, row.epoch, event)
        return None
    current = reads.load(connection, saga_id)
    if current is None:
        raise UnknownSagaError(f"no saga with id {saga_id}")
    return current


def record_event(connection: Connection, dialect: Dialect, saga_id: str, event: Event) -> None:
    """Append ``event`` under the saga's current epoch (none for an unknown saga)."""
    epoch = connection.execute(
        select(t.instances.c.epoch).where(t.instances.c.id == saga_id)
    ).scalar()
    append(connection, dialect, saga_id, epoch, event)


def record_fenced_event(
    connection: Connection, dialect: Dialect, saga_id: str, epoch: int, event: Event
) -> bool:
    """Append ``event`` only while ``epoch`` is the saga's; whether it was written."""
    i = t.instances.c
    # FOR UPDATE (SQLite: the IMMEDIATE transaction): a claim (epoch + 1) waits for
    # this transaction or has already made the row not match, never in between.
    held = connection.execute(
        select(i.epoch).where(i.id == saga_id, i.epoch == epoch).with_for_update()
    ).first()
    if held is None:
        return False
    append(connection, dialect, saga_id, epoch, event)
    return True


def delete_sagas(connection: Connection, saga_ids: Sequence[str]) -> int:
    """Delete these sagas with their steps and events; return how many went."""
    for table in (t.events, t.steps):
        connection.execute(delete(table).where(table.c.saga_id.in_(saga_ids)))
    result = connection.execute(delete(t.instances).where(t.instances.c.id.in_(saga_ids)))
    return int(result.rowcount)
