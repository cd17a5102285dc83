"""Recovery under repeated, concurrent and combined crashes, with real processes.

* A step that kills its process on every attempt (by ``os.kill`` in the step
  itself, or ``SAGA_FAULTS=after_action:s2`` in every fresh interpreter):
  each recoverer (``python -m tests.crash.child recover``, or for a
  context-manager saga the application re-entering its block) dies too, until
  the persisted attempt count reaches ``max_attempts``; then the saga
  compensates instead of re-running forever.
* A compensation that kills its process every time: after the compensation
  policy's 5 attempts the saga is ``failed`` (an operator must act), and
  nothing older than that step was compensated.
* Attempts count across in-process retries and crashes together.
* Three recoverer processes released at the same moment on a dozen expired
  sagas: every saga is claimed by exactly one of them (one ``lease_claimed``
  event each) and each step runs, or is compensated, once after the crash.
* A cancel requested while the owner is busy in a step, then the owner is
  SIGKILLed: recovery unwinds and the saga ends ``cancelled``.

SQLite runs every variant; PostgreSQL one of each, and the concurrent
recovery, where its ``SKIP LOCKED`` claims matter most.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests import pgbouncer
from tests.children import (
    CASES,
    Ended,
    ForkServer,
    log_tail,
    recover_until_settled,
    run_child,
    spawn,
    wait_until_claimable,
)
from tests.crash import ledger
from tests.crash.child import LEASE_TTL, Case, Style, recoverer, run_case
from tests.crash.invariants import (
    MAX_STEP_ATTEMPTS,
    MAX_UNDO_ATTEMPTS,
    check_history,
    check_saga,
)

pytestmark = pytest.mark.crash

STEPS = ["s1", "s2", "s3"]
_PG = pytest.mark.postgres


@pytest.mark.parametrize(
    ("backend_url", "style", "how"),
    [
        ("sqlite", "declarative", "self"),
        ("sqlite", "declarative", "fault"),
        ("sqlite", "context", "self"),
        ("sqlite", "context", "fault"),
        pytest.param("postgres", "declarative", "self", marks=_PG),
        pytest.param("postgres", "context", "fault", marks=_PG),
        pytest.param("pgbouncer", "declarative", "self", marks=pgbouncer.MARKS),
        pytest.param("pgbouncer", "context", "fault", marks=pgbouncer.MARKS),
    ],
    indirect=["backend_url"],
)
def test_step_that_kills_every_attempt_is_compensated_after_max_attempts(
    backend_url: str,
    style: Style,
    how: str,
    ledger_path: str,
    fork_server: ForkServer,
    tmp_path: Path,
) -> None:
    case = Case(
        style,
        3,
        kill=2 if how == "self" else None,
        faults="after_action:s2" if how == "fault" else "",
        url=backend_url,
        ledger=ledger_path,
    )
    log = tmp_path / "children.log"
    crashes = 0
    ended = fork_server.run(case, log) if how == "self" else run_child(case, log)
    while ended.killed and crashes <= MAX_STEP_ATTEMPTS:
        crashes += 1
        ended = _next_process(case, how, fork_server, log)

    assert ended.code == 0, f"the last process ended {ended}\n{log_tail(log)}"
    assert crashes == MAX_STEP_ATTEMPTS, f"{crashes} crashes\n{log_tail(log)}"
    with recoverer(backend_url) as coord:
        recover_until_settled(coord, timeout=30)
        (saga,) = coord.list()
        history = coord.history(saga.id)
    book = ledger.read(ledger_path)
    assert saga.status is SagaStatus.COMPENSATED
    assert [c.attempt for c in book.of(saga.id, "s2", "do")] == [1, 2, 3]
    assert saga.step("s2").attempt == MAX_STEP_ATTEMPTS
    assert not book.of(saga.id, "s3")
    check_saga(saga, book, STEPS)
    check_history(saga, history)


def _next_process(case: Case, how: str, fork_server: ForkServer, log: Path) -> Ended:
    """The next process to take the crashed saga on, once its lease expired."""
    with Coordinator(case.url) as coord:
        wait_until_claimable(coord)
    if case.style == "context":  # the application re-enters its block with the same key
        return fork_server.run(case, log) if how == "self" else run_child(case, log)
    argv = ["recover", case.url, "--lease", str(LEASE_TTL)]  # it may die too: a short lease
    if how == "self":
        return fork_server.call(argv, log, case.faults)
    with log.open("a") as output:  # a fresh interpreter, SAGA_FAULTS in its environment
        return Ended.of(spawn(CASES, argv, case.faults, stdout=output, stderr=output).wait(60))


@pytest.mark.parametrize(
    ("backend_url", "style"),
    [
        ("sqlite", "declarative"),
        ("sqlite", "context"),
        pytest.param("postgres", "declarative", marks=_PG),
    ],
    indirect=["backend_url"],
)
def test_compensation_that_kills_every_attempt_leaves_saga_failed_after_max_attempts(
    backend_url: str, style: Style, ledger_path: str, fork_server: ForkServer, tmp_path: Path
) -> None:
    case = Case(style, 3, fail=3, kill_undo=2, url=backend_url, ledger=ledger_path)
    log = tmp_path / "children.log"
    crashes = 0
    ended = fork_server.run(case, log)
    while ended.killed and crashes <= MAX_UNDO_ATTEMPTS:
        crashes += 1
        ended = _recover_in_fork(case, fork_server, log)  # compensating: recover() goes on

    assert ended.code == 0, f"the last process ended {ended}\n{log_tail(log)}"
    assert crashes == MAX_UNDO_ATTEMPTS, f"{crashes} crashes\n{log_tail(log)}"
    with Coordinator(backend_url) as coord:
        (saga,) = coord.list()
        history = coord.history(saga.id)
    book = ledger.read(ledger_path)
    assert saga.status is SagaStatus.FAILED, "a compensation failing for good needs an operator"
    assert [c.attempt for c in book.of(saga.id, "s2", "undo")] == [1, 2, 3, 4, 5]
    assert len(book.of(saga.id, "s3", "undo")) == 1
    assert not book.of(saga.id, "s1", "undo"), "unwinding went past the failed compensation"
    check_saga(saga, book, STEPS)
    check_history(saga, history)


def _recover_in_fork(case: Case, fork_server: ForkServer, log: Path) -> Ended:
    with Coordinator(case.url) as coord:
        wait_until_claimable(coord)
    return fork_server.call(["recover", case.url, "--lease", str(LEASE_TTL)], log)


@pytest.mark.parametrize(
    "backend_url", ["sqlite", pytest.param("postgres", marks=_PG)], indirect=True
)
def test_three_concurrent_recoverers_resume_each_saga_exactly_once(
    backend_url: str, ledger_path: str, fork_server: ForkServer, tmp_path: Path
) -> None:
    log = tmp_path / "children.log"
    declarative: Style = "declarative"
    context: Style = "context"
    crashes = (
        [(declarative, "after_start_commit:s2")] * 4
        + [(declarative, "after_action:s2")] * 4
        + [(context, "after_success_commit:s2")] * 4
    )
    for number, (style, spec) in enumerate(crashes):
        case = Case(style, 3, faults=spec, url=backend_url, ledger=ledger_path, key=f"k{number}")
        assert fork_server.run(case, log).killed, log_tail(log)
    with Coordinator(backend_url) as coord:
        wait_until_claimable(coord)
        assert len(coord.list(stuck=True)) == len(crashes)

    go = tmp_path / "go"
    with log.open("a") as errors:
        recoverers = [
            spawn(
                CASES,
                ["recover", backend_url, "--go", str(go)],
                stdout=subprocess.PIPE,
                stderr=errors,
            )
            for _ in range(3)
        ]
        for process in recoverers:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready", log_tail(log)
        go.touch()  # all three start recovering at once
        outputs = [json.loads(process.communicate(timeout=120)[0]) for process in recoverers]
    assert [p.returncode for p in recoverers] == [0, 0, 0], log_tail(log)

    owners = {output["owner"] for output in outputs}
    claimed = Counter(o[0] for output in outputs for o in output["outcomes"])
    book = ledger.read(ledger_path)
    with Coordinator(backend_url) as coord:
        sagas = coord.list()
        assert len(sagas) == len(crashes)
        for saga in sagas:
            claims = [e for e in coord.history(saga.id) if e.kind == "lease_claimed"]
            assert len(claims) == 1, f"saga {saga.id} claimed {len(claims)} times"
            assert claims[0].detail is not None
            assert claims[0].detail["owner"] in owners
            assert claimed[saga.id] == 1, f"saga {saga.id} handled {claimed[saga.id]} times"
            _check_ran_once_after_crash(saga.id, saga.kind, saga.status, book)
            check_saga(saga, book, STEPS)
            check_history(saga, coord.history(saga.id))


def _check_ran_once_after_crash(
    saga_id: str, kind: str, status: SagaStatus, book: ledger.Ledger
) -> None:
    after = Counter((c.step, c.kind) for c in book.of(saga_id) if c.epoch > 1)
    if kind == "declarative":  # resumed forward from the crashed step s2
        assert status is SagaStatus.COMPLETED
        assert after == {("s2", "do"): 1, ("s3", "do"): 1}, f"saga {saga_id}: {after}"
    else:  # recovery compensates a context-manager saga
        assert status is SagaStatus.COMPENSATED
        assert after == {("s2", "undo"): 1, ("s1", "undo"): 1}, f"saga {saga_id}: {after}"


@pytest.mark.parametrize(
    ("backend_url", "style"),
    [
        ("sqlite", "declarative"),
        ("sqlite", "context"),
        pytest.param("postgres", "declarative", marks=_PG),
    ],
    indirect=["backend_url"],
)
def test_attempts_count_across_in_process_retries_and_crashes(
    backend_url: str, style: Style, ledger_path: str, fork_server: ForkServer, tmp_path: Path
) -> None:
    # s2's attempt 1 raises ConnectionError (retried in-process), attempt 2 acts and dies.
    case = Case(style, 3, flaky=2, faults="after_action:s2", url=backend_url, ledger=ledger_path)
    log = tmp_path / "children.log"
    assert fork_server.run(case, log).killed, log_tail(log)

    with recoverer(backend_url) as coord:
        if style == "context":  # only its own code continues a context-manager saga
            wait_until_claimable(coord)
            assert run_case(coord, case) is SagaStatus.COMPLETED
        recover_until_settled(coord, timeout=30)
        (saga,) = coord.list()
        history = coord.history(saga.id)
    book = ledger.read(ledger_path)
    assert saga.status is SagaStatus.COMPLETED
    assert [c.attempt for c in book.of(saga.id, "s2", "do")] == [1, 2, 3]
    assert saga.step("s2").attempt == MAX_STEP_ATTEMPTS
    assert [e.attempt for e in history if e.kind == "attempt_failed"] == [1]
    check_saga(saga, book, STEPS)
    check_history(saga, history)


@pytest.mark.parametrize(
    ("backend_url", "style"),
    [
        ("sqlite", "declarative"),
        ("sqlite", "context"),
        pytest.param("postgres", "context", marks=_PG),
    ],
    indirect=["backend_url"],
)
def test_cancel_requested_then_owner_killed_ends_cancelled(
    backend_url: str, style: Style, ledger_path: str, tmp_path: Path
) -> None:
    case = Case(style, 3, hang=2, url=backend_url, ledger=ledger_path)  # s2 hangs: a live owner
    log = tmp_path / "children.log"
    with log.open("a") as output:
        owner = spawn(CASES, ["run", case.to_json()], stdout=output, stderr=output)
    try:
        _wait_for_call(ledger_path, "s2", owner)
        with Coordinator(backend_url) as coord:
            (running,) = coord.list()
            assert coord.cancel(running.id).cancel_requested  # its owner is busy in s2
    finally:
        owner.kill()  # SIGKILL before it reaches a step boundary
        owner.wait(30)
    assert Ended.of(owner.returncode).killed

    with recoverer(backend_url) as coord:
        recover_until_settled(coord, timeout=30)
        (saga,) = coord.list()
        history = coord.history(saga.id)
    book = ledger.read(ledger_path)
    assert saga.status is SagaStatus.CANCELLED
    assert [s.name for s in saga.steps] == ["s1", "s2"]
    check_saga(saga, book, STEPS)
    check_history(saga, history)


def _wait_for_call(path: str, step: str, process: subprocess.Popen[str]) -> None:
    """Poll the ledger until ``step`` was called (bounded; fails if the process ended)."""
    deadline = time.monotonic() + 30
    while not any(c.step == step for c in ledger.read(path).calls):
        assert process.poll() is None, f"the process ended first ({process.returncode})"
        assert time.monotonic() < deadline, f"{step} was never called"
        time.sleep(0.01)
