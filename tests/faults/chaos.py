"""Connection chaos: a thread that terminates every other backend of a PostgreSQL database."""

from __future__ import annotations

import random
import threading
from types import TracebackType

import psycopg

from tests.faults import figures
from tests.postgres import libpq_url

TERMINATE = (
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


class Terminator:
    """While active, every 50-500 ms, terminates every other connection to the database.

    Use it only on a database of the test's own (``isolated_database``): every
    client of that database loses its connection, whatever it was doing.
    """

    def __init__(self, url: str, low: float = 0.05, high: float = 0.5) -> None:
        self.url = libpq_url(url)
        self.low, self.high = low, high
        self.terminated = 0
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos", daemon=True)

    def __enter__(self) -> Terminator:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10)
        figures.count("terminated backends", self.terminated)

    def _loop(self) -> None:
        connection: psycopg.Connection[tuple[int]] | None = None
        while not self._stop.wait(random.uniform(self.low, self.high)):
            try:
                if connection is None or connection.closed:
                    connection = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                row = connection.execute(TERMINATE).fetchone()
                self.terminated += row[0] if row else 0
                self.rounds += 1
            except psycopg.Error:
                connection = None
        if connection is not None:
            connection.close()
