"""The owner's side of :mod:`.liveness`: what a coordinator records of itself, and
(PostgreSQL) the session whose existence says that it lives.

The session can end while the process lives on (an operator terminates it, an idle
timeout, a restarted pooler in front of a proxy). A thread waits on the session's
socket, which becomes readable the moment the server ends it (or a keepalive gives
up), and records a new session at once: a claimer's suspicion, older than that new
record, no longer counts, and the grace (:data:`.liveness.GRACE`) is there for this.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select as io_select
import threading
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, delete, func, literal, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool
from tenacity import Retrying, retry_if_exception_type, wait_exponential

from . import reads
from . import tables as t
from .dialect import Dialect
from .liveness import (
    ACTIVITY,
    dead_on_this_host,
    epoch_seconds,
    host_identity,
    owners_of,
    process_start,
    session_gone,
)
from .sqlite_writer import is_file_database

_log = logging.getLogger("saga.store")
_WATCH_WAKE = 1.0  # how often the watcher looks up to see whether it should stop
# Keepalives on the liveness session: a connection dropped silently (a firewall) ends
# in an error on its socket, which the watcher sees, instead of never.
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5}


def _handshake_pid(driver: Any) -> int | None:
    """The backend pid the server's handshake gave the driver (a pooler gives its own)."""
    info = getattr(driver, "info", None)  # psycopg 3
    if info is not None:
        return int(info.backend_pid)
    get = getattr(driver, "get_backend_pid", None)  # psycopg2
    return int(get()) if callable(get) else None


class OwnerLiveness:
    """What an owner records of itself, and (PostgreSQL) the session that proves it alive."""

    def __init__(self, engine: Engine, dialect: Dialect, connect_args: dict[str, Any]) -> None:
        self._url = engine.url.render_as_string(hide_password=False)
        self._records: Engine | None = None
        self._dialect = dialect
        self._connect_args = connect_args
        self._lock = threading.Lock()
        self._session: Connection | None = None
        self._watched: Connection | None = None  # the session a watcher thread waits on
        self._owners: set[str] = set()
        self._closing = threading.Event()

    def registered(self, owner: str) -> bool:
        """Whether ``owner`` is recorded (no I/O: cheap enough for every saga)."""
        return owner in self._owners

    def register(self, owner: str) -> None:
        """Record ``owner`` (once; again after the store was closed)."""
        with self._lock:
            if owner in self._owners:
                return
            self._closing.clear()
            if self._dialect.name == "postgresql":
                self._register_session(owner)
                self._watch_session()
            elif self._dialect.name == "sqlite" and is_file_database(self._url):
                self._register_process(owner)  # (an in-memory database has one process)
            self._owners.add(owner)

    def keep(self) -> None:
        """If the liveness session was lost, open another and record every owner on it
        (tenacity retries while the database does not answer); else nothing but a probe."""
        for attempt in Retrying(
            retry=retry_if_exception_type(SQLAlchemyError),
            wait=wait_exponential(multiplier=0.05, max=2.0),
            before_sleep=lambda state: _log.warning(
                "could not record a new liveness session (%s); trying again",
                state.outcome.exception() if state.outcome else None,
            ),
        ):
            with attempt, self._lock:
                if self._closing.is_set() or self._session is None or self._answers():
                    return
                _log.warning("liveness session lost; recording another")
                self._close_session()
                for owner in self._owners:
                    self._register_session(owner)
                self._watch_session()

    def release(self, owner: str) -> None:
        """Forget ``owner`` (a clean close). Its row stays: it holds nothing, and the next
        registration of any owner deletes it (no commit of its own on the way out)."""
        with self._lock:
            self._owners.discard(owner)
            if not self._owners:
                self._close_session()

    def close(self) -> None:
        """Close the liveness session (the store closes): its owners look dead from now,
        and register again if the store is used after all."""
        with self._lock:
            self._closing.set()
            self._owners.clear()
            self._close_session()
            if self._records is not None:
                self._records.dispose()
                self._records = None

    def _answers(self) -> bool:
        assert self._session is not None
        try:
            self._session.execute(select(literal(1))).scalar_one()
        except SQLAlchemyError as error:  # whatever it was, the session is no proof now
            _log.info("liveness session does not answer: %s", error)
            return False
        return True

    def _watch(self, session: Connection) -> None:
        """Wait until ``session``'s socket has something to say (the server ended it, or a
        keepalive failed), then :meth:`keep`; until the session is no longer ours."""
        fd = session.connection.driver_connection.fileno()  # type: ignore[union-attr]
        while self._session is session and not self._closing.is_set():
            try:
                ready, _, _ = io_select.select([fd], [], [], _WATCH_WAKE)
            except (OSError, ValueError):  # closed under us: the loop's test says why
                ready = [fd]
            if ready and self._session is session:
                self.keep()

    def _recording(self) -> contextlib.AbstractContextManager[Connection]:
        """A transaction on connections of our own: recording an owner is no statement of
        the store's sagas (nor a boundary where tests/interleave.py pauses an actor)."""
        if self._records is None:
            self._records = self._dialect.create_engine(self._url)  # WAL, busy timeout
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
            forgotten = dead_on_this_host(connection, self._dialect, None, holding=False)
            connection.execute(delete(t.owners).where(t.owners.c.owner.in_(forgotten)))

    def _register_session(self, owner: str) -> None:
        session = self._open_session()
        if session is None:
            return
        a = ACTIVITY.c
        me = (
            select(
                literal(owner),
                a.pid,
                epoch_seconds(a.backend_start),
                epoch_seconds(func.pg_postmaster_start_time()),
                self._dialect.now(),
                literal(None),
            )
            .where(a.pid == func.pg_backend_pid())
            .limit(1)
        )
        names = [
            "owner",
            "backend_pid",
            "backend_start",
            "server_start",
            "registered_at",
            "suspected_at",
        ]
        statement = pg_insert(t.owners).from_select(names, me)
        statement = statement.on_conflict_do_update(
            index_elements=[t.owners.c.owner],
            set_={name: statement.excluded[name] for name in names[1:]},
        )
        session.execute(statement)
        # Rows of dead owners (or of an earlier server instance) that hold nothing any more.
        o = t.owners.c
        restarted = o.server_start != epoch_seconds(func.pg_postmaster_start_time())
        holding = owners_of(t.instances.c.status.in_(reads.ACTIVE))
        session.execute(
            delete(t.owners).where(or_(session_gone(), restarted), o.owner.not_in(holding))
        )

    def _open_session(self) -> Connection | None:
        """The liveness session (opened once, watched), or None behind a pooler."""
        if self._session is not None:
            return self._session
        engine = create_engine(
            self._url,
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
            hide_parameters=True,
            connect_args={**_KEEPALIVES, **self._connect_args},
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

    def _watch_session(self) -> None:
        """Watch the liveness session, once its owners are recorded on it: a watcher
        started before would see the answers to those statements arrive on the socket,
        and probe the session for nothing."""
        session = self._session
        if session is None or self._watched is session:
            return
        self._watched = session
        threading.Thread(
            target=self._watch, args=(session,), name="saga-liveness", daemon=True
        ).start()

    def _close_session(self) -> None:
        if self._session is None:
            return
        session, self._session = self._session, None
        with contextlib.suppress(SQLAlchemyError):
            session.close()
        session.engine.dispose()
