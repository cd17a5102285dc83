"""An operator's ``saga retry`` (and ``saga skip``) killed with SIGKILL, then finished.

The saga (tests/cli/forward_steps.py) failed at ``invoice``, past its pivot; the fix
is deployed. The real ``saga retry`` is killed (``SAGA_FAULTS``):

* right after its claim, before it records the saga running again: the saga is still
  ``failed``, under the dead process's lease. Once that lease is gone (expired on
  purpose), ``saga retry`` run again completes it, ``invoice`` run once.
* right before the saga's final commit, ``invoice`` having run: the saga is ``running``
  with ``invoice`` started and never confirmed, past the attempts its own policy
  allows. Recovery reads where the retry's fresh budget began and completes the saga
  within it; if every attempt of that budget dies too, recovery gives the step up in
  doubt, the saga is ``failed`` again, nothing unwound, and ``saga retry`` completes it.

``saga skip`` of ``invoice`` killed after its claim records nothing (run again, it
completes the saga with the operator's result); killed before the saga's last commit,
the result is recorded and recovery completes the saga, ``invoice`` never run again.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from saga import Coordinator, SagaFailed, SagaStatus, StepStatus
from tests.children import log_tail, spawn
from tests.cli.conftest import run_saga
from tests.cli.forward_steps import FORWARD
from tests.crash.invariants import check_history
from tests.integration.support import expire_lease

pytestmark = pytest.mark.crash

APP = "tests.cli.forward_steps"


def failed_then_fixed(coord: Coordinator, tmp_path: Path) -> str:
    blocker = tmp_path / "down"
    blocker.touch()
    with pytest.raises(SagaFailed) as raised:
        coord.run(FORWARD, data={"blocker": str(blocker)})
    blocker.unlink()
    return raised.value.saga_id


def killed(url: str, command: list[str], fault: str, log: Path) -> None:
    """``saga --db URL --app ... COMMAND``, killed with SIGKILL at ``fault``."""
    with log.open("a") as output:
        child = spawn(
            "saga.cli",
            ["--db", url, "--app", APP, *command],
            faults=fault,
            stdout=output,
            stderr=output,
        )
        assert child.wait(120) == -signal.SIGKILL, log_tail(log)


def killed_retry(url: str, saga_id: str, fault: str, log: Path) -> None:
    killed(url, ["retry", saga_id], fault, log)


def retried(url: str, saga_id: str, cwd: Path) -> dict[str, object]:
    again = run_saga("--db", url, "--app", APP, "retry", saga_id, "--json", cwd=cwd)
    assert again.returncode == 0, again.stdout + again.stderr
    return dict(json.loads(again.stdout))


def test_a_retry_killed_after_its_claim_is_run_again(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        saga_id = failed_then_fixed(coord, tmp_path)
        killed_retry(db_url, saga_id, "before_retry_commit:invoice", tmp_path / "retry.log")
        view = coord.get(saga_id)
        assert view.status is SagaStatus.FAILED
        assert view.step("invoice").attempt == 2  # nothing of the retry but its claim
        expire_lease(coord, saga_id)

        assert retried(db_url, saga_id, tmp_path)["status"] == "completed"
        events = coord.store.events(saga_id)
        started = [e.attempt for e in events if e.kind == "step_started" and e.step == "invoice"]
        assert started == [1, 2, 3]
        check_history(coord.get(saga_id), events)


def test_a_retry_killed_mid_run_is_finished_by_recovery_within_its_fresh_budget(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        saga_id = failed_then_fixed(coord, tmp_path)  # invoice: attempts 1 and 2 failed
        killed_retry(db_url, saga_id, "before_final_commit", tmp_path / "retry.log")
        view = coord.get(saga_id)
        assert view.status is SagaStatus.RUNNING
        assert view.step("invoice").status is StepStatus.RUNNING
        assert view.step("invoice").attempt == 3  # past its policy's 2: the retry's budget
        expire_lease(coord, saga_id)

        report = coord.recover()

        assert [o.saga_id for o in report.outcomes] == [saga_id]
        view = coord.get(saga_id)
        assert view.status is SagaStatus.COMPLETED
        assert view.step("invoice").attempt == 4  # the fresh budget's second attempt
        assert view.step("charge").status is StepStatus.SUCCEEDED  # never unwound
        check_history(view, coord.store.events(saga_id))


def test_a_retry_whose_fresh_budget_crashes_used_up_fails_again_in_doubt(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        saga_id = failed_then_fixed(coord, tmp_path)
        killed_retry(db_url, saga_id, "before_final_commit", tmp_path / "retry.log")
        expire_lease(coord, saga_id)
        killed(db_url, ["recover"], "before_final_commit", tmp_path / "recover.log")
        assert coord.get(saga_id).step("invoice").attempt == 4  # both of the budget's, died
        expire_lease(coord, saga_id)

        coord.recover()

        view = coord.get(saga_id)
        assert view.status is SagaStatus.FAILED
        assert view.step("invoice").status is StepStatus.IN_DOUBT
        assert view.step("charge").status is StepStatus.SUCCEEDED  # never unwound
        assert retried(db_url, saga_id, tmp_path)["status"] == "completed"
        check_history(coord.get(saga_id), coord.store.events(saga_id))


def skip_args(saga_id: str) -> list[str]:
    return ["skip", saga_id, "--step", "invoice", "--result", '{"invoice": 7}', "--reason", "hand"]


def test_a_skip_killed_after_its_claim_records_nothing_and_is_run_again(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        saga_id = failed_then_fixed(coord, tmp_path)
        killed(db_url, skip_args(saga_id), "before_retry_commit", tmp_path / "skip.log")
        view = coord.get(saga_id)
        assert view.status is SagaStatus.FAILED
        assert view.step("invoice").status is StepStatus.FAILED  # no result recorded
        expire_lease(coord, saga_id)

        again = run_saga("--db", db_url, "--app", APP, *skip_args(saga_id), cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        view = coord.get(saga_id)
        assert view.status is SagaStatus.COMPLETED
        assert view.step("invoice").result == {"invoice": 7}
        assert view.step("invoice").attempt == 2  # done by hand: never run again
        check_history(view, coord.store.events(saga_id))


def test_a_skip_killed_before_the_saga_completes_is_finished_by_recovery(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        saga_id = failed_then_fixed(coord, tmp_path)
        killed(db_url, skip_args(saga_id), "before_final_commit", tmp_path / "skip.log")
        view = coord.get(saga_id)
        assert view.status is SagaStatus.RUNNING  # the step's result is recorded
        assert view.step("invoice").status is StepStatus.SUCCEEDED
        expire_lease(coord, saga_id)

        coord.recover()

        view = coord.get(saga_id)
        assert view.status is SagaStatus.COMPLETED
        assert view.step("invoice").result == {"invoice": 7}
        assert view.step("invoice").attempt == 2
        check_history(view, coord.store.events(saga_id))
