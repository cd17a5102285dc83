"""A worker never claims what it cannot run: two workers of different releases side by
side, each finishing only its own sagas, and a worker without ``--app`` that leaves
every stuck saga as it found it, says so once, counts it and ``saga list --stuck``
tells why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from saga import Coordinator, Saga, SagaScope, SagaStatus, StepContext
from tests.cli import release_a, release_b
from tests.cli.conftest import APP, REPO, World, expire, run_saga, saga_command
from tests.cli.steps import SimulatedCrash
from tests.cli.test_worker_and_demo import _read_line, _started, _wait_for

PASSES = 20

orphan = Saga("rolling", version=3)  # a release no worker here runs


@orphan.step()
def book(ctx: StepContext) -> str:
    raise SimulatedCrash("book")


_WORKER = """
import importlib, json, sys, threading
from saga import Coordinator
from saga.admin import WorkerStats, run_worker

url, module, expected, passes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
importlib.import_module(module)
stop, stats, lines = threading.Event(), WorkerStats(), []

def enough():  # this worker's share done, and at least `passes` passes made
    while not stop.wait(0.02):
        if stats.passes >= passes and stats.recovered >= expected:
            stop.set()

def log(line):
    lines.append(line)

threading.Thread(target=enough, daemon=True).start()
with Coordinator(url, trusted_modules=[module], lease_ttl=30) as coord:
    run_worker(coord, stop, interval=0.05, concurrency=2, log=log, stats=stats)
print(json.dumps({"owner": coord.owner, "passes": stats.passes, "recovered": stats.recovered,
                  "errors": stats.errors, "log": lines}))
"""


def _declared(coord: Coordinator, saga: Saga, key: str) -> str:
    with pytest.raises(SimulatedCrash):
        coord.run(saga, key=key)
    record = coord.store.find(saga.name, key)
    assert record is not None
    expire(coord, record.id)
    return record.id


def _scoped(coord: Coordinator, release: Any, key: str) -> str:
    """A context-manager saga whose compensation lives in ``release``'s module."""
    scope = coord.saga("rolling-scoped", key=key)
    with pytest.raises(SimulatedCrash):
        _step_then_crash(scope, release)
    expire(coord, scope.id)
    return scope.id


def _step_then_crash(scope: SagaScope, release: Any) -> None:
    with scope:
        scope.step(release.act, "seat", compensate=release.undo)
        raise SimulatedCrash("between steps")


def _worker(url: str, module: str, expected: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", _WORKER, url, module, str(expected), str(PASSES)]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)


def _claims(coord: Coordinator, saga_id: str) -> list[str]:
    return [
        str((event.detail or {}).get("owner"))
        for event in coord.history(saga_id)
        if event.kind == "lease_claimed"
    ]


def test_two_releases_side_by_side_each_finish_their_own(db_url: str) -> None:
    with Coordinator(db_url, lease_ttl=600) as coord:
        mine = {
            "a": [_declared(coord, release_a.rolling, f"a-{n}") for n in range(3)],
            "b": [_declared(coord, release_b.rolling, f"b-{n}") for n in range(3)],
        }
        mine["a"].append(_scoped(coord, release_a, "scoped-a"))
        mine["b"].append(_scoped(coord, release_b, "scoped-b"))
        nobody = _declared(coord, orphan, "v3")
        before = len(coord.history(nobody))
        workers = {
            side: _worker(db_url, f"tests.cli.release_{side}", len(mine[side]))
            for side in ("a", "b")
        }
        reports = {}
        for side, worker in workers.items():
            out, _ = worker.communicate(timeout=300)
            assert worker.returncode == 0
            reports[side] = json.loads(out)
        for side, report in reports.items():
            assert report["passes"] >= PASSES
            assert report["errors"] == 0, report["log"]
            for saga_id in mine[side]:
                view = coord.get(saga_id)
                declared = view.kind == "declarative"
                assert view.status is (SagaStatus.COMPLETED if declared else SagaStatus.COMPENSATED)
                assert view.epoch == 2  # the crashed run's, and one claim
                assert _claims(coord, saga_id) == [report["owner"]]
                kinds = [event.kind for event in coord.history(saga_id)]
                assert "recovery_refused" not in kinds
            said = [line for line in report["log"] if nobody in line]
            assert len(said) == 1, report["log"]  # once, whatever the number of passes
            assert "left unclaimed" in said[0]
            assert "version 3" in said[0]
        left = coord.get(nobody)
        assert (left.status, left.epoch, left.owner) == (SagaStatus.RUNNING, 1, coord.owner)
        assert len(coord.history(nobody)) == before  # not a single event written


def _gauge(endpoint: str, name: str) -> float | None:
    import urllib.request

    with urllib.request.urlopen(endpoint, timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


def test_a_worker_without_the_definitions_leaves_stuck_sagas_untouched(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    stuck = [world.stuck, world.stuck_imperative]
    before = {saga_id: (coord.get(saga_id).epoch, len(coord.history(saga_id))) for saga_id in stuck}
    command = [*saga_command(), "--db", world.url, "worker", "--interval", "0.1s"]
    command += ["--metrics-port", "0"]  # no --app: neither saga can run here
    with _started(command, tmp_path) as worker:
        lines: list[str] = []
        _wait_for(lambda: "/metrics" in _read_line(worker, lines))
        endpoint = lines[-1].split(" metrics on ")[1].strip()
        _wait_for(lambda: _gauge(endpoint, "saga_unrunnable") == 2)
        worker.send_signal(signal.SIGTERM)
        _, rest = worker.communicate(timeout=60)
    assert worker.returncode == 0, rest
    said = "".join(lines) + rest
    for saga_id in stuck:
        assert said.count(f"saga {saga_id} (") == 1, said
        assert (coord.get(saga_id).epoch, len(coord.history(saga_id))) == before[saga_id]
    assert f"saga {world.stuck} (cli-order) left unclaimed: no saga definition named" in said
    assert f"saga {world.stuck_imperative} (cli-transfer) left unclaimed: stored reference" in said
    # The real script: this test's process has the definitions, a command without --app not.
    listed = run_saga("--db", world.url, "--app", APP, "list", "--stuck", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "no worker started like this one" not in listed.stdout
    bare = run_saga("--db", world.url, "list", "--stuck", "--wide", cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    for saga_id in stuck:
        assert f"{saga_id}: no worker started like this one can run it: " in bare.stdout
    as_json = run_saga("--db", world.url, "list", "--stuck", "--json", cwd=tmp_path)
    notes = {s["id"]: s.get("cannot_run_here") for s in json.loads(as_json.stdout)["sagas"]}
    assert "no saga definition named 'cli-order'" in notes[world.stuck]
    assert "tests.cli.steps:credit_back" in notes[world.stuck_imperative]
