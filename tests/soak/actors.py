"""The soak's threads in the test process: the killer, the operator, the monitor.

Each draws its choices from its own ``random.Random`` seeded from the soak's
seed, so a seed replays the same kill schedule (targets and pauses) and the
same operator decisions, though not the same interleaving of processes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from saga import Coordinator, SagaStatus
from tests.children import ROOT, child_env
from tests.soak import bank
from tests.soak.fleet import Fleet

APP = bank.__name__
OPERATOR_TIMEOUT = 60.0
ACTIVE = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)


class Actor:
    """A daemon thread that loops until :meth:`stop`; an exception ends it and is kept."""

    def __init__(self, name: str) -> None:
        self.halt = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = OPERATOR_TIMEOUT + 10) -> None:
        self.halt.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self._thread.name} did not stop"

    def _guarded(self) -> None:
        try:
            self.loop()
        except BaseException as error:
            self.error = f"{type(error).__name__}: {error}"

    def loop(self) -> None:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Kill:
    at: float
    target: str
    pid: int


class Killer(Actor):
    """Every 0.2-2 s, SIGKILLs one of ``targets`` (drawn from the seed) and restarts it."""

    def __init__(
        self, fleet: Fleet, targets: list[str], seed: int, log: Callable[[str], None]
    ) -> None:
        super().__init__("killer")
        self.fleet = fleet
        self.targets = targets
        self.rng = random.Random(f"{seed}:killer")
        self.kills: list[Kill] = []
        self.log = log

    def loop(self) -> None:
        while not self.halt.wait(self.rng.uniform(0.2, 2.0)):
            target = self.rng.choice(self.targets)
            pid = self.fleet.kill(target)
            kill = Kill(self.fleet.now(), target, pid)
            self.kills.append(kill)
            self.log(f"{kill.at:7.2f}s  SIGKILL {target} pid {pid}; restarted")


@dataclasses.dataclass(frozen=True)
class Action:
    """One operator command: on which saga, what, how it exited and its last words."""

    saga_id: str
    command: str
    code: int
    said: str


def saga_cli(url: str, *args: str) -> list[str]:
    """The installed ``saga`` console script (next to this interpreter) with ``--db``/``--app``."""
    return [str(Path(sys.executable).parent / "saga"), "--db", url, "--app", APP, *args]


class Operator(Actor):
    """Every 0.5-2 s, ``saga cancel`` or ``saga compensate`` on a random running saga."""

    def __init__(self, coord: Coordinator, url: str, seed: int, log: Callable[[str], None]) -> None:
        super().__init__("operator")
        self.coord = coord
        self.url = url
        self.rng = random.Random(f"{seed}:operator")
        self.actions: list[Action] = []
        self.log = log

    def loop(self) -> None:
        while not self.halt.wait(self.rng.uniform(0.5, 2.0)):
            running = sorted(view.id for view in self.coord.list(SagaStatus.RUNNING, limit=200))
            command = self.rng.choice(["cancel", "compensate"])
            if not running:
                continue
            saga_id = self.rng.choice(running)
            done = subprocess.run(
                saga_cli(self.url, "--json", command, saga_id),
                cwd=ROOT,
                env=child_env(),
                capture_output=True,
                text=True,
                timeout=OPERATOR_TIMEOUT,
            )
            said = (done.stderr.strip().splitlines() or [""])[-1]
            if done.returncode == 0:
                said = str(json.loads(done.stdout).get("status"))
            self.actions.append(Action(saga_id, command, done.returncode, said))
            self.log(f"operator: saga {command} {saga_id} -> exit {done.returncode}: {said}")

    def asked(self, command: str, code: int | None = None) -> set[str]:
        """Sagas this command was run on (with this exit code, if given)."""
        return {
            a.saga_id
            for a in self.actions
            if a.command == command and (code is None or a.code == code)
        }


class Monitor(Actor):
    """Every 0.5 s: how many sagas are unfinished, and whether the bank still holds all its
    money with no column below zero (every bank transaction moves money, none makes any)."""

    def __init__(self, coord: Coordinator, bank_url: str, expected_total: int) -> None:
        super().__init__("monitor")
        self.coord = coord
        self.bank_url = bank_url
        self.expected_total = expected_total
        self.samples = 0
        self.peak_unfinished = 0
        self.peak_connections: dict[str, int] = {}
        """The most server connections seen at once, by process incarnation (its
        application name, as the fleet sets it)."""
        self.problems: list[str] = []

    def loop(self) -> None:
        # One connection for the whole soak, opened as it starts: a new one per sample
        # could find the server's connections all taken by the fleet and the suite beside.
        with bank.connect(self.bank_url) as connection:
            while not self.halt.wait(0.5):
                self.sample(connection)

    def sample(self, connection: psycopg.Connection[Any]) -> None:
        unfinished = len(self.coord.list(ACTIVE, limit=5000))
        self.peak_unfinished = max(self.peak_unfinished, unfinished)
        total, negative = bank.total(connection)
        for name, count in _connections_by_application(connection):
            self.peak_connections[name] = max(self.peak_connections.get(name, 0), count)
        self.samples += 1
        if total != self.expected_total or negative:
            self.problems.append(f"sample {self.samples}: total {total}, negative {negative}")


def _connections_by_application(connection: psycopg.Connection[Any]) -> list[tuple[str, int]]:
    """The server's connections now, counted by the fleet's application names."""
    return connection.execute(
        "SELECT application_name, count(*) FROM pg_stat_activity"
        " WHERE application_name LIKE 'soak-%' GROUP BY application_name"
    ).fetchall()
