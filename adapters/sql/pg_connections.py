"""The hot path's connections to PostgreSQL: psycopg's own, in autocommit, each lent
with the one cursor every statement on it reuses, last in first out.

Not SQLAlchemy's pool: the hot path runs one statement per checkout and needs none of
what that pool does around it (events, reset on return, a proxy object per checkout),
which cost 45-60 us of client CPU per statement on a 2-core machine against about
85 us for the statement itself. What it keeps: at most ``most`` connections in use at
once (a thread waits ``wait`` seconds for one, then is told the pool is exhausted),
``keep`` of them kept open between uses, and a connection that failed as a connection
is closed instead of lent again.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import psycopg

from .messages import not_connected, pool_exhausted

Lent = tuple[psycopg.Connection[Any], psycopg.Cursor[Any], int]
"""A connection, its cursor, and the pool's generation it was opened in."""
BROKEN = (psycopg.OperationalError, psycopg.InterfaceError)
"""What a connection that can no longer be trusted raises: it is closed, not lent again."""


class HotConnections:
    """Autocommit psycopg connections for single statements."""

    def __init__(
        self,
        conninfo: str,
        connect_args: dict[str, Any],
        keep: int,
        most: int,
        wait: float,
        shown: str | None = None,
    ) -> None:
        self.conninfo, self.connect_args = conninfo, connect_args
        self.shown = conninfo if shown is None else shown  # the URL errors name (masked)
        self.keep, self.most, self.wait = keep, most, wait
        self._idle: list[Lent] = []  # append and pop are atomic: threads share it
        self._slots = threading.BoundedSemaphore(most)
        self._counting = threading.Lock()
        self.opened = 0
        """How many connections this pool has opened so far."""
        self._generation = 0  # a connection opened before the last close() is not kept
        _OPEN.add(self)

    @contextlib.contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        """A connection's cursor for one statement; ``StorageUnavailableError`` when no
        connection can be had (the server refused one, or the pool stayed full)."""
        if not self._slots.acquire(timeout=self.wait):
            raise pool_exhausted(f"{self.most} in use for {self.wait:g} s")
        try:
            connection, cursor, _ = lent = self._take()
            try:
                yield cursor
            except psycopg.Error as error:
                self._give_back(lent, broken=isinstance(error, BROKEN))
                raise
            except BaseException:  # interrupted mid-statement: its state is unknown
                _close(connection)
                raise
            self._give_back(lent)
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close the idle connections; those in use are closed as they come back. The
        pool can still be used: it opens connections again (as SQLAlchemy's
        ``Engine.dispose`` leaves an engine)."""
        self._generation += 1
        idle, self._idle = self._idle, []
        for connection, _, _ in idle:
            _close(connection)

    def forget(self) -> None:
        """Drop the idle connections without closing them: in a forked child they are
        the parent's sockets, which the parent goes on using. The slots and the lock
        are made anew: the parent's threads that held them at the fork are not here to
        give them back."""
        self._idle = []
        self._slots = threading.BoundedSemaphore(self.most)
        self._counting = threading.Lock()

    def _take(self) -> Lent:
        try:
            return self._idle.pop()
        except IndexError:
            pass
        try:
            connection = psycopg.connect(self.conninfo, autocommit=True, **self.connect_args)
        except psycopg.Error as error:  # a server down (retried), or a login refused
            raise not_connected(self.shown, error) from error
        with self._counting:
            self.opened += 1
        return connection, connection.cursor(), self._generation

    def _give_back(self, lent: Lent, broken: bool = False) -> None:
        connection, _, generation = lent
        old = generation != self._generation
        if broken or old or connection.closed or len(self._idle) >= self.keep:
            _close(connection)
        else:
            self._idle.append(lent)


def _close(connection: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        connection.close()


_OPEN: weakref.WeakSet[HotConnections] = weakref.WeakSet()


def _forget_all() -> None:
    for pool in list(_OPEN):
        pool.forget()


os.register_at_fork(after_in_child=_forget_all)
