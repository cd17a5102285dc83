"""One soak run: start the fleet, load it while killing, stop, settle, and report.

Phases, each bounded:

1. *load* (``seconds``): the driver starts transfers, the workers recover what
   SIGKILLs leave behind, the operator cancels and compensates, the killer
   SIGKILLs a random member every 0.2-2 s and restarts it, the monitor samples
   the bank;
2. *stop*: killer and operator stop; the driver gets SIGTERM (it finishes
   what it holds), then ``driver --drain`` runs until it exits 0, so every
   transfer ever begun has been submitted at least once after its last kill;
3. *settle*: the workers carry on until no saga is running or compensating
   (crash loops still kill them; the reaper still restarts them);
4. *end*: the workers get SIGTERM and must exit 0.

Everything that happened (the seed first, then every kill, death, restart and
operator command) is printed with its time since the start, kept in the
returned :class:`Report` for the checks, and written to ``soak.log`` in the
work directory, next to each process's own log and the driver's journal.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from saga import Coordinator
from tests import postgres
from tests.children import ROOT, child_env
from tests.soak import bank
from tests.soak.actors import ACTIVE, Action, Kill, Killer, Monitor, Operator, saga_cli
from tests.soak.driver import read_journal
from tests.soak.fleet import Death, Fleet
from tests.soak.plan import ACCOUNTS, OPENING

SUMMARY: list[str] = []
"""What the soak tells at the end of the pytest run (its seed first, to replay a failure)."""
DRIVER_READY = "re-submitting"
WORKER_READY = "recovering on"
"""What the driver and ``saga worker`` print once their SIGTERM handler is in place."""
SETTLE_LIMIT = 90.0
"""How long the workers get to finish every saga once the load stopped (s)."""
STOP_LIMIT = 60.0
"""How long a SIGTERMed process gets to finish what it holds (s)."""


@dataclasses.dataclass(frozen=True)
class Settings:
    url: str
    bank_url: str
    workdir: Path
    seed: int
    seconds: float
    workers: int = 3
    driver_threads: int = 300
    driver_pool: int = 10
    """What each of the driver's saga pools (the store's, the hot path's) opens at most:
    with its liveness session and the bank's 8, its 300 threads hold at most 29 of
    PostgreSQL's 100 connections, which the workers, this process and the suite's other
    tests share. Left to the defaults, each restart's burst opened up to 59, and a test
    beside the soak was refused ("too many clients already")."""
    driver_lease: float = 3.0
    worker_lease: str = "2s"
    worker_interval: str = "0.2s"


@dataclasses.dataclass
class Report:
    """What happened, for the checks and the figures."""

    settings: Settings
    lines: list[str] = dataclasses.field(default_factory=list)
    kills: list[Kill] = dataclasses.field(default_factory=list)
    deaths: list[Death] = dataclasses.field(default_factory=list)
    actions: list[Action] = dataclasses.field(default_factory=list)
    begun: list[int] = dataclasses.field(default_factory=list)
    outcomes: dict[int, str] = dataclasses.field(default_factory=dict)
    stop_codes: dict[str, int | None] = dataclasses.field(default_factory=dict)
    drain_codes: list[int] = dataclasses.field(default_factory=list)
    unsettled: list[str] = dataclasses.field(default_factory=list)
    actor_errors: list[str] = dataclasses.field(default_factory=list)
    bank_problems: list[str] = dataclasses.field(default_factory=list)
    resubmitted: int = 0
    """Transfers a restarted driver submitted again (begun, never seen to end before)."""
    driver_errors: list[str] = dataclasses.field(default_factory=list)
    samples: int = 0
    peak_unfinished: int = 0
    peak_connections: dict[str, int] = dataclasses.field(default_factory=dict)
    """The most server connections each process incarnation held at once (sampled)."""
    load_seconds: float = 0.0
    settle_seconds: float = 0.0
    wall_seconds: float = 0.0

    def log(self, text: str) -> None:
        self.lines.append(text)
        print(text, flush=True)


def driver_command(settings: Settings, journal: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.soak.driver",
        postgres.with_query(settings.url, pool_size=str(settings.driver_pool)),
        settings.bank_url,
        str(journal),
        "--seed",
        str(settings.seed),
        "--threads",
        str(settings.driver_threads),
        "--lease",
        str(settings.driver_lease),
        *extra,
    ]


def worker_command(settings: Settings) -> list[str]:
    return saga_cli(
        settings.url,
        "worker",
        "--interval",
        settings.worker_interval,
        "--batch",
        "10",
        "--lease-ttl",
        settings.worker_lease,
    )


def run(settings: Settings) -> Report:
    report = Report(settings)
    started = time.monotonic()
    log = report.log
    log(
        f"SIGKILL soak: seed {settings.seed} (replay: SAGA_SOAK_SEED={settings.seed}), "
        f"{settings.seconds:g} s of load, {settings.workers} workers, "
        f"driver of {settings.driver_threads} threads, in {settings.workdir}"
    )
    bank.create(settings.bank_url, bank.accounts(ACCOUNTS), OPENING)
    journal = settings.workdir / "journal.jsonl"
    with Coordinator(settings.url, lease_ttl=5.0) as coord:
        coord.create_schema()
        fleet = Fleet(log, started)
        driver_log = settings.workdir / "driver.log"
        fleet.add("driver", driver_command(settings, journal), driver_log, DRIVER_READY)
        workers = [f"worker-{n}" for n in range(1, settings.workers + 1)]
        for name in workers:
            log_path = settings.workdir / f"{name}.log"
            fleet.add(name, worker_command(settings), log_path, WORKER_READY)
        killer = Killer(fleet, ["driver", *workers], settings.seed, log)
        operator = Operator(coord, settings.url, settings.seed, log)
        monitor = Monitor(coord, settings.bank_url, ACCOUNTS * OPENING)
        try:
            fleet.start()
            for actor in (monitor, killer, operator):
                actor.start()
            time.sleep(settings.seconds)
            killer.stop()
            operator.stop()
            report.load_seconds = fleet.now()
            log(f"{fleet.now():7.2f}s  load over: stopping the driver")
            report.stop_codes["driver"] = fleet.stop("driver", STOP_LIMIT)
            _drain(settings, journal, report, fleet.now)
            _settle(coord, report, fleet.now)
            for name in workers:
                report.stop_codes[name] = fleet.stop(name, STOP_LIMIT)
            monitor.stop()
        finally:
            fleet.close()
        report.kills = killer.kills
        report.deaths = fleet.deaths
        report.actions = operator.actions
        report.actor_errors = [
            f"{name}: {actor.error}"
            for name, actor in (("killer", killer), ("operator", operator), ("monitor", monitor))
            if actor.error
        ]
        report.bank_problems = monitor.problems
        report.samples = monitor.samples
        report.peak_unfinished = monitor.peak_unfinished
        report.peak_connections = monitor.peak_connections
    report.begun, report.outcomes = read_journal(str(journal))
    lines = journal.read_text().splitlines()
    told = (settings.workdir / "driver.log").read_text(errors="replace")
    report.resubmitted = sum(int(n) for n in re.findall(r"re-submitting (\d+),", told))
    report.driver_errors = [line for line in lines if '"outcome": "error' in line]
    report.wall_seconds = time.monotonic() - started
    log(f"{report.wall_seconds:7.2f}s  stopped; stop codes {report.stop_codes}")
    (settings.workdir / "soak.log").write_text("\n".join(report.lines) + "\n")
    return report


def _drain(settings: Settings, journal: Path, report: Report, now: Callable[[], float]) -> None:
    """``driver --drain`` until it exits 0: a crash-looping transfer may kill it meanwhile."""
    command = driver_command(settings, journal, "--drain")
    with (settings.workdir / "driver.log").open("ab") as output:
        for _ in range(10):
            done = subprocess.run(
                command, cwd=ROOT, env=child_env(), stdout=output, stderr=output, timeout=120
            )
            report.drain_codes.append(done.returncode)
            report.log(f"{now():7.2f}s  driver --drain exited {done.returncode}")
            if done.returncode == 0:
                return


def _settle(coord: Coordinator, report: Report, now: Callable[[], float]) -> None:
    """Wait (bounded) until the workers have finished every saga."""
    begin = time.monotonic()
    deadline = begin + SETTLE_LIMIT
    while (unfinished := coord.list(ACTIVE, limit=50)) and time.monotonic() < deadline:
        time.sleep(0.2)
    report.settle_seconds = time.monotonic() - begin
    report.unsettled = [f"{v.id} {v.key} {v.status.value} owner {v.owner}" for v in unfinished]
    report.log(
        f"{now():7.2f}s  settled in {report.settle_seconds:.1f} s"
        + (f"; still unfinished: {len(report.unsettled)}" if report.unsettled else "")
    )
