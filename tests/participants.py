"""The machine's real participants (MariaDB, Redis, RabbitMQ on 127.0.0.1): whether one
answers, and a throwaway MariaDB database.

A test that needs one skips, saying why, when it is not running; with
``SAGA_REQUIRE_PARTICIPANTS=1`` (CI) its absence fails the test instead.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator

import pymysql
import pytest

MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root"}
REQUIRED = "SAGA_REQUIRE_PARTICIPANTS"


def running(name: str, port: int) -> None:
    """Skip (with why) unless ``name`` answers on 127.0.0.1:``port``; fail instead
    under ``SAGA_REQUIRE_PARTICIPANTS=1``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError as error:
        reason = f"{name} is not running on 127.0.0.1:{port} ({error})"
        if os.environ.get(REQUIRED) == "1":
            pytest.fail(reason)
        pytest.skip(reason + f"; set {REQUIRED}=1 to fail instead")


@contextlib.contextmanager
def mariadb_database() -> Iterator[str]:
    """A fresh MariaDB database for one test (a SQLAlchemy URL), dropped afterwards."""
    running("MariaDB", MARIADB["port"])
    name = f"saga_t_{uuid.uuid4().hex[:12]}"  # our own characters only: safe to quote
    with pymysql.connect(**MARIADB) as admin, admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    try:
        yield f"mysql+pymysql://root@127.0.0.1:3306/{name}"
    finally:
        with pymysql.connect(**MARIADB) as admin, admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
