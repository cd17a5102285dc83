"""The console's guards, against a real ``saga web`` process: it will not listen
beyond loopback without a token, and then admits no request without it; the
database password appears on no page and in no log line; a SELECT-only
PostgreSQL role is enough to read everything; the app mounts under a prefix."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url
from starlette.applications import Starlette
from starlette.routing import Mount

import saga.web
from saga import Coordinator
from tests import postgres
from tests.cli.conftest import REPO, one_error_line, run_saga
from tests.web.conftest import Server, World, serving

TOKEN = "t0ken-for-the-tests-0123456789"


def test_it_refuses_to_listen_beyond_loopback_without_a_token(world: World) -> None:
    result = run_saga("--db", world.url, "web", "--host", "0.0.0.0", "--port", "1", cwd=REPO)
    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert "--host 0.0.0.0 is reachable from other machines: give --token" in line


def test_a_short_token_or_a_bad_port_is_one_error_line(world: World) -> None:
    short = run_saga("--db", world.url, "web", "--token", "abc", cwd=REPO)
    assert short.returncode == 2
    assert "--token must be at least 16 characters" in one_error_line(short.stderr)
    port = run_saga("--db", world.url, "web", "--port", "70000", cwd=REPO)
    assert port.returncode == 2
    assert "--port 70000 is not a port number" in one_error_line(port.stderr)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        number = str(taken.getsockname()[1])
        busy = run_saga("--db", world.url, "web", "--port", number, cwd=REPO)
    assert busy.returncode == 2
    assert f"cannot listen on 127.0.0.1:{number}" in one_error_line(busy.stderr)
    assert one_error_line(busy.stderr).endswith("choose another --port")


def test_a_host_that_is_no_address_of_this_machine_is_named_as_the_fault(world: World) -> None:
    # 192.0.2.1 is kept for documentation (RFC 5737): no machine has it, no DNS is asked.
    away = run_saga("--db", world.url, "web", "--host", "192.0.2.1", "--token", TOKEN, cwd=REPO)
    assert away.returncode == 2
    line = one_error_line(away.stderr)
    assert "cannot listen on 192.0.2.1:8080" in line
    assert line.endswith("check --host (an address of this machine, or 0.0.0.0 for all)")


def test_with_a_token_every_request_must_carry_it(world: World, tmp_path: Path) -> None:
    env = {"SAGA_WEB_TOKEN": TOKEN}
    with serving(world.url, tmp_path / "web.log", "--host", "0.0.0.0", env=env) as server:
        page = f"/saga/{world.completed}"
        with httpx.Client(base_url=server.base) as anonymous:
            for path in ("/", page, f"/diff?left={world.completed}&right={world.failed}"):
                refused = anonymous.get(path)
                assert refused.status_code == 401
                assert "cli-order" not in refused.text  # no saga shown, only the form
                assert "Token required" in refused.text
            wrong = anonymous.get("/", headers={"authorization": "Bearer not-the-token"})
            assert wrong.status_code == 401
            assert anonymous.post("/login", data={"token": "nope"}).status_code == 401
        bearer = httpx.get(server.base + page, headers={"authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200
        assert world.completed in bearer.text
        with httpx.Client(base_url=server.base) as browser_like:
            login = browser_like.post("/login", data={"token": TOKEN, "next": page})
            assert login.status_code == 303
            assert login.headers["location"] == page
            cookie = login.headers["set-cookie"]
            assert "HttpOnly" in cookie
            assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
            assert TOKEN not in cookie
            assert browser_like.get(page).status_code == 200


def test_without_a_token_only_local_host_names_are_served(world: World, read_only: Server) -> None:
    """A page of another site whose name resolves to 127.0.0.1 cannot read the sagas."""
    rebound = httpx.get(read_only.base + "/", headers={"host": "attacker.example:8080"})
    assert rebound.status_code == 421
    assert world.completed not in rebound.text
    assert httpx.get(read_only.base + "/").status_code == 200


def with_password(url: str, password: str) -> str:
    return make_url(url).set(password=password).render_as_string(hide_password=False)


@pytest.mark.postgres
def test_the_database_password_is_on_no_page_and_in_no_log_line(
    postgres_server: str, tmp_path: Path
) -> None:
    secret = "s3cret-" + uuid.uuid4().hex[:8]  # trust auth: the server ignores it
    with postgres.isolated_schema(postgres_server) as base:
        url = with_password(base, secret)
        with contextlib.closing(Coordinator(url)) as coord:
            from tests.cli import steps

            saga_id = coord.run(steps.ORDER, data={"sku": "A1", "amount": 1}, key="pw-1").id
        with serving(url, tmp_path / "web.log", "--allow-actions") as server:
            pages = [
                httpx.get(server.base + path).text
                for path in ("/", f"/saga/{saga_id}", "/saga/not-an-id", "/?age=soon",
                             f"/saga/{saga_id}/confirm/cancel", f"/diff?left={saga_id}&right=x")
            ]  # fmt: skip
            log = server.stop()
    assert "saga web: http://127.0.0.1" in log
    assert "***" in log
    for text in [*pages, log]:
        assert secret not in text


def console_role_snippet() -> str:
    """docs/web.md's SQL that makes a read-only role for the console, as printed there."""
    text = (REPO / "docs" / "web.md").read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```sql\n")[1:]]
    (snippet,) = [block for block in blocks if "CREATE ROLE saga_console" in block]
    return snippet


def run_console_role_snippet(database_url: str, role: str, schema: str) -> None:
    """Run the docs' snippet as its reader would: their own password, and for a schema
    other than ``public`` that schema's name in place of ``public`` (as the docs say)."""
    snippet = console_role_snippet().replace("saga_console", role).replace("'...'", "'pw-ro'")
    if schema != "public":
        snippet = snippet.replace("SCHEMA public", f"SCHEMA {schema}")
    with psycopg.connect(postgres.libpq_url(database_url), autocommit=True) as c:
        for statement in filter(str.strip, snippet.split(";")):
            c.execute(statement.encode())


@pytest.fixture(params=["public", "own schema"])
def select_only(
    request: pytest.FixtureRequest, postgres_server: str, tmp_path: Path
) -> Iterator[tuple[str, str]]:
    """Sagas in the default schema of a database of their own, or in a schema of their
    own, and a URL for the role docs/web.md's snippet makes, which may only SELECT."""
    from tests.web.conftest import build_world

    with contextlib.ExitStack() as stack:
        if request.param == "public":
            owner_url = stack.enter_context(postgres.isolated_database(postgres_server))
            schema = "public"
        else:
            owner_url = stack.enter_context(postgres.isolated_schema(postgres_server))
            options = make_url(owner_url).query["options"]
            schema = str(options).removeprefix("-csearch_path=")
        world = build_world(owner_url, tmp_path)
        role = f"web_ro_{uuid.uuid4().hex[:8]}"
        run_console_role_snippet(owner_url, role, schema)

        def drop_role() -> None:
            with psycopg.connect(postgres.libpq_url(owner_url), autocommit=True) as c:
                c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

        stack.callback(drop_role)
        reader = make_url(owner_url).set(username=role, password="pw-ro")
        reading = psycopg.connect(postgres.libpq_url(reader.render_as_string(False)))
        with reading, pytest.raises(psycopg.errors.InsufficientPrivilege):
            reading.execute("DELETE FROM saga_instances")  # it may read, and only read
        yield reader.render_as_string(False), world.stuck


@pytest.mark.postgres
def test_a_select_only_role_reads_every_page(select_only: tuple[str, str], tmp_path: Path) -> None:
    url, stuck = select_only
    with serving(url, tmp_path / "web.log") as server:
        listing = httpx.get(server.base + "/")
        assert listing.status_code == 200
        assert stuck in listing.text
        ids = [part.split('"')[0] for part in listing.text.split('data-id="')[1:]]
        assert len(ids) == 8
        for saga_id in ids:
            assert httpx.get(f"{server.base}/saga/{saga_id}").status_code == 200
        diff = httpx.get(f"{server.base}/diff?left={ids[0]}&right={ids[1]}")
        assert diff.status_code == 200


def test_the_app_mounts_under_a_prefix_of_another_app(world: World) -> None:
    with contextlib.closing(Coordinator(world.url)) as coord:
        outer = Starlette(routes=[Mount("/ops/sagas", app=saga.web.app(coord))])
        listing, page = anyio.run(
            fetch, outer, ["/ops/sagas/", f"/ops/sagas/saga/{world.completed}"]
        )
    assert listing.status_code == 200
    assert '<base href="/ops/sagas/">' in listing.text
    assert f'href="saga/{world.completed}"' in listing.text
    assert page.status_code == 200
    assert world.completed in page.text
    assert '<base href="/ops/sagas/">' in page.text  # rendered in a worker thread, too


async def fetch(asgi: Starlette, paths: list[str]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        return [await client.get(path) for path in paths]
