"""``saga worker``'s health, as a probe asks it: alive (``/livez``) and ready (``/readyz``).

Liveness must not depend on what a pass is doing: a step that runs for a minute is
no reason to restart the worker. So the worker's loop records a beat on every turn
(it never runs a saga itself), and the database is asked on a connection of its
own, with a short timeout, never through the pool the sagas use; the answer is
kept for a second or two, so probes cost the database nothing much.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from saga._internal.coordinator import Coordinator

ANSWER_WITHIN = 2.0
"""Seconds the database has to answer a liveness check."""
KEEP_ANSWER = 1.5
"""Seconds one answer of the database is reused for."""


class DatabaseCheck:
    """Whether ``coord``'s database answers, on a connection of its own (``ANSWER_WITHIN``
    seconds at most), cached for ``KEEP_ANSWER`` seconds."""

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        self._engine: Any = None
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._answer = False

    def __call__(self) -> bool:
        with self._lock:  # one check at a time; the others take its answer
            if time.monotonic() - self._at >= KEEP_ANSWER:
                self._answer = self._ask()
                self._at = time.monotonic()
            return self._answer

    def _ask(self) -> bool:
        engine = self._engine_of()
        if engine is None:  # not a SQL store (the in-memory one): always there
            return True
        answered = threading.Event()
        # In a thread of its own, waited for ANSWER_WITHIN seconds: a server that takes
        # the connection and then hangs fails the check too (no startup option such as
        # statement_timeout, which PgBouncer refuses). A daemon: a hung check never
        # holds the process up when it exits.
        threading.Thread(target=_select, args=(engine, answered), daemon=True).start()
        return answered.wait(ANSWER_WITHIN)

    def _engine_of(self) -> Any:
        if self._engine is None:
            pooled = getattr(self.coord.store, "engine", None)
            if pooled is None:
                return None
            from sqlalchemy import create_engine
            from sqlalchemy.pool import NullPool

            # NullPool: a fresh connection for each check, closed after it, so a check
            # never waits for a connection that a busy saga holds.
            self._engine = create_engine(
                pooled.url, poolclass=NullPool, connect_args=_timeouts(pooled.dialect.name)
            )
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()


def _select(engine: Any, answered: threading.Event) -> None:
    """One cheap statement; ``answered`` is set if the database answered it."""
    # On SQLite, SELECT 1 would not even open the file: read its catalogue.
    sql = "SELECT count(*) FROM sqlite_master" if engine.name == "sqlite" else "SELECT 1"
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql(sql)
    except Exception:  # any failure is "does not answer", never a crash of the probe
        return
    answered.set()


def _timeouts(dialect: str) -> dict[str, Any]:
    """Give up connecting about when the check stops waiting (its thread then ends)."""
    if dialect == "postgresql":  # libpq's connect timeout is in whole seconds
        return {"connect_timeout": max(1, int(ANSWER_WITHIN))}
    if dialect == "sqlite":
        return {"timeout": ANSWER_WITHIN}
    return {}


def loop_alive(beat: float, interval: float) -> bool:
    """Whether a loop that last turned at ``beat`` (monotonic) still turns: it turns at
    least every interval, or every backoff (at most a minute) while the database is
    down, plus the time a claim may take retrying (the store's retry, about 30 s)."""
    return time.monotonic() - beat < max(interval, 60.0) + 60.0
