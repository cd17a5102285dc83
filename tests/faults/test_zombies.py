"""Zombies and races between processes: recoverers against each other and against owners.

* Four recoverer processes start at the same moment on hundreds of sagas left
  by a process killed with SIGKILL: each saga is claimed by exactly one of
  them (one ``lease_claimed`` event, by the recoverer that reports it) and
  its interrupted step runs again exactly once.
* A recoverer (``saga recover``'s code path) reads the stuck sagas, then
  pauses before claiming them; meanwhile a slow owner, frozen past its lease,
  wakes up and finishes its saga. The recoverer must leave that saga alone.
* An owner frozen with SIGSTOP past its lease while a recoverer claims and
  finishes its saga, then continued with SIGCONT, writes nothing and stops
  with ``LeaseLostError``; no effect is applied under an epoch older than a
  later claim's. The transactional variant: the zombie is frozen inside its
  step's database transaction, which must roll back.
* A recoverer frozen the same way in the middle of the step it is re-running
  (``coord.recover()``, ``AsyncCoordinator.recover()``, ``saga recover``'s and
  ``saga worker``'s code paths), while a second recoverer claims and finishes
  the saga, writes nothing once continued: no ``recovery_refused`` event, no
  release. It reports the saga as lost to another process.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus, SagaView
from saga.admin.recovery import LOST_REASON
from tests import children, pgbouncer
from tests.children import wait_until_claimable
from tests.crash import ledger
from tests.faults import figures, sagas, workload
from tests.faults.child import recoverer, spawn
from tests.faults.dump import dump, unchanged
from tests.faults.workload import Planned

pytestmark = [pytest.mark.faults, pytest.mark.crash, pytest.mark.timeout(240)]

RECOVERERS = 4


def _wait_until(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def _own(
    url: str, ledger_path: str, key: str, where: Path, saga: str, freeze: str
) -> subprocess.Popen[str]:
    """An owner process whose step ``freeze`` stops it with SIGSTOP after acting."""
    args = ["own", url, ledger_path, key, "--freeze", freeze, "--saga", saga, "--lease", "0.5"]
    with (where / f"owner-{key}.log").open("w") as log:
        owner = spawn(args, stdout=subprocess.PIPE, stderr=log)
    _wait_until(lambda: children.stopped(owner), "the owner froze itself")
    figures.count("freezes")
    return owner


def _ended(process: subprocess.Popen[str], timeout: float = 60.0) -> dict[str, object]:
    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"exited {process.returncode}: {out}"
    ended: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return ended


def _recover_in_a_process(url: str, where: Path, name: str = "recoverer") -> dict[str, object]:
    with (where / f"{name}.log").open("w") as log:
        process = spawn(["recover", url, "--timeout", "60"], stdout=subprocess.PIPE, stderr=log)
        return _ended(process, 90)


@pytest.mark.parametrize(
    ("backend", "count"),
    [
        ("sqlite", 60),
        pytest.param("postgres", 200, marks=pytest.mark.postgres),
        pytest.param("pgbouncer", 100, marks=pgbouncer.MARKS),
    ],
)
def test_four_recoverers_resume_each_expired_saga_exactly_once(
    backend: str, count: int, url: str, ledger_path: str, tmp_path: Path
) -> None:
    forward, unwound = count * 3 // 4, count // 4
    workload.seed(url, ledger_path, forward, tmp_path, cm=unwound)
    planned = workload.seeded_plans(ledger_path, forward, cm=unwound)
    go = tmp_path / "go"
    processes = []
    for n in range(RECOVERERS):
        with (tmp_path / f"recoverer-{n}.log").open("w") as log:
            args = ["recover", url, "--go", str(go)]
            processes.append(spawn(args, stdout=subprocess.PIPE, stderr=log))
    for process in processes:  # all four are up and waiting: then they start together
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
    go.touch()
    reports = [_ended(process, 120) for process in processes]
    figures.count("recoverer processes", RECOVERERS)
    claimed: dict[str, str] = {}
    for report in reports:
        for saga_id, _status, error in report["outcomes"]:  # type: ignore[attr-defined]
            assert error is None, f"{saga_id}: {error}"
            assert saga_id not in claimed, f"{saga_id} was recovered by two processes"
            claimed[saga_id] = str(report["owner"])
    with recoverer(url) as coord:
        views = workload.all_sagas(coord)
        assert set(claimed) == {view.id for view in views}, "a saga was not recovered"
        for view in views:
            claims = [e for e in coord.history(view.id) if e.kind == "lease_claimed"]
            assert len(claims) == 1, f"{view.id} claimed {len(claims)} times"
            assert claims[0].detail is not None
            assert claims[0].detail["owner"] == claimed[view.id]
            assert view.epoch == 2
        workload.check_settled(coord, url, ledger_path, planned)
    assert len({owner for owner in claimed.values()}) > 1 or count < RECOVERERS


@pytest.mark.postgres
def test_a_paused_recoverer_leaves_a_saga_its_owner_finished_meanwhile(
    pg_url: str, ledger_path: str, tmp_path: Path
) -> None:
    workload.seed(pg_url, ledger_path, 1, tmp_path)  # recovered first: the pause comes after it
    owner = _own(pg_url, ledger_path, "slow", tmp_path, sagas.PLAIN.name, "s2")
    with recoverer(pg_url) as coord:
        wait_until_claimable(coord)  # the frozen owner's lease ran out: its saga looks stuck
        paused, go = tmp_path / "paused", tmp_path / "go"
        with (tmp_path / "paused-recoverer.log").open("w") as log:
            process = spawn(
                ["paused-recover", pg_url, "--paused", str(paused), "--go", str(go)],
                stdout=subprocess.PIPE,
                stderr=log,
            )
            _wait_until(paused.exists, "the recoverer read both sagas and paused")
            owner.send_signal(signal.SIGCONT)  # the owner wakes up and finishes its saga
            assert _ended(owner) == {"status": "completed"}
            (slow,) = [v for v in coord.list(limit=10) if v.key == "slow"]
            before = dump(pg_url, slow.id)
            go.touch()
            summary = _ended(process)
        unchanged(pg_url, before, slow.id)
        items = {item["id"]: item for item in summary["sagas"]}  # type: ignore[attr-defined]
        assert items[slow.id]["result"] == "skipped", items[slow.id]
        planned = [
            Planned(sagas.PLAIN.name, "seed-0", sagas.how(ledger_path), SagaStatus.COMPLETED),
            Planned(sagas.PLAIN.name, "slow", sagas.how(ledger_path), SagaStatus.COMPLETED),
        ]
        workload.check_settled(coord, pg_url, ledger_path, planned)


def _no_effect_under_an_older_epoch(view: SagaView, coord: Coordinator, ledger_path: str) -> None:
    """Every call under an epoch older than the last claim's came before that claim's first."""
    claims = [e.epoch for e in coord.history(view.id) if e.kind == "lease_claimed"]
    calls = ledger.read(ledger_path).of(view.id)
    latest = max(e for e in claims if e is not None)
    first_of_latest = min(c.id for c in calls if c.epoch == latest)
    late = [c for c in calls if c.epoch < latest and c.id > first_of_latest]
    assert late == [], f"calls under an older epoch after the claim of epoch {latest}: {late}"


@pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgbouncer", marks=pgbouncer.MARKS),
    ],
)
def test_a_zombie_owner_continued_after_a_takeover_writes_nothing(
    backend: str, url: str, ledger_path: str, tmp_path: Path
) -> None:
    owner = _own(url, ledger_path, "zombie", tmp_path, sagas.PLAIN.name, "s2")
    with recoverer(url) as coord:
        wait_until_claimable(coord)
        report = _recover_in_a_process(url, tmp_path)
        (view,) = coord.list(limit=10)
        assert report["outcomes"] == [[view.id, "completed", None]]
        before = dump(url)
        owner.send_signal(signal.SIGCONT)
        assert _ended(owner) == {"error": "LeaseLostError", "epoch": 1}
        unchanged(url, before)
        calls = ledger.read(ledger_path).of(view.id)
        zombie = [c for c in calls if c.pid == owner.pid]
        assert [(c.step, c.epoch) for c in zombie] == [("s1", 1), ("s2", 1)]
        _no_effect_under_an_older_epoch(view, coord, ledger_path)
        planned = [
            Planned(sagas.PLAIN.name, "zombie", sagas.how(ledger_path), SagaStatus.COMPLETED)
        ]
        workload.check_settled(coord, url, ledger_path, planned)


@pytest.mark.postgres
def test_a_zombie_frozen_inside_a_transactional_step_commits_nothing(
    pg_url: str, ledger_path: str, tmp_path: Path
) -> None:
    sagas.create_effects_table(pg_url)
    owner = _own(pg_url, ledger_path, "zombie", tmp_path, sagas.TRANSACTIONAL.name, "s1")
    with recoverer(pg_url) as coord:
        wait_until_claimable(coord)
        with (tmp_path / "recoverer.log").open("w") as log:
            process = spawn(["recover", pg_url], stdout=subprocess.PIPE, stderr=log)
            # The recoverer claims; its own try of s1 then waits for the zombie's row lock.
            _wait_until(lambda: coord.list(limit=1)[0].epoch == 2, "the recoverer claimed")
            owner.send_signal(signal.SIGCONT)
            assert _ended(owner) == {"error": "LeaseLostError", "epoch": 1}
            report = _ended(process)
        (view,) = coord.list(limit=10)
        assert report["outcomes"] == [[view.id, "completed", None]]
        assert sagas.count_effects(pg_url) == {view.id: 1}
        assert view.step("s1").attempt == 2
        planned = [
            Planned(
                sagas.TRANSACTIONAL.name, "zombie", sagas.how(ledger_path), SagaStatus.COMPLETED
            )
        ]
        workload.check_settled(coord, pg_url, ledger_path, planned)


FROZEN_RECOVERER_LEASE = "0.5"
"""The frozen recoverer's lease (s): it runs out while the process is stopped."""


@contextlib.contextmanager
def _frozen_recoverer(
    url: str, ledger_path: str, where: Path, args: list[str]
) -> Iterator[subprocess.Popen[str]]:
    """A saga left at s2 by a dead process, and a recoverer child (``args``) that claims
    it (epoch 2) and stops itself with SIGSTOP inside s2, after acting. Killed at the
    end if it is still there (a failed test must not leave it behind)."""
    workload.seed(url, ledger_path, 1, where, how={"freeze": "s2", "freeze_epoch": 2})
    with recoverer(url) as coord:
        wait_until_claimable(coord)  # the seeding process's lease ran out
    command = [args[0], url, *args[1:], "--lease", FROZEN_RECOVERER_LEASE]
    with (where / "frozen-recoverer.log").open("w") as log:
        process = spawn(command, stdout=subprocess.PIPE, stderr=log)
    try:
        _wait_until(lambda: children.stopped(process), "the recoverer froze itself inside s2")
        figures.count("freezes")
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _take_over(coord: Coordinator) -> SagaView:
    """A second recoverer claims the saga once the frozen one's lease ran out (by the
    database clock) and finishes it."""
    wait_until_claimable(coord)
    report = coord.recover()
    (view,) = coord.list(limit=10)
    assert [(o.saga_id, o.status) for o in report.outcomes] == [(view.id, SagaStatus.COMPLETED)]
    assert view.epoch == 3
    return view


def _nothing_from_the_frozen_one(
    url: str, coord: Coordinator, ledger_path: str, view: SagaView, first: str
) -> None:
    """The history ends with the second recoverer's completion; after its claim, the
    first wrote nothing, and applied no effect."""
    history = coord.history(view.id)
    assert (history[-1].kind, history[-1].epoch) == ("saga_completed", 3)
    takeover = max(n for n, e in enumerate(history) if e.kind == "lease_claimed")
    assert history[takeover].epoch == 3
    late = [e for e in history[takeover:] if e.epoch != 3 or (e.detail or {}).get("owner") == first]
    assert late == [], f"written after the takeover, not by its claimer: {late}"
    assert "recovery_refused" not in [e.kind for e in history]
    _no_effect_under_an_older_epoch(view, coord, ledger_path)
    planned = [Planned(sagas.PLAIN.name, "seed-0", sagas.how(ledger_path), SagaStatus.COMPLETED)]
    workload.check_settled(coord, url, ledger_path, planned)


@pytest.mark.parametrize(
    "via", [["recover", "--once"], ["recover", "--async"]], ids=["sync", "async"]
)
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_recoverer_that_lost_its_lease_mid_step_writes_nothing_and_reports_it_lost(
    backend: str, via: list[str], url: str, ledger_path: str, tmp_path: Path
) -> None:
    with _frozen_recoverer(url, ledger_path, tmp_path, via) as first, recoverer(url) as coord:
        view = _take_over(coord)
        before = dump(url)
        first.send_signal(signal.SIGCONT)
        report = _ended(first)
        unchanged(url, before)  # not an event, not a release
        assert report["lost"] == [view.id]
        assert report["outcomes"] == [[view.id, None, None]]
        _nothing_from_the_frozen_one(url, coord, ledger_path, view, str(report["owner"]))


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_saga_recover_reports_a_saga_lost_mid_step_and_writes_nothing(
    backend: str, url: str, ledger_path: str, tmp_path: Path
) -> None:
    with (
        _frozen_recoverer(url, ledger_path, tmp_path, ["admin-recover"]) as first,
        recoverer(url) as coord,
    ):
        view = _take_over(coord)
        before = dump(url)
        first.send_signal(signal.SIGCONT)
        summary = _ended(first)
        unchanged(url, before)
        [item] = summary["sagas"]  # type: ignore[misc]
        assert (item["id"], item["result"]) == (view.id, "lost")
        assert item["reason"].startswith("lost to another process: ")
        assert summary["summary"]["lost"] == 1  # type: ignore[index]
        assert summary["ok"] is True  # nothing failed: the other process finishes it
        _nothing_from_the_frozen_one(url, coord, ledger_path, view, str(summary["owner"]))


@pytest.mark.parametrize("concurrency", [1, 4], ids=["one-at-a-time", "threaded"])
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_saga_worker_logs_a_saga_lost_mid_step_and_writes_nothing(
    backend: str, concurrency: int, url: str, ledger_path: str, tmp_path: Path
) -> None:
    log = tmp_path / "frozen-recoverer.log"
    command = ["worker", "--concurrency", str(concurrency)]
    with (
        _frozen_recoverer(url, ledger_path, tmp_path, command) as worker,
        recoverer(url) as coord,
    ):
        view = _take_over(coord)
        before = dump(url)
        worker.send_signal(signal.SIGCONT)
        _wait_until(lambda: "lost to another process" in log.read_text(), "the worker logged it")
        worker.send_signal(signal.SIGTERM)
        ended = _ended(worker)
        unchanged(url, before)
        lost = [line for line in ended["log"] if view.id in line]  # type: ignore[attr-defined]
        assert lost == [f"saga {view.id} (faults-3): {LOST_REASON}"]
        stats = ended["stats"]
        assert (stats["recovered"], stats["errors"], stats["lost"]) == (0, 0, 1)  # type: ignore[index]
        _nothing_from_the_frozen_one(url, coord, ledger_path, view, str(ended["owner"]))
