"""Telling that an owner died, so that its sagas need not wait out their lease.

A process killed with SIGKILL renews nothing: without more, its sagas wait for their
leases (30 s by default) before anyone may take them. Each owner (a coordinator) that
holds a saga therefore records, in ``saga_owners``, something another process can
check, and a claim may take a saga whose owner is *known* dead:

* PostgreSQL: the owner keeps one connection of its own open for its whole life, its
  *liveness session*, and records that session's backend pid and start time and the
  server's start time. A claim treats the owner as dead only when, inside the claim's
  own statement, the server is the same instance (``pg_postmaster_start_time()``
  unchanged: no restart, no promoted standby) and ``pg_stat_activity`` has no backend
  with that pid and start. Behind a connection pooler (PgBouncer) the pid a session
  runs on is the pooler's server connection, which outlives the client and may close
  while the client lives: the owner sees that its driver's backend pid (from the
  server's handshake, which a pooler answers itself) is not ``pg_backend_pid()`` and
  records nothing, so there sagas wait for their lease, never taken from a live owner.
* SQLite: the owner records its host (name, boot id, pid namespace), pid and process
  start time. A claimer on the same host that finds that pid gone (or a zombie, or
  reused by a process started at another time) may claim. Other hosts sharing the
  file (NFS) cannot see the process: they wait for the lease.

Either way the verdict is only ever used inside the claim's write (the saga's owner
is still the dead one in that very statement), and a wrong verdict (a liveness session
cut while its process lives on) is safe: the claim raises the epoch, which fences out
every later commit of the old owner, as when a stalled owner's lease runs out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Select,
    cast,
    column,
    create_engine,
    delete,
    false,
    func,
    literal,
    or_,
    select,
    table,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from . import reads
from . import tables as t
from .dialect import Dialect
from .sqlite_writer import is_file_database

_log = logging.getLogger("saga.store")
_ACTIVITY = table("pg_stat_activity", column("pid"), column("backend_start"))
_GONE_STATES = ("Z", "X")  # a zombie (killed, not yet reaped) or dead: not running


def _epoch(value: Any) -> ColumnElement[float]:
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
    connection: Connection, dialect: Dialect, saga_ids: Sequence[str] | None = None
) -> ColumnElement[bool]:
    """A condition on ``saga_instances``: its owner is known to be dead. ``saga_ids``
    narrows which sagas' owners SQLite looks at (None: every saga with a live lease)."""
    i = t.instances.c
    if dialect.name == "postgresql":
        return i.owner.in_(_dead_on_postgres())
    if dialect.name == "sqlite":
        dead = _dead_on_this_host(connection, dialect, saga_ids)
        return i.owner.in_(dead) if dead else false()
    return false()


def _dead_on_postgres() -> Select[Any]:
    """The owners whose liveness session has ended on this very server instance. A backend
    whose start this role may not see (NULL) counts as that session: never a false death."""
    o, a = t.owners.c, _ACTIVITY.c
    alive = (
        select(literal(1))
        .where(a.pid == o.backend_pid)
        .where(or_(a.backend_start.is_(None), _epoch(a.backend_start) == o.backend_start))
    )
    return select(o.owner).where(
        o.backend_pid.is_not(None),
        o.server_start == _epoch(func.pg_postmaster_start_time()),
        ~alive.exists(),
    )


def _dead_on_this_host(
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
    which = o.owner.in_(held) if holding else o.owner.not_in(_owners_of(active))
    rows = connection.execute(
        select(o.owner, o.pid, o.process_start).where(
            o.host == host_identity(), o.pid.is_not(None), which
        )
    ).all()
    return [row.owner for row in rows if process_gone(row.pid, row.process_start)]


def _owners_of(condition: ColumnElement[bool]) -> Select[Any]:
    i = t.instances.c
    return select(i.owner).where(condition, i.owner.is_not(None))


def _handshake_pid(driver: Any) -> int | None:
    """The backend pid the server's handshake gave the driver (a pooler gives its own)."""
    info = getattr(driver, "info", None)  # psycopg 3
    if info is not None:
        return int(info.backend_pid)
    get = getattr(driver, "get_backend_pid", None)  # psycopg2
    return int(get()) if callable(get) else None


# -- the owner's side -------------------------------------------------------------------------


class OwnerLiveness:
    """What an owner records of itself, and (PostgreSQL) the session that proves it alive."""

    def __init__(self, engine: Engine, dialect: Dialect, connect_args: dict[str, Any]) -> None:
        self._url = engine.url.render_as_string(hide_password=False)
        self._records: Engine | None = None
        self._dialect = dialect
        self._connect_args = connect_args
        self._lock = threading.Lock()
        self._session: Connection | None = None
        self._owners: set[str] = set()

    def register(self, owner: str) -> None:
        """Record ``owner`` (once; again after its liveness session was lost)."""
        with self._lock:
            if owner in self._owners:
                return
            if self._dialect.name == "postgresql":
                self._register_session(owner)
            elif self._dialect.name == "sqlite" and is_file_database(self._url):
                self._register_process(owner)  # (an in-memory database has one process)
            self._owners.add(owner)

    def keep(self) -> None:
        """Check that the liveness session still answers; if it was lost, open another and
        record it (meanwhile a claimer may have found the owner dead: fencing keeps that
        safe). Called by the heartbeat, so it costs one round trip per renewal interval."""
        with self._lock:
            if self._session is None:
                return
            try:
                self._session.execute(select(literal(1))).scalar_one()
                return
            except SQLAlchemyError as error:  # whatever it was, the session is no proof now
                _log.warning("liveness session lost (%s); opening another", error)
                self._close_session()
            for owner in self._owners:
                self._register_session(owner)

    def release(self, owner: str) -> None:
        """Forget ``owner`` (a clean close): its row goes, its session closes."""
        with self._lock:
            if owner not in self._owners:
                return
            self._owners.discard(owner)
            with contextlib.suppress(SQLAlchemyError), self._recording() as connection:
                connection.execute(delete(t.owners).where(t.owners.c.owner == owner))
            if not self._owners:
                self._close_session()

    def close(self) -> None:
        """Close the liveness session (the store closes): its owners look dead from now."""
        with self._lock:
            self._close_session()
            if self._records is not None:
                self._records.dispose()
                self._records = None

    def _recording(self) -> contextlib.AbstractContextManager[Connection]:
        """A transaction on connections of our own: recording an owner is no statement of
        the store's sagas (nor a boundary where tests/interleave.py pauses an actor)."""
        if self._records is None:
            self._records = (
                self._dialect.create_engine(self._url)  # WAL, busy timeout, IMMEDIATE
                if self._dialect.name == "sqlite"
                else create_engine(
                    self._url,
                    poolclass=NullPool,
                    hide_parameters=True,
                    connect_args=self._connect_args,
                )
            )
        return self._records.begin()

    def _register_process(self, owner: str) -> None:
        pid = os.getpid()
        row = {
            "owner": owner,
            "host": host_identity(),
            "pid": pid,
            "process_start": process_start(pid),
        }
        statement = sqlite_insert(t.owners).values(**row, registered_at=self._dialect.now())
        with self._recording() as connection:
            connection.execute(statement.on_conflict_do_nothing())
            forgotten = _dead_on_this_host(connection, self._dialect, None, holding=False)
            connection.execute(delete(t.owners).where(t.owners.c.owner.in_(forgotten)))

    def _register_session(self, owner: str) -> None:
        session = self._open_session()
        if session is None:
            return
        a = _ACTIVITY.c
        me = (
            select(
                literal(owner),
                a.pid,
                _epoch(a.backend_start),
                _epoch(func.pg_postmaster_start_time()),
                self._dialect.now(),
            )
            .where(a.pid == func.pg_backend_pid())
            .limit(1)
        )
        names = ["owner", "backend_pid", "backend_start", "server_start", "registered_at"]
        statement = pg_insert(t.owners).from_select(names, me)
        statement = statement.on_conflict_do_update(
            index_elements=[t.owners.c.owner],
            set_={name: statement.excluded[name] for name in names[1:]},
        )
        session.execute(statement)
        # Rows of dead owners (or of an earlier server instance) that hold nothing any more.
        o = t.owners.c
        restarted = o.server_start != _epoch(func.pg_postmaster_start_time())
        stale = or_(o.owner.in_(_dead_on_postgres()), restarted)
        holding = _owners_of(t.instances.c.status.in_(reads.ACTIVE))
        session.execute(delete(t.owners).where(stale, o.owner.not_in(holding)))

    def _open_session(self) -> Connection | None:
        """The liveness session (opened once), or None behind a pooler."""
        if self._session is not None:
            return self._session
        engine = create_engine(
            self._url,
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
            hide_parameters=True,
            connect_args=self._connect_args,
        )
        session = engine.connect()
        reported = _handshake_pid(session.connection.driver_connection)
        actual = session.execute(select(func.pg_backend_pid())).scalar_one()
        if reported != actual:  # a pooler answered the handshake: its pid is not the session's
            _log.info("behind a connection pooler: sagas of a dead process wait for their lease")
            session.close()
            engine.dispose()
            return None
        self._session = session
        return session

    def _close_session(self) -> None:
        if self._session is None:
            return
        with contextlib.suppress(SQLAlchemyError):
            self._session.close()
        self._session.engine.dispose()
        self._session = None
