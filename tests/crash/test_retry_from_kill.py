"""``saga retry ID --from STEP`` killed with SIGKILL, then finished.

The saga (``cli-forward-from`` of tests/cli/forward_steps.py) failed at ``invoice``,
past its pivot, after ``stamp`` (idempotent) ran once; the fix is deployed and the
operator retries from ``stamp``. The real command is killed (``SAGA_FAULTS``):

* right after its claim, before the commit that sets ``stamp`` running and ``invoice``
  back to pending: nothing is changed but the lease. Run again once that lease is gone
  (expired on purpose), it completes the saga, ``stamp`` run once more.
* right before the saga's final commit, ``invoice`` having run: the saga is ``running``,
  ``invoice`` started past the attempts its own policy allows. Recovery reads where the
  fresh budget of that step began (``budget_from`` on its start) and completes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from saga import Coordinator, SagaFailed, SagaStatus, StepStatus
from tests.cli.conftest import run_saga
from tests.cli.forward_steps import FORWARD_FROM
from tests.crash.invariants import check_history
from tests.crash.test_retry_kill import APP, killed
from tests.integration.support import expire_lease

pytestmark = pytest.mark.crash


def failed_then_fixed(coord: Coordinator, tmp_path: Path) -> str:
    blocker, stamps = tmp_path / "down", tmp_path / "stamps"
    blocker.touch()
    with pytest.raises(SagaFailed) as raised:
        coord.run(FORWARD_FROM, data={"blocker": str(blocker), "stamps": str(stamps)})
    blocker.unlink()
    assert stamps.read_text() == "1\n"
    return raised.value.saga_id


def killed_retry_from(url: str, saga_id: str, fault: str, log: Path) -> None:
    killed(url, ["retry", saga_id, "--from", "stamp"], fault, log)


def test_a_retry_from_killed_after_its_claim_is_run_again(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD_FROM)
        saga_id = failed_then_fixed(coord, tmp_path)
        before = [e.kind for e in coord.store.events(saga_id)]
        killed_retry_from(db_url, saga_id, "before_retry_commit:stamp", tmp_path / "retry.log")
        view = coord.get(saga_id)
        assert view.status is SagaStatus.FAILED
        assert view.step("stamp").status is StepStatus.SUCCEEDED  # nothing set back yet
        assert view.step("invoice").status is StepStatus.FAILED
        claim = [e.kind for e in coord.store.events(saga_id)][len(before) :]
        assert claim == ["operator_action"]  # the claim's record, nothing else
        expire_lease(coord, saga_id)

        again = run_saga(
            "--db", db_url, "--app", APP, "retry", saga_id, "--from", "stamp", cwd=tmp_path
        )
        assert again.returncode == 0, again.stdout + again.stderr
        view = coord.get(saga_id)
        assert view.status is SagaStatus.COMPLETED
        assert (tmp_path / "stamps").read_text() == "1\n2\n"
        check_history(view, coord.store.events(saga_id))


def test_a_retry_from_killed_mid_run_is_finished_by_recovery_within_its_fresh_budget(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD_FROM)
        saga_id = failed_then_fixed(coord, tmp_path)  # invoice: attempts 1 and 2 failed
        killed_retry_from(db_url, saga_id, "before_final_commit", tmp_path / "retry.log")
        view = coord.get(saga_id)
        assert view.status is SagaStatus.RUNNING
        assert view.step("stamp").attempt == 2
        assert view.step("invoice").status is StepStatus.RUNNING
        assert view.step("invoice").attempt == 3  # past its policy's 2: the fresh budget
        expire_lease(coord, saga_id)

        report = coord.recover()

        assert [o.saga_id for o in report.outcomes] == [saga_id]
        view = coord.get(saga_id)
        assert view.status is SagaStatus.COMPLETED
        assert view.step("invoice").attempt == 4  # the fresh budget's second attempt
        assert view.step("reserve").status is StepStatus.SUCCEEDED  # never unwound
        assert (tmp_path / "stamps").read_text() == "1\n2\n"  # stamp is not run a third time
        check_history(view, coord.store.events(saga_id))
