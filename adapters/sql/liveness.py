"""Telling that an owner died, so that its sagas need not wait out their lease.

A process killed with SIGKILL renews nothing: without more, its sagas wait for their
leases (30 s by default) before anyone may take them. Each owner (a coordinator) that
holds a saga therefore records, in ``saga_owners``, something another process can
check, and a claim may take a saga whose owner is *known* dead:

* PostgreSQL: the owner keeps one connection of its own open for its whole life, its
  *liveness session*, and records that session's backend pid and start time and the
  server's start time. A session can end while its process lives on (an operator's
  ``pg_terminate_backend``, an idle timeout), so its absence is first only a
  *suspicion*: a claimer that finds the session gone from ``pg_stat_activity`` on the
  same server instance (``pg_postmaster_start_time()`` unchanged: no restart, no
  promoted standby) records when (``suspected_at``), and a claim treats the owner as
  dead only once that suspicion is :data:`GRACE` old, newer than the owner's last
  registration, and the session is still gone. A live owner notices at once that its
  session ended (a thread waits on the session's socket) and records a new one, which
  clears the suspicion well within the grace (see :mod:`.owner_liveness`). Behind a
  connection pooler (PgBouncer) the pid a session runs on is the pooler's server
  connection, which outlives the client and may close while the client lives: the
  owner sees that its driver's backend pid (from the
  server's handshake, which a pooler answers itself) is not ``pg_backend_pid()`` and
  records nothing, so there sagas wait for their lease, never taken from a live owner.
* SQLite: the owner records its host (name, boot id, pid namespace), pid and process
  start time. A claimer on the same host that finds that pid gone (or a zombie, or
  reused by a process started at another time) may claim. Other hosts sharing the
  file (NFS) cannot see the process: they wait for the lease.

Either way the verdict is only ever used inside the claim's write (the saga's owner
is still the dead one in that very statement), and a wrong verdict (a process frozen
for longer than the grace while its session was cut) is safe: the claim raises the
epoch, which fences out every later commit of the old owner, as when a stalled owner's
lease runs out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Float,
    Select,
    and_,
    cast,
    column,
    false,
    func,
    literal,
    or_,
    select,
    table,
    update,
)

from . import reads
from . import tables as t
from .dialect import Dialect

_log = logging.getLogger("saga.store")
ACTIVITY = table("pg_stat_activity", column("pid"), column("backend_start"))
_GONE_STATES = ("Z", "X")  # a zombie (killed, not yet reaped) or dead: not running
GRACE = 0.5
"""Seconds a PostgreSQL owner's session must have been seen gone before a claim may take
its sagas: a live owner whose session was cut records a new one within milliseconds."""


def epoch_seconds(value: Any) -> ColumnElement[float]:
    """A PostgreSQL timestamp as seconds since the epoch (double precision, as stored)."""
    return cast(func.extract("epoch", value), Float)


# -- this process, as SQLite's owners record it --------------------------------------------


@cache
def host_identity() -> str:
    """This host as a process table sees it: the host name, the kernel's boot id and the
    pid namespace (two containers may share a name, a pid means nothing across a reboot)."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):  # no /proc: the host name is all there is
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "|".join(parts)


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), None where there
    is no /proc; raises ``ProcessLookupError`` if no such process runs (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc, or another user's process hidden there (hidepid)
        os.kill(pid, 0)  # ProcessLookupError if none; PermissionError: it exists
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    if fields[0] in _GONE_STATES:
        raise ProcessLookupError(pid)
    return fields[19]  # field 22 of stat(5): starttime


def process_gone(pid: int, started: str | None) -> bool:
    """Whether the process recorded as (``pid``, ``started``) has ended on this host."""
    try:
        now = process_start(pid)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: it exists
        return False
    return started is not None and now is not None and now != started  # the pid was reused


# -- the claim's side -------------------------------------------------------------------------


def owner_gone(
    connection: Connection,
    dialect: Dialect,
    saga_ids: Sequence[str] | None = None,
    claimer: str | None = None,
) -> ColumnElement[bool]:
    """A condition on ``saga_instances``: its owner is known to be dead. ``saga_ids``
    narrows which sagas' owners SQLite looks at (None: every saga with a live lease). A
    claimer never finds itself dead: it is running this very statement."""
    i = t.instances.c
    gone: ColumnElement[bool]
    if dialect.name == "postgresql":
        gone = i.owner.in_(_dead_on_postgres(dialect))
    elif dialect.name == "sqlite":
        dead = dead_on_this_host(connection, dialect, saga_ids)
        gone = i.owner.in_(dead) if dead else false()
    else:
        return false()
    return gone if claimer is None else and_(gone, i.owner != claimer)


def session_gone() -> ColumnElement[bool]:
    """A condition on ``saga_owners``: the owner's liveness session has ended on this very
    server instance. A backend whose start this role may not see (NULL) counts as that
    session: never a false suspicion."""
    o, a = t.owners.c, ACTIVITY.c
    alive = (
        select(literal(1))
        .where(a.pid == o.backend_pid)
        .where(or_(a.backend_start.is_(None), epoch_seconds(a.backend_start) == o.backend_start))
    )
    return and_(
        o.backend_pid.is_not(None),
        o.server_start == epoch_seconds(func.pg_postmaster_start_time()),
        ~alive.exists(),
    )


def _dead_on_postgres(dialect: Dialect) -> Select[Any]:
    """The owners suspected for :data:`GRACE` since their last registration, whose
    session is still gone: a live owner would have recorded a new one by now."""
    o = t.owners.c
    return select(o.owner).where(
        session_gone(),
        o.suspected_at > o.registered_at,
        o.suspected_at <= dialect.now() - GRACE,
    )


def suspect(connection: Connection, dialect: Dialect, saga_id: str | None = None) -> None:
    """Record, once per registration, that the session of an owner holding a live lease
    (of ``saga_id``, or of any saga) has gone: the start of its grace (PostgreSQL)."""
    if dialect.name != "postgresql":
        return
    i, o = t.instances.c, t.owners.c
    holders = select(i.owner).where(i.status.in_(reads.ACTIVE), i.owner.is_not(None))
    if saga_id is not None:
        holders = holders.where(i.id == saga_id)
    fresh = or_(o.suspected_at.is_(None), o.suspected_at <= o.registered_at)
    connection.execute(
        update(t.owners)
        .where(o.owner.in_(holders), fresh, session_gone())
        .values(suspected_at=dialect.now())
    )


def suspected(connection: Connection, dialect: Dialect, saga_id: str) -> float | None:
    """Suspect the owner of ``saga_id`` if its session has gone (:func:`suspect`), and say
    how many seconds until it may be taken over (at most :data:`GRACE`); None if it is
    not suspected (it lives, or this is not PostgreSQL)."""
    if dialect.name != "postgresql":
        return None
    suspect(connection, dialect, saga_id)
    i, o = t.instances.c, t.owners.c
    left = connection.execute(
        select(o.suspected_at + GRACE - dialect.now())
        .join(t.instances, i.owner == o.owner)
        .where(i.id == saga_id, o.suspected_at > o.registered_at, session_gone())
    ).scalar_one_or_none()
    return None if left is None else min(GRACE, max(0.0, float(left)))


def dead_on_this_host(
    connection: Connection,
    dialect: Dialect,
    saga_ids: Sequence[str] | None,
    holding: bool = True,
) -> list[str]:
    """Owners on this host whose process has ended: of sagas with a live lease (or, with
    ``holding`` False, of no active saga at all). Read in the caller's IMMEDIATE
    transaction, which no other writer can interleave."""
    i, o = t.instances.c, t.owners.c
    active = i.status.in_(reads.ACTIVE)
    held = select(i.owner).where(active, i.lease_expires_at >= dialect.now())
    if saga_ids is not None:
        held = held.where(i.id.in_(saga_ids))
    which = o.owner.in_(held) if holding else o.owner.not_in(owners_of(active))
    rows = connection.execute(
        select(o.owner, o.pid, o.process_start).where(
            o.host == host_identity(), o.pid.is_not(None), which
        )
    ).all()
    return [row.owner for row in rows if process_gone(row.pid, row.process_start)]


def owners_of(condition: ColumnElement[bool]) -> Select[Any]:
    i = t.instances.c
    return select(i.owner).where(condition, i.owner.is_not(None))
