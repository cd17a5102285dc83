"""Random crashes: SIGKILL at a random moment, and a second crash during recovery.

* The fork server kills the process running a random saga shape after a
  random delay, wherever it is: inside a commit, between two statements, in
  a step, in the heartbeat. Every step and compensation pauses 5 ms so that
  the delays spread over the whole run; the process may also die before
  anything was recorded, or finish first. The expected final status is the
  set that a kill anywhere allows.
* Double crashes: the saga's process dies at one fault point, then the
  recoverer's process dies at another (drawn from the same shape's points;
  when recovery does not reach it, the recoverer finishes), and a third
  process finishes the job.

Everything is drawn from a fixed seed, so a failure reproduces from its id.
Recovery and the invariants are as in the fault matrix.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from saga import SagaStatus
from tests.children import ForkServer, log_tail, recover_until_settled, wait_until_claimable
from tests.crash import ledger
from tests.crash.child import LEASE_TTL, SIZES, Case, recoverer
from tests.crash.invariants import check_history, check_saga
from tests.crash.matrix import Scenario, expected_status, fault_specs

pytestmark = pytest.mark.crash

SEED = 20261130
PAUSE = 0.005


def random_case(rng: random.Random) -> tuple[Case, float]:
    """A saga shape and a kill delay (seconds) drawn from ``rng``."""
    style = rng.choice(["declarative", "context"])
    steps = rng.choice(SIZES)
    pivot = style == "declarative" and rng.random() < 0.3
    case = Case(
        "declarative" if style == "declarative" else "context",
        steps,
        pivot=pivot,
        on_crash="compensate" if style == "declarative" and rng.random() < 0.3 else "resume",
        pause=PAUSE,
    )
    if rng.random() < 0.5:
        case = dataclasses.replace(case, fail=case.pivot_step or steps)
    span = 0.04 * (steps + 1) * (1 if case.fail is None else 2)  # about the whole run
    return case, round(rng.uniform(0.0, span), 4)


def _params() -> Sequence[object]:
    rng = random.Random(SEED)
    params = []
    for backend, count in (("sqlite", 16), ("postgres", 8)):
        marks = [pytest.mark.postgres] if backend == "postgres" else []
        for number in range(count):
            case, delay = random_case(rng)
            name = f"{backend}-{number}-{case.style}-n{case.steps}-fail{case.fail}-{delay}s"
            params.append(pytest.param(backend, case, delay, id=name, marks=marks))
    return params


def allowed(case: Case) -> set[SagaStatus]:
    if case.fail is not None:
        return {SagaStatus.COMPENSATED}
    if case.style == "declarative" and case.on_crash == "resume":
        return {SagaStatus.COMPLETED}
    return {SagaStatus.COMPLETED, SagaStatus.COMPENSATED}


@pytest.mark.parametrize(("backend_url", "shape", "delay"), _params(), indirect=["backend_url"])
def test_kill_at_random_moment_then_recovery_keeps_invariants(
    backend_url: str,
    shape: Case,
    delay: float,
    ledger_path: str,
    fork_server: ForkServer,
    tmp_path: Path,
) -> None:
    case = dataclasses.replace(shape, url=backend_url, ledger=ledger_path)
    with recoverer(backend_url) as coord:  # so that the delay falls in the saga, not in DDL
        coord.create_schema()

    fork_server.run(case, tmp_path / "child.log", kill_after=delay)

    with recoverer(backend_url) as coord:
        recover_until_settled(coord, timeout=30)
        sagas = coord.list()
        histories = {saga.id: coord.history(saga.id) for saga in sagas}
    book = ledger.read(ledger_path)
    if not sagas:  # killed before its first commit
        assert book.calls == ()
        return
    (saga,) = sagas
    assert book.saga_ids() <= {saga.id}
    assert saga.status in allowed(case), saga.status
    steps = [f"s{n}" for n in range(1, case.steps + 1)]
    check_saga(saga, book, steps, lambda name: case.kind_of(int(name[1:])))
    check_history(saga, histories[saga.id])


DOUBLE_SHAPES = (
    Case("declarative", 3),
    Case("declarative", 3, fail=3),
    Case("declarative", 5, pivot=True, fail=3),
    Case("declarative", 5, pivot=True, on_crash="compensate"),
    Case("context", 3),
    Case("context", 5, fail=5),
)


def _double_params() -> Sequence[object]:
    rng = random.Random(SEED + 1)
    params = []
    for backend, count in (("sqlite", 12), ("postgres", 4)):
        marks = [pytest.mark.postgres] if backend == "postgres" else []
        for number in range(count):
            shape = DOUBLE_SHAPES[number % len(DOUBLE_SHAPES)]
            specs = fault_specs(shape)
            first = rng.choice(specs[:-1])  # after_final_commit leaves nothing to recover
            second = rng.choice(specs)
            crash = Scenario(dataclasses.replace(shape, faults=first))
            name = f"{backend}-{crash.id}-then-{second}"
            params.append(pytest.param(backend, shape, first, second, id=name, marks=marks))
    return params


@pytest.mark.parametrize(
    ("backend_url", "shape", "first", "second"), _double_params(), indirect=["backend_url"]
)
def test_crash_during_recovery_then_recovery_keeps_invariants(
    backend_url: str,
    shape: Case,
    first: str,
    second: str,
    ledger_path: str,
    fork_server: ForkServer,
    tmp_path: Path,
) -> None:
    case = dataclasses.replace(shape, url=backend_url, ledger=ledger_path, faults=first)
    log = tmp_path / "children.log"
    assert fork_server.run(case, log).killed, log_tail(log)
    with recoverer(backend_url) as coord:
        wait_until_claimable(coord)
    argv = ["recover", backend_url, "--lease", str(LEASE_TTL)]

    fork_server.call(argv, log, second)  # dies at ``second`` if recovery gets there

    with recoverer(backend_url) as coord:
        recover_until_settled(coord, timeout=30)
        (saga,) = coord.list()
        history = coord.history(saga.id)
    book = ledger.read(ledger_path)
    assert book.saga_ids() <= {saga.id}
    assert saga.status is expected_status(Scenario(case)), log_tail(log)
    steps = [f"s{n}" for n in range(1, case.steps + 1)]
    check_saga(saga, book, steps, lambda name: case.kind_of(int(name[1:])))
    check_history(saga, history)
