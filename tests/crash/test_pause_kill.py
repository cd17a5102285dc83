"""An operator's ``saga pause`` killed with SIGKILL half-way, then run again.

A ``cli-order`` saga whose process died in ``charge`` (tests/cli/steps.py). The real
``saga pause`` is killed (``SAGA_FAULTS``) right after its guarded write made the
saga ``paused``, before its claim hands the saga back. What the kill leaves is safe:
the saga is paused, a recoverer claims nothing, and nothing ran or was undone. The
same command run again finishes the hand-back (claim, ``saga_paused``), and
``saga resume`` then completes the saga with every step's effect once.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.children import log_tail, spawn
from tests.cli import steps
from tests.cli.conftest import APP, crashed, run_saga
from tests.crash.invariants import check_history

pytestmark = pytest.mark.crash


def saga_args(url: str, *args: str) -> list[str]:
    return ["--db", url, "--app", APP, *args]


def test_a_pause_killed_after_its_write_leaves_the_saga_paused_and_is_finished_again(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        coord.register(steps.ORDER)
        saga_id = crashed(coord)  # its process died in charge; its lease ran out
        log = tmp_path / "pause.log"
        with log.open("a") as output:
            child = spawn(
                "saga.cli",
                saga_args(db_url, "pause", saga_id),
                faults="after_pause_request",
                stdout=output,
                stderr=output,
            )
            assert child.wait(120) == -signal.SIGKILL, log_tail(log)
        left = coord.get(saga_id)
        assert left.status is SagaStatus.PAUSED, log_tail(log)
        assert left.epoch == 1  # the killed command never claimed it
        kinds = [e.kind for e in coord.history(saga_id)]
        assert kinds[-1] == "operator_action"
        assert coord.recover().outcomes == []  # a recoverer leaves it alone
        assert coord.get(saga_id).status is SagaStatus.PAUSED

        again = run_saga(*saga_args(db_url, "pause", saga_id, "--json"), cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["status"] == "paused"
        handed = coord.get(saga_id)
        assert (handed.owner, handed.epoch) == (None, 2)
        events = coord.history(saga_id)
        assert [e.kind for e in events][-1] == "saga_paused"
        assert sum(e.kind == "operator_action" for e in events) == 1  # one pause recorded

        resumed = run_saga(*saga_args(db_url, "resume", saga_id, "--json"), cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        done = coord.get(saga_id)
        assert done.status is SagaStatus.COMPLETED
        assert [s.attempt for s in done.steps] == [1, 2, 1, 1]  # charge ran again, once
        check_history(done, coord.store.events(saga_id))
