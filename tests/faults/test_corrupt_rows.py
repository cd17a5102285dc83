"""Corrupt rows and changed definitions, met by recovery after a real crash.

A process killed with SIGKILL leaves a hundred and five sagas running; five
of them are then corrupted in the database as an attacker or a bad migration
could: bad JSON in a step result, bad JSON in the input, an unknown step
status, a stored compensation reference to ``os:system``, one to a module
that does not exist. One recovery run must finish the hundred, report each
of the five, and run nothing of them: their steps stay as they are, no
action or compensation is called, ``os:system`` never runs.

A definition changed between the crash and the recovery (the same step
names, reordered) is detected and reported; nothing runs under the wrong
definition. A context-manager saga re-entered with another function at a
recorded step is refused before that function runs; the error unwinds the
saga with the compensations it recorded.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from saga import Coordinator, DefinitionError, SagaFailed, SagaStatus
from tests.crash import ledger
from tests.crash.invariants import check_saga
from tests.faults import figures, sagas, workload
from tests.faults.child import recoverer, spawn
from tests.faults.dump import dump, forge_saga, forge_step, wait_until_stuck

pytestmark = [pytest.mark.faults, pytest.mark.crash]

GOOD = 100


def _corruptions(marker: Path) -> dict[str, dict[str, Any]]:
    """Which saga is corrupted how (keys of the seeded sagas)."""
    return {
        "seed-100": {"step": "s1", "result": '{"step": "s1", "key": '},
        "seed-101": {"saga": True, "input": '{"ledger": '},
        "seed-102": {"step": "s1", "status": "exploded"},
        "seed-cm-0": {
            "step": "s1",
            "compensation_ref": "os:system",
            "result": json.dumps(f"touch {marker}"),
        },
        "seed-cm-1": {"step": "s1", "compensation_ref": f"{sagas.__name__}.gone:cm_undo"},
    }


def _ids(url: str) -> dict[str, str]:
    return {row[2]: row[0] for row in dump(url)["saga_instances"]}  # key -> id


def test_one_recovery_finishes_the_good_sagas_and_runs_nothing_of_the_corrupt_ones(
    url: str, ledger_path: str, tmp_path: Path
) -> None:
    workload.seed(url, ledger_path, GOOD + 3, tmp_path, cm=2)
    marker = tmp_path / "os-system-ran"
    corrupt = _corruptions(marker)
    ids = _ids(url)
    for key, forged in corrupt.items():
        values = {k: v for k, v in forged.items() if k not in ("step", "saga")}
        if forged.get("saga"):
            forge_saga(url, ids[key], **values)
        else:
            forge_step(url, ids[key], forged["step"], **values)
    steps_before = {key: dump(url, ids[key])["saga_steps"] for key in corrupt}
    calls_before = {key: ledger.read(ledger_path).of(ids[key]) for key in corrupt}
    with recoverer(url) as coord:
        wait_until_stuck(url, coord.store.now)
        report = coord.recover()
        outcomes = {outcome.saga_id: outcome for outcome in report.outcomes}
        for key in corrupt:
            outcome = outcomes[ids[key]]
            assert outcome.error is not None, f"{key} was not reported: {outcome}"
            assert dump(url, ids[key])["saga_steps"] == steps_before[key], f"{key}: steps changed"
            assert ledger.read(ledger_path).of(ids[key]) == calls_before[key], (
                f"{key}: something ran"
            )
            events = [row[3] for row in dump(url, ids[key])["saga_events"]]
            assert "recovery_refused" in events, f"{key}: the refusal was not recorded"
            figures.count("hostile inputs")
        assert not marker.exists(), "os:system ran"
        good = [o for o in report.outcomes if o.saga_id not in {ids[k] for k in corrupt}]
        assert [o.error for o in good] == [None] * GOOD
        planned = workload.seeded_plans(ledger_path, GOOD)
        workload.check_settled(coord, url, ledger_path, planned, stored=GOOD + len(corrupt))


def _recover_with_the_new_release(url: str, where: Path) -> dict[str, Any]:
    with (where / "new-release.log").open("w") as log:
        process = spawn(
            ["recover", url, "--once"],
            env={"SAGA_FAULTS_EVOLVED": "1"},
            stdout=subprocess.PIPE,
            stderr=log,
        )
        out, _ = process.communicate(timeout=90)
    assert process.returncode == 0, out
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def test_a_definition_changed_between_crash_and_recovery_is_reported_not_misaligned(
    url: str, ledger_path: str, tmp_path: Path
) -> None:
    workload.seed(url, ledger_path, 3, tmp_path, saga=sagas.EVOLVING.name)
    ids = _ids(url)
    with recoverer(url) as coord:
        wait_until_stuck(url, coord.store.now)
        steps_before = dump(url)["saga_steps"]
        calls_before = ledger.read(ledger_path).calls
        report = _recover_with_the_new_release(url, tmp_path)
        assert sorted(saga_id for saga_id, _, _ in report["outcomes"]) == sorted(ids.values())
        for _saga_id, status, error in report["outcomes"]:
            assert status is None
            assert "definition version" in error, error
        assert dump(url)["saga_steps"] == steps_before, "steps changed under the new release"
        assert ledger.read(ledger_path).calls == calls_before, "a step ran under the new release"
        figures.count("hostile inputs", len(ids))
        # The old release (this process) can still finish them, as the error advises.
        wait_until_stuck(url, coord.store.now)
        assert {o.status for o in coord.recover().outcomes} == {SagaStatus.COMPLETED}
        data = sagas.how(ledger_path, abandon="s2")
        planned = [
            workload.Planned(sagas.EVOLVING.name, key, data, SagaStatus.COMPLETED) for key in ids
        ]
        workload.check_settled(coord, url, ledger_path, planned)


def replacement(data: dict[str, Any]) -> dict[str, Any]:
    """A different function, called where the saga recorded ``cm_action`` as s2."""
    ledger.attempted(data["ledger"], "replacement", "s2", 1, 1)
    return {"replaced": True}


def _reenter_with_other_code(coord: Coordinator, data: dict[str, Any]) -> None:
    with coord.saga(sagas.CONTEXT, key="seed-cm-0") as s:
        undo = sagas.cm_undo
        s.step(sagas.cm_action, data, compensate=undo, step_name="s1", retry=sagas.FAST)
        s.step(replacement, data, compensate=undo, step_name="s2", retry=sagas.FAST)


def test_a_context_manager_saga_reentered_with_other_code_is_refused(
    url: str, ledger_path: str, tmp_path: Path
) -> None:
    """Another function where the saga recorded ``cm_action``: refused before it runs; the
    block's error unwinds the saga with the compensations it recorded, nothing else."""
    workload.seed(url, ledger_path, 0, tmp_path, cm=1)
    (saga_id,) = _ids(url).values()
    data = sagas.how(ledger_path, abandon="s2")
    with Coordinator(url, lease_ttl=5.0) as coord:
        wait_until_stuck(url, coord.store.now)
        calls_before = ledger.read(ledger_path).calls
        with pytest.raises(SagaFailed) as failed:
            _reenter_with_other_code(coord, data)
        refused = failed.value.__cause__
        assert isinstance(refused, DefinitionError)
        assert f"{__name__}:replacement" in str(refused)
        assert "tests.faults.sagas:cm_action" in str(refused)
        view = coord.get(saga_id)
        assert view.status is SagaStatus.COMPENSATED
        assert {s.compensation for s in view.steps} == {"tests.faults.sagas:cm_undo"}
        new_calls = ledger.read(ledger_path).calls[len(calls_before) :]
        assert [(c.step, c.kind) for c in new_calls] == [("s2", "undo"), ("s1", "undo")]
        assert all(c.saga_id == saga_id for c in new_calls), "the replacement ran"
        check_saga(view, ledger.read(ledger_path), sagas.names())
    figures.count("hostile inputs")
