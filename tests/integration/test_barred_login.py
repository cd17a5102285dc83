"""A login PostgreSQL bars while saga runs (a role made NOLOGIN: as a revoked login or a
changed password would) is refused for good, and said as such, on every path that
connects: the store's pool, the sync hot path, the async one, and the worker's loop.

libpq gives a failed connection no sqlstate, so the FATAL line's words judge it. Before,
the hot paths called every failed connection an outage: a run retried a barred login as
if the server were down, and a worker logged ``database unavailable`` for it forever.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from saga import (
    AsyncCoordinator,
    Coordinator,
    DatabaseRefusedError,
    RetryPolicy,
    Saga,
    StepContext,
    StorageUnavailableError,
    admin,
)
from tests.postgres import libpq_url, login_role

pytestmark = pytest.mark.postgres

# Enough tries for a pooled connection the server ended to be replaced; then refused.
STORE_RETRY = RetryPolicy(max_attempts=5, initial_delay=0.01, max_delay=0.05)


@dataclasses.dataclass
class Role:
    """A login role of the test's own, and a saga URL that logs in as it."""

    name: str
    password: str
    url: str
    admin_db: psycopg.Connection[Any]

    def bar(self) -> None:
        """No more logins for it, and its sessions ended, as an operator would do."""
        self.admin_db.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(self.name)))
        self.end_sessions()

    def end_sessions(self) -> None:
        self.admin_db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
            (self.name,),
        )

    def refused_as_such(self, said: str) -> None:
        assert f'role "{self.name}" is not permitted to log in' in said, said
        assert self.password not in said


@pytest.fixture
def role(pg_url: str, postgres_server: str) -> Iterator[Role]:
    password = uuid.uuid4().hex
    with (
        login_role(postgres_server, password, superuser=True) as name,
        psycopg.connect(libpq_url(postgres_server), autocommit=True) as admin_db,
    ):
        url = make_url(pg_url).set(username=name, password=password)
        made = Role(name, password, url.render_as_string(hide_password=False), admin_db)
        try:
            with Coordinator(pg_url) as owner:  # the tables owned by the test's role
                owner.create_schema()
            yield made
        finally:
            made.end_sessions()


def one_step_saga() -> Saga:
    saga = Saga(f"barred-{uuid.uuid4().hex[:6]}")

    @saga.step(name="only")
    def only(ctx: StepContext) -> int:
        del ctx
        return 1

    return saga


def test_a_run_whose_login_is_barred_is_refused_not_retried_as_an_outage(role: Role) -> None:
    saga = one_step_saga()
    with Coordinator(role.url, store_retry=STORE_RETRY) as coord:
        coord.register(saga)
        coord.run(saga)  # its connections are open, then its login is barred
        role.bar()
        with pytest.raises(DatabaseRefusedError) as refused:
            coord.run(saga)
    assert not isinstance(refused.value, StorageUnavailableError)
    role.refused_as_such(str(refused.value))


def test_an_async_run_whose_login_is_barred_is_refused_too(role: Role) -> None:
    saga = one_step_saga()

    async def main() -> BaseException:
        async with AsyncCoordinator(role.url, store_retry=STORE_RETRY) as coord:
            coord.register(saga)
            await coord.run(saga)
            await asyncio.to_thread(role.bar)
            with pytest.raises(DatabaseRefusedError) as refused:
                await coord.run(saga)
            return refused.value

    refused = asyncio.run(main())
    assert not isinstance(refused, StorageUnavailableError)
    role.refused_as_such(str(refused))


def test_a_worker_says_its_connection_was_refused(role: Role) -> None:
    lines: list[str] = []
    stop = threading.Event()

    def log(line: str) -> None:
        print(line)  # shown if the test fails
        lines.append(line)
        if " ready" in line:  # the first pass went through: now bar the role
            role.bar()
        if "refused the worker's connection" in line:
            stop.set()

    with Coordinator(role.url) as worker:
        admin.run_worker(worker, stop, interval=0.05, log=log)
    # Its sessions ended, the pool may first find them gone (an outage, said so); the
    # connection that replaces them is refused.
    said = next(line for line in lines if "refused the worker's connection" in line)
    assert said.startswith("the database refused the worker's connection ("), said
    assert "retrying in" in said
    role.refused_as_such(said)
    assert "worker's statement" not in "\n".join(lines)
    assert role.password not in "\n".join(lines)
