"""The SIGKILL soak (issue 3): money transfers under a killer, then every invariant.

A driver process keeps starting transfers (tests/soak/bank.py: debit, fee,
credit, settle-as-pivot, against a bank in its own database), some failing
at a random step, some flaky, some crash-looping; three ``saga worker``
processes (the installed console script) recover what is left behind; an
operator runs ``saga cancel`` / ``saga compensate`` on random running
sagas; a killer SIGKILLs a random one of the driver and the workers every
0.2-2 s and restarts it. After ``SAGA_SOAK_SECONDS`` (45 by default) the
load stops, the workers settle every saga, and tests/soak/checks.py checks
the store, the bank and the logs.

``SAGA_SOAK_SEED`` replays a seed: the same transfers, kill schedule and
operator choices (the processes' interleaving differs). The seed is printed
at the start of the log and in the run's summary.
"""

from __future__ import annotations

import collections
import os
import random
from pathlib import Path

import pytest

from saga import Coordinator
from tests import postgres
from tests.faults import figures
from tests.soak import bank, soak
from tests.soak.checks import Verdict, check_everything

SOAK_SECONDS = float(os.environ.get("SAGA_SOAK_SECONDS") or 45)
SEED_ENV = "SAGA_SOAK_SEED"

pytestmark = [
    pytest.mark.crash,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(SOAK_SECONDS + 300),
]


def _seed() -> int:
    chosen = os.environ.get(SEED_ENV)
    return int(chosen) if chosen else random.SystemRandom().randrange(1, 10**9)


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_sigkill_soak(postgres_server: str, tmp_path: Path) -> None:
    seed = _seed()
    soak.SUMMARY.append(f"seed {seed}: replay with {SEED_ENV}={seed} (logs in {tmp_path})")
    with (
        postgres.isolated_schema(postgres_server) as url,
        postgres.isolated_schema(postgres_server) as bank_url,
    ):
        settings = soak.Settings(url, bank_url, tmp_path, seed, SOAK_SECONDS)
        report = soak.run(settings)
        _check_processes(report, tmp_path)
        with Coordinator(url) as coord:
            cancelled = {a.saga_id for a in report.actions if a.command == "cancel"}
            verdict = check_everything(coord, bank_url, seed, report.begun, cancelled)
    _figures(report, verdict)


def _check_processes(report: soak.Report, where: Path) -> None:
    assert not report.actor_errors, report.actor_errors
    assert not report.unsettled, f"not settled after {soak.SETTLE_LIMIT:g} s: {report.unsettled}"
    odd = [d for d in report.deaths if d.returncode != -9]
    assert not odd, f"processes that died otherwise than by SIGKILL: {odd}\n" + "\n".join(
        f"{d.name}:\n{_tail(where / (d.name + '.log'))}" for d in odd
    )
    # SIGTERM lets each process finish the saga in hand; a crash-looping step in it may
    # SIGKILL the process first (-9). The drain and the settling then finish its work,
    # and every invariant below is still checked.
    assert all(code in (0, -9) for code in report.stop_codes.values()), report.stop_codes
    assert report.drain_codes[-1:] == [0], report.drain_codes
    assert not report.driver_errors, f"the driver saw errors: {report.driver_errors[:5]}"
    assert not report.bank_problems, f"the bank lost money mid-run: {report.bank_problems[:5]}"
    assert report.kills, "the killer never killed"
    # pool_size bounds each of the driver's two saga pools; its liveness session (one)
    # and the bank's pool are the rest.
    budget = 2 * report.settings.driver_pool + 1 + bank.POOL_SIZE
    assert 0 < _most(report, "driver") <= budget, f"over {budget}: {report.peak_connections}"


def _most(report: soak.Report, role: str) -> int:
    """The most connections any incarnation of ``role`` was seen holding at once."""
    named = f"soak-{role}"
    return max((c for n, c in report.peak_connections.items() if n.startswith(named)), default=0)


def _figures(report: soak.Report, verdict: Verdict) -> None:
    by_target = collections.Counter(
        "driver" if k.target == "driver" else "worker" for k in report.kills
    )
    self_kills = [d for d in report.deaths if not d.killed_by_us]
    acted = [a for a in report.actions if a.code == 0]
    outcomes = collections.Counter(report.outcomes.values())
    shown = {
        "soak: seconds of load": round(report.load_seconds),
        "soak: transfers started (each stored exactly once)": verdict.sagas,
        "soak: transfers ended completed": verdict.statuses["completed"],
        "soak: transfers ended compensated": verdict.statuses["compensated"],
        "soak: transfers ended cancelled": verdict.statuses["cancelled"],
        "soak: transfers ended failed, their pivot never returned": verdict.failed_by["pivot"],
        "soak: transfers ended failed, every attempt of a compensation died with its process": (
            verdict.failed_by["compensation"]
        ),
        "soak: SIGKILLs by the killer, of the driver": by_target["driver"],
        "soak: SIGKILLs by the killer, of a worker": by_target["worker"],
        "soak: processes killed by their own crash-looping step": len(self_kills),
        "soak: re-submissions by restarted drivers (a transfer may be re-submitted by several)": (
            report.resubmitted
        ),
        "soak: operator cancel/compensate commands that acted": len(acted),
        "soak: operator commands refused (exit 1)": len(report.actions) - len(acted),
        "soak: peak of sagas running or compensating at once": report.peak_unfinished,
        "soak: most connections a driver held at once (sampled)": _most(report, "driver"),
        "soak: most connections a worker held at once (sampled)": _most(report, "worker"),
        "soak: bank samples with money conserved, none negative": report.samples,
        "soak: bank effects applied (at most once each)": verdict.applied,
        "soak: bank effects undone (at most once each)": verdict.undone,
    }
    for name, value in shown.items():
        figures.count(name, value)
    figures.count("sagas", verdict.sagas)
    figures.count("invariant checks", verdict.sagas)
    figures.count("kills", len(report.kills) + len(self_kills))
    soak.SUMMARY.append(
        f"{verdict.sagas} transfers in {report.wall_seconds:.0f} s "
        f"({report.load_seconds:.0f} s of load, settled in {report.settle_seconds:.1f} s): "
        + ", ".join(f"{count} {status}" for status, count in sorted(verdict.statuses.items()))
    )
    soak.SUMMARY.append(
        f"kills: {by_target['driver']} driver, {by_target['worker']} worker, "
        f"{len(self_kills)} by a crash-looping step; operator: {len(acted)} acted, "
        f"{len(report.actions) - len(acted)} refused; driver outcomes {dict(outcomes)}, "
        f"{report.resubmitted} re-submissions; peak unfinished {report.peak_unfinished}; "
        f"connections at once: driver {_most(report, 'driver')}, "
        f"worker {_most(report, 'worker')}; "
        f"bank: {verdict.applied} effects applied, {verdict.undone} undone, "
        f"{report.samples} samples"
    )
    for line in soak.SUMMARY[-2:]:
        print(line)
