"""A worker whose statement or login the database refuses (not an outage: here a table
renamed under it, a role barred from logging in) says so, and backs off as from an
outage, since an operator may mend it.
Before, it called every such failure "database unavailable", and a bad definition that
failed each claim's statement looked like an outage for as long as the process lived."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.engine import make_url

from saga import Coordinator, admin
from tests.integration.support import sql_store
from tests.postgres import libpq_url

pytestmark = pytest.mark.postgres


def test_a_refused_statement_is_not_called_an_outage(pg_url: str) -> None:
    with Coordinator(pg_url) as worker:
        worker.create_schema()
        with sql_store(worker).engine.begin() as connection:
            connection.execute(text("ALTER TABLE saga_owners RENAME TO saga_owners_gone"))
        lines: list[str] = []
        stop = threading.Event()

        def log(line: str) -> None:
            print(line)  # shown if the test fails
            lines.append(line)
            if "retrying in" in line:  # the first failed pass: enough
                stop.set()

        admin.run_worker(worker, stop, interval=0.05, log=log)
    (said,) = [line for line in lines if "retrying in" in line]
    assert said.startswith("the database refused the worker's statement ("), said
    assert 'relation "saga_owners" does not exist' in said
    assert "database unavailable" not in "\n".join(lines)


def test_a_refused_login_is_called_one_and_shows_no_password(
    pg_url: str, postgres_server: str
) -> None:
    """The worker's role is barred from logging in while it runs (a revoked login, a
    changed password): its next connection is refused, which is said as such."""
    role = f"saga_worker_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    with psycopg.connect(libpq_url(postgres_server), autocommit=True) as admin_db:
        admin_db.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        try:
            with Coordinator(pg_url) as owner:  # the tables owned by the test's role
                owner.create_schema()
            as_role = make_url(pg_url).set(username=role, password=password)
            lines = _worker_lines_once_refused(
                as_role.render_as_string(hide_password=False), admin_db, role
            )
        finally:
            _end_sessions(admin_db, role)
            admin_db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    # Its sessions ended, the pool may first find them gone (an outage, said so); the
    # connection that replaces them is refused.
    said = next(line for line in lines if "refused the worker's connection" in line)
    assert said.startswith("the database refused the worker's connection ("), said
    assert "retrying in" in said
    assert f'role "{role}" is not permitted to log in' in said
    assert "worker's statement" not in "\n".join(lines)
    assert password not in "\n".join(lines)


def _worker_lines_once_refused(url: str, admin_db: psycopg.Connection[Any], role: str) -> list[str]:
    """What a worker logs from its start to its first retry, its role barred from logging
    in (and its sessions ended) once its first pass is done."""
    lines: list[str] = []
    stop = threading.Event()

    def log(line: str) -> None:
        print(line)  # shown if the test fails
        lines.append(line)
        if " ready" in line:  # the first pass went through: now bar the role
            admin_db.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(role)))
            _end_sessions(admin_db, role)
        if "refused the worker's connection" in line:
            stop.set()

    with Coordinator(url) as worker:
        admin.run_worker(worker, stop, interval=0.05, log=log)
    return lines


def _end_sessions(admin_db: psycopg.Connection[Any], role: str) -> None:
    admin_db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
    )
