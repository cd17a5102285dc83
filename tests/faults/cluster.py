"""A throwaway PostgreSQL cluster the test owns: initdb, start, stop -m immediate, start again.

The server binaries come from ``pg_config --bindir``, ``/usr/lib/postgresql/*/bin``
or the ``PATH``. PostgreSQL refuses to run as root, so as root every command
runs as the ``postgres`` OS user (``runuser -u postgres --``) in a directory
that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

from tests.faults import figures

SERVER_SETTINGS = (
    "-c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60 "
    "-c shared_buffers=16MB -c log_min_messages=fatal"
)
"""``fsync=off`` is safe here: an immediate stop kills the server, not the machine,
so every write it acknowledged is still in the operating system's cache."""


def bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` live, or None."""
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


def why_unavailable() -> str | None:
    """Why a throwaway cluster cannot be made here, or None."""
    if bindir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl) on this machine"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' OS user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Cluster:
    """One PostgreSQL server in a temporary directory, on a free port."""

    def __init__(self, root: Path, binaries: Path) -> None:
        self.root = root
        self.binaries = binaries
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = _free_port()

    def database(self) -> str:
        """A new, empty database on this server; its saga URL."""
        name = f"saga_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._libpq("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.binaries / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:]}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        self.start()

    def _libpq(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} {SERVER_SETTINGS}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def crash_and_restart(self, down: float) -> None:
        """Stop at once (as a crash would), stay down ``down`` seconds, start again."""
        self.stop("immediate")
        time.sleep(down)
        self.start()
        figures.count("restarts")


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    binaries = bindir()
    assert binaries is not None
    root = Path(tempfile.mkdtemp(prefix="saga-pg-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    cluster = Cluster(root, binaries)
    try:
        cluster.init()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
