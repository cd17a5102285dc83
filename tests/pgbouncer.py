"""PgBouncer in transaction pooling mode in front of the test server, started by the tests.

Debian's ``pgbouncer`` on a free loopback port, with a generated ini file
(``auth_type = trust``, ``pool_mode = transaction``, every database name
forwarded to the test server). PgBouncer does not pass the ``options``
startup parameter on, so a test behind it gets a fresh database rather than
a fresh schema. Its saga URL carries ``prepare_threshold=none``, as
docs/operating.md tells deployments behind PgBouncer to do.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import tenacity
from sqlalchemy.engine import make_url

from tests import pgserver

NO_PREPARE = {"prepare_threshold": "none"}
MARKS = [pytest.mark.postgres, pytest.mark.pgbouncer]
"""The marks of a test case that runs through PgBouncer."""


def binary() -> str | None:
    """The ``pgbouncer`` executable (Debian installs it in /usr/sbin), or None."""
    found = shutil.which("pgbouncer")
    if found is None and Path("/usr/sbin/pgbouncer").exists():
        found = "/usr/sbin/pgbouncer"
    return found


def _ini(server: str, port: int, pool_size: int, users: Path) -> str:
    parsed = make_url(server)
    return "\n".join(
        [
            "[databases]",
            f"* = host={parsed.host} port={parsed.port or 5432}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {users}",
            "pool_mode = transaction",
            f"default_pool_size = {pool_size}",
            "max_client_conn = 2000",
            # Test databases come and go: idle server connections to them go soon.
            "server_idle_timeout = 5",
            "",
        ]
    )


class Bouncer:
    """A running PgBouncer; :meth:`url` turns a database URL into the same database behind it."""

    def __init__(self, port: int, root: Path) -> None:
        self.port = port
        self.root = root

    def url(self, database_url: str, prepare: bool = False) -> str:
        """``database_url``'s database through this PgBouncer, with prepared statements
        off, as recommended, unless ``prepare`` (psycopg's default: the wrong setting)."""
        parsed = make_url(database_url).set(host="127.0.0.1", port=self.port)
        if not prepare:
            parsed = parsed.update_query_dict(NO_PREPARE)
        return parsed.render_as_string(hide_password=False)

    def log(self) -> str:
        return (self.root / "pgbouncer.log").read_text(errors="replace")


def _owned_by(root: Path, user: str | None) -> list[str]:
    """As root PgBouncer must be told whom to run as; that user needs to read its files."""
    if user is None:
        return []
    owner = pwd.getpwnam(user)
    for path in [root, *root.iterdir()]:
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return ["-u", user]


@tenacity.retry(
    stop=tenacity.stop_after_delay(30),
    wait=tenacity.wait_fixed(0.05),
    retry=tenacity.retry_if_exception_type(psycopg.OperationalError),
    reraise=True,
)
def _wait_until_it_serves(conninfo: str, process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        raise RuntimeError(f"pgbouncer exited with {process.returncode}")
    with psycopg.connect(conninfo, connect_timeout=2, prepare_threshold=None) as connection:
        connection.execute("SELECT 1")


@contextlib.contextmanager
def running(server: str, pool_size: int = 20) -> Iterator[Bouncer]:
    """PgBouncer in front of the server of ``server`` (a database URL on it)."""
    executable = binary()
    assert executable is not None, "pgbouncer is not installed"
    root = Path(tempfile.mkdtemp(prefix="saga-pgbouncer-"))
    port = pgserver.free_port()
    users = root / "users.txt"
    users.write_text('"postgres" ""\n')
    ini = root / "pgbouncer.ini"
    ini.write_text(_ini(server, port, pool_size, users))
    command = [executable, *_owned_by(root, pgserver.run_as()), str(ini)]
    with (root / "pgbouncer.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        bouncer = Bouncer(port, root)
        check = make_url(bouncer.url(server)).set(drivername="postgresql")
        check = check.difference_update_query(["prepare_threshold", "options"])
        _wait_until_it_serves(check.render_as_string(hide_password=False), process)
        yield bouncer
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
