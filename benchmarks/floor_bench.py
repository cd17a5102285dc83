"""The floor: the raw driver doing only the commits a saga needs, nothing else.

For an n-step saga, n+1 single-row commits (an INSERT, then one UPDATE per
step), each its own autocommit statement, one connection per concurrent caller:
what saga's write protocol would cost with zero library overhead. The
1-commit variant (one INSERT per saga) is the absolute floor. PostgreSQL
goes through psycopg 3; SQLite through the standard library driver with the
same settings saga uses (WAL, synchronous=FULL).
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from benchmarks.common import Workload, libpq_url

_TABLE = (
    "CREATE TABLE IF NOT EXISTS floor_sagas (id varchar(36) PRIMARY KEY, "
    "status varchar NOT NULL, step integer NOT NULL, updated_at double precision NOT NULL)"
)
_SQL = {
    "postgresql": (
        "INSERT INTO floor_sagas VALUES (%s, 'running', 0, extract(epoch from clock_timestamp()))",
        "UPDATE floor_sagas SET step = %s, updated_at = extract(epoch from clock_timestamp())"
        " WHERE id = %s",
    ),
    "sqlite": (
        "INSERT INTO floor_sagas VALUES (?, 'running', 0, julianday('now'))",
        "UPDATE floor_sagas SET step = ?, updated_at = julianday('now') WHERE id = ?",
    ),
}


def connect(url: str, backend: str) -> Any:
    """An autocommit connection: every statement is one commit.

    psycopg prepares a statement on its 6th use, in an implicit transaction
    of its own: the server counts one more commit per statement and
    connection, once (commit counts warm up past it).
    """
    if backend == "postgresql":
        return psycopg.connect(libpq_url(url), autocommit=True)
    connection = sqlite3.connect(url, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("PRAGMA busy_timeout=30000")
    return connection


class FloorSystem:
    """n+1 commits per saga (``single=False``) or 1 commit per saga (``single=True``).

    ``url`` is a PostgreSQL URL, or a file path for SQLite.
    """

    def __init__(self, url: str, backend: str, *, single: bool = False) -> None:
        self.url = url
        self.backend = backend
        self.single = single
        self.name = "floor-1" if single else "floor"
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self.reserve(1)
        connection = self._idle.get()
        connection.execute(_TABLE)
        self._idle.put(connection)

    def reserve(self, count: int) -> None:
        """Open connections until ``count`` are idle (a tiny pool: one per concurrent caller)."""
        while self._idle.qsize() < count:
            connection = connect(self.url, self.backend)
            with self._lock:
                self._connections.append(connection)
            self._idle.put(connection)

    def caller(self, workload: Workload) -> Callable[[], None]:
        commits = 1 if self.single else workload.floor_commits
        return lambda: self.one_saga(commits)

    def one_saga(self, commits: int) -> None:
        insert, update = _SQL[self.backend]
        try:
            connection = self._idle.get_nowait()
        except queue.Empty:
            self.reserve(1)
            connection = self._idle.get()
        try:
            saga_id = str(uuid.uuid4())
            connection.execute(insert, (saga_id,))
            for step in range(1, commits):
                connection.execute(update, (step, saga_id))
        finally:
            self._idle.put(connection)

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()


def commit_burst(url: str, backend: str, commits: int, threads: int) -> float:
    """Seconds for ``commits`` single-row commits spread over ``threads`` connections.

    Each thread is one "branch": an INSERT, then UPDATEs of its row.
    """
    floor = FloorSystem(url, backend)
    shares = [commits // threads + (1 if i < commits % threads else 0) for i in range(threads)]
    shares = [share for share in shares if share]
    gate = threading.Barrier(len(shares) + 1)
    floor.reserve(len(shares))

    def branch(count: int) -> None:
        gate.wait()
        floor.one_saga(count)

    workers = [threading.Thread(target=branch, args=(share,)) for share in shares]
    try:
        for worker in workers:
            worker.start()
        gate.wait()
        started = time.perf_counter()
        for worker in workers:
            worker.join()
        return time.perf_counter() - started
    finally:
        floor.close()
