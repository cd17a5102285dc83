"""Issue 29: a compensation that fails again and waits for its next attempt is no error.
The real ``saga compensate`` and ``saga retry-compensation`` (and ``--json``) say the
saga is compensating, which attempt of how many failed and when the next is due, and
exit 0; ``saga recover`` finishes it once the participant is back. Under the default
compensation budget, on SQLite and PostgreSQL (``db_url``).

Under the old default (five attempts within about 1.5 s) the same commands printed
"saga: error: ... failed" and exited 1.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
from pathlib import Path

import pytest

from saga import Coordinator, RetryPolicy, SagaFailed, SagaScope, SagaStatus
from tests.cli import outage_steps
from tests.cli.conftest import expire, run_saga

APP = ("--app", "tests.cli.outage_steps")
ONCE = RetryPolicy(max_attempts=1, retry_on=(Exception,))


def _failed(url: str, down: Path, key: str) -> str:
    """A saga left ``failed`` by an application whose refund policy gave up at once,
    while the bank was down."""
    down.touch()
    coord = Coordinator(url, compensation_retry=ONCE)
    try:
        with pytest.raises(SagaFailed) as failure:
            _pay_then_cancel(coord.saga("cli-outage", key=key), down)
    finally:
        coord.close()
    assert failure.value.status is SagaStatus.FAILED
    return failure.value.saga_id


def _pay_then_cancel(scope: SagaScope, down: Path) -> None:
    with scope:
        scope.step(outage_steps.pay, "alice", 10, str(down), compensate=outage_steps.refund)
        raise KeyError("the order was cancelled")


def _seconds(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _waiting_line(saga_id: str, attempt: int, of: int) -> re.Pattern[str]:
    return re.compile(
        rf"saga {saga_id} is compensating: attempt {attempt} of {of} of the compensation of "
        r"step 'pay' failed \(ConnectionError: bank unreachable\); "
        r"next attempt at \d\d:\d\d:\d\d UTC, a worker retries it"
    )


@pytest.mark.parametrize("verb", ["compensate", "retry-compensation"])
def test_a_verb_whose_compensation_waits_says_so_and_exits_0(
    verb: str, db_url: str, tmp_path: Path
) -> None:
    down = tmp_path / "bank-down"
    saga_id = _failed(db_url, down, f"{verb}-1")
    done = run_saga("--db", db_url, *APP, verb, saga_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    # A fresh budget of 20 after the one attempt made: four in place, the fifth waits.
    assert _waiting_line(saga_id, 5, 21).fullmatch(done.stdout.strip()), done.stdout

    # The bank is back and the attempt comes due: recovery finishes it, nobody else.
    down.unlink()
    with contextlib.closing(Coordinator(db_url)) as coord:
        assert coord.get(saga_id).status is SagaStatus.COMPENSATING
        expire(coord, saga_id)
        recovered = run_saga("--db", db_url, *APP, "recover", saga_id, cwd=tmp_path)
        assert recovered.returncode == 0, recovered.stderr
        assert coord.get(saga_id).status is SagaStatus.COMPENSATED


def test_the_json_of_a_waiting_compensation_says_when_and_how_many(
    db_url: str, tmp_path: Path
) -> None:
    saga_id = _failed(db_url, tmp_path / "bank-down", "json-1")
    done = run_saga("--db", db_url, *APP, "compensate", "--json", saga_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert (reply["id"], reply["status"], reply["owner"]) == (saga_id, "compensating", None)
    waiting = reply["waiting"]
    assert (waiting["step"], waiting["attempt"], waiting["max_attempts"]) == ("pay", 5, 21)
    assert waiting["error"] == "ConnectionError: bank unreachable"
    # Due when the lease runs out, which is when a worker claims it (both stamped by the
    # database in the hand-back's commit: the failure's time plus the wait, the lease's end).
    due = _seconds(waiting["next_attempt_at"])
    assert due == pytest.approx(_seconds(reply["lease_expires_at"]), abs=1.0)
    assert due - _seconds(reply["updated_at"]) == pytest.approx(4.0, rel=0.11)  # jittered 4 s
    assert _waiting_line(saga_id, 5, 21).fullmatch(waiting["text"])


def test_saga_recover_says_a_compensation_that_fails_again_is_waiting(
    db_url: str, tmp_path: Path
) -> None:
    down = tmp_path / "bank-down"
    saga_id = _failed(db_url, down, "recover-1")
    assert run_saga("--db", db_url, *APP, "compensate", saga_id, cwd=tmp_path).returncode == 0
    with contextlib.closing(Coordinator(db_url)) as coord:
        expire(coord, saga_id)  # its next attempt is due; the bank is still down
    recovered = run_saga("--db", db_url, *APP, "recover", saga_id, cwd=tmp_path)
    assert recovered.returncode == 0, recovered.stderr
    said = " ".join(recovered.stdout.split())
    assert "skipped" in said
    assert _waiting_line(saga_id, 6, 21).search(said), said
    assert "error" not in recovered.stderr
