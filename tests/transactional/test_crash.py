"""SIGKILL at every point around a transactional step's commit, then recover: exactly once.

A forked child runs one saga whose steps write the application's table
through ``ctx.session`` and dies at one fault point: before or after the
step's start is recorded, inside the step's transaction after its writes and
its success record and just before COMMIT (``before_transact_commit``),
right after that commit (``after_action``, ``after_success_commit``), around
a transactional compensation and around the final commit. Another
coordinator then recovers the saga, and the effect rows must agree with the
recorded steps: a step recorded succeeded has exactly one row, whose id is
its recorded result; a step whose transaction never committed has none; a
compensated step has its one row and one undo row; nothing is applied twice.

Everything runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.children import ForkServer, log_tail, recover_until_settled
from tests.transactional import app
from tests.transactional.invariants import check_agree

pytestmark = pytest.mark.crash

STEPS = ("s1", "s2")


def _forward_points(style: str) -> list[str]:
    points = []
    for step in STEPS:
        points += [f"before_start_commit:{step}", f"after_start_commit:{step}"]
        points += [f"before_transact_commit:{step}", f"after_action:{step}"]
        points += [f"after_success_commit:{step}"] if style == "cm" else []
    return [*points, "before_final_commit", "after_final_commit"]


def _failing_points(style: str) -> list[str]:
    points = _forward_points(style)[: len(_forward_points(style)) // 2 - 1]  # s1's
    points += ["before_start_commit:s2", "after_start_commit:s2", "before_unwind"]
    points += ["before_undo:s1", "before_transact_commit:s1#2", "after_undo_commit:s1"]
    return [*points, "before_final_commit", "after_final_commit"]


SHAPES: dict[str, list[str]] = {
    "forward": _forward_points("declarative"),
    "failing": _failing_points("declarative"),
    "on-crash": _forward_points("declarative"),
    "cm-forward": _forward_points("cm"),
    "cm-failing": _failing_points("cm"),
}


def expected(shape: str, point: str) -> SagaStatus | None:
    """How the saga ends after the crash and recovery (None: nothing was recorded)."""
    if point == "before_start_commit:s1":
        return None
    if shape.endswith("failing"):
        return SagaStatus.COMPENSATED
    if point == "after_final_commit" or shape == "forward":
        return SagaStatus.COMPLETED
    return SagaStatus.COMPENSATED  # on_crash="compensate", or an unfinished block


ENTRY = "tests.transactional.child:job"


def _cases() -> list[object]:
    cases = []
    for shape, points in SHAPES.items():
        for point in points:
            cases.append(pytest.param("sqlite", shape, point, id=f"sqlite-{shape}-{point}"))
            if shape != "on-crash":  # routing, not storage: SQLite covers it
                postgres = pytest.param(
                    "postgres",
                    shape,
                    point,
                    id=f"postgres-{shape}-{point}",
                    marks=pytest.mark.postgres,
                )
                cases.append(postgres)
    return cases


@pytest.mark.parametrize(("backend_url", "shape", "point"), _cases(), indirect=["backend_url"])
def test_sigkill_around_the_commit_keeps_effects_and_records_in_agreement(
    backend_url: str, fork_server: ForkServer, tmp_path: Path, shape: str, point: str
) -> None:
    app.create_tables(backend_url)
    log = tmp_path / "child.log"

    ended = fork_server.using(ENTRY).call({"url": backend_url, "shape": shape}, log, point)

    assert ended.killed, f"the child did not die at {point}: {ended}\n{log_tail(log)}"
    with Coordinator(
        backend_url, lease_ttl=10.0, trusted_modules=["tests.transactional.app"]
    ) as coord:
        recover_until_settled(coord, timeout=30)
        sagas = coord.list(limit=10)
    rows = app.read_effects(backend_url)
    status = expected(shape, point)
    if status is None:
        assert sagas == [], "a saga was recorded before its first commit"
        assert rows == [], "a step's effect committed before the saga was recorded"
        return
    assert len(sagas) == 1, f"{len(sagas)} sagas for one started"
    (saga,) = sagas
    assert saga.status is status, f"ended {saga.status.value}, expected {status.value}"
    check_agree(saga, rows, STEPS)
