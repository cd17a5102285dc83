"""A step's failed attempt is recorded as it fails, not when its retry starts: while the
step waits 10 minutes for its next attempt, the real ``saga show``, ``show --json`` and
``history`` (and ``--json``) say "attempt 1 failed: ...; next attempt at ...", not "in
doubt"; the failure's TOOK is the attempt's own, and its stamp the failure's time. Then
the process is killed in the wait and ``saga recover`` makes the next attempt. On
SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import datetime
import json
from typing import Any

from saga import Coordinator, SagaStatus
from tests.cli.conftest import REPO, expire, run_saga
from tests.cli.wait_steps import BACKOFF, waiting

APP = ("--app", "tests.cli.wait_steps")
SAID = "attempt 1 failed: ConnectionError: card network reset; next attempt at "


def saga(url: str, *args: str) -> str:
    result = run_saga("--db", url, *APP, *args, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return result.stdout


def seconds(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def events(url: str, saga_id: str) -> list[dict[str, Any]]:
    return list(json.loads(saga(url, "history", "--json", saga_id))["events"])


def one(found: list[dict[str, Any]], kind: str, step: str, attempt: int) -> dict[str, Any]:
    [event] = [e for e in found if (e["kind"], e["step"], e["attempt"]) == (kind, step, attempt)]
    return event


def test_a_failed_attempt_is_shown_while_it_waits_for_the_next(db_url: str) -> None:
    with waiting(db_url, "wait-1") as saga_id:
        shown = " ".join(saga(db_url, "show", saga_id).split())  # the table wraps its cells
        assert SAID in shown
        assert "IN DOUBT" not in shown
        detail = json.loads(saga(db_url, "show", "--json", saga_id))
        charge = next(s for s in detail["steps"] if s["name"] == "charge")
        assert (charge["status"], charge["attempt"], charge["in_doubt"]) == ("running", 1, False)
        assert detail["in_doubt_steps"] == []
        wait = charge["retry_wait"]
        assert (wait["attempt"], wait["error"]) == (1, "ConnectionError: card network reset")
        assert wait["text"].startswith(SAID)
        history = " ".join(saga(db_url, "history", saga_id).split())
        assert f"step charge {SAID}" in history
        found = events(db_url, saga_id)
        failed = one(found, "attempt_failed", "charge", 1)
        started = one(found, "step_started", "charge", 1)
        assert not [e for e in found if e["kind"] == "step_started" and e["attempt"] == 2]
        # Stamped as it failed: the wait comes after it, not inside its TOOK.
        assert failed["at"] == wait["failed_at"]
        assert failed["duration_seconds"] < BACKOFF
        assert seconds(failed["at"]) - seconds(started["at"]) < BACKOFF
        assert failed["next_attempt_at"] == wait["next_attempt_at"]
        due = seconds(wait["next_attempt_at"]) - seconds(failed["at"])
        assert abs(due - BACKOFF) < 0.002  # the wait, from the failure's own stamp
        assert 0 <= failed["detail"]["took"] < BACKOFF
    # Killed during the wait: recovery makes the next attempt, and the record stays.
    with contextlib.closing(Coordinator(db_url)) as coord:
        expire(coord, saga_id)
        saga(db_url, "recover", saga_id)
        view = coord.get(saga_id)
    assert view.status is SagaStatus.COMPLETED
    assert view.step("charge").attempt == 2
    after = events(db_url, saga_id)
    assert one(after, "attempt_failed", "charge", 1) == failed
    retried = one(after, "step_started", "charge", 2)
    assert seconds(retried["at"]) > seconds(failed["at"])
    assert SAID not in " ".join(saga(db_url, "show", saga_id).split())
