"""SIGKILL the async driver, and parallel steps in flight; recover in another process.

The harness is tests/children.py's: the fork server (calling
``tests.aio.crash_child``, which runs tests/crash's cases with other drivers) forks
one real process per case; a fault point (``SAGA_FAULTS``) SIGKILLs it; the
test process then recovers, and the effect ledger and the store are checked.

* The async driver: a sample of tests/crash's fault matrix (every fault
  point, for declarative and context-manager sagas, the shapes and the
  recovery rotating), run and recovered by ``AsyncCoordinator``.
* Parallel steps: a fan-out (``s1``; ``s2``, ``s3``, ``s4`` at once; ``s5``)
  killed with several steps in flight (one of them hanging), in the commit
  that starts them together, or after a branch failed while unwinding;
  run by each driver, recovered by the other.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus, SagaView
from tests.aio import crash_child
from tests.aio.facade import AsyncFacade
from tests.children import ForkServer, log_tail, recover_until_settled, wait_until_claimable
from tests.crash import ledger
from tests.crash.child import MODULE, RECOVERY_LEASE_TTL, Case, run_case
from tests.crash.invariants import _check_step_calls, check_history, check_saga
from tests.crash.matrix import (
    Scenario,
    core_shapes,
    expected_status,
    scenarios,
    variant_shapes,
)

pytestmark = pytest.mark.crash


ENTRY = "tests.aio.crash_child:main"
"""The child that runs tests/crash's cases with the driver their key names."""


def recoverer(url: str, driver: str) -> Coordinator:
    """A recovering "process" that may compensate tests/crash's context-manager sagas."""
    options = {"lease_ttl": RECOVERY_LEASE_TTL, "trusted_modules": [MODULE]}
    if driver == "async":
        return AsyncFacade(url, **options)  # type: ignore[return-value]
    return Coordinator(url, **options)  # type: ignore[arg-type]


def _killed(fork_server: ForkServer, case: Case, log: Path) -> None:
    ended = fork_server.using(ENTRY).run(case, log)
    assert ended.killed, f"the child did not die at {case.faults}: {ended}\n{log_tail(log)}"


# -- the async driver: a sample of the fault matrix --------------------------------------------


def sample(scenarios: list[Scenario]) -> list[Scenario]:
    """Two scenarios per fault point, one for each style; the recovery (recover or
    re-enter), the shape and the step the point names rotate."""

    def group(s: Scenario) -> tuple[str, str]:
        return (s.point, s.case.style)

    chosen: list[Scenario] = []
    ordered = sorted(scenarios, key=lambda s: (group(s), s.id))
    for index, (_, members) in enumerate(itertools.groupby(ordered, key=group)):
        candidates = list(members)
        chosen.append(candidates[index * 7 % len(candidates)])
    return chosen


def _async_params() -> list[object]:
    """Every fault point for each style on SQLite; a third of those on PostgreSQL."""
    chosen = sample(scenarios(core_shapes()) + scenarios(variant_shapes()))
    sqlite = [pytest.param("sqlite", s, id=f"sqlite-{s.id}") for s in chosen]
    postgres = [
        pytest.param("postgres", s, id=f"postgres-{s.id}", marks=pytest.mark.postgres)
        for s in chosen[1::3]
    ]
    return sqlite + postgres


@pytest.mark.parametrize(("backend_url", "scenario"), _async_params(), indirect=["backend_url"])
def test_async_driver_killed_anywhere_is_recovered_by_the_async_recoverer(
    backend_url: str,
    scenario: Scenario,
    ledger_path: str,
    fork_server: ForkServer,
    tmp_path: Path,
) -> None:
    case = dataclasses.replace(scenario.case, url=backend_url, ledger=ledger_path, key="async")
    _killed(fork_server, case, tmp_path / "child.log")
    with recoverer(backend_url, "async") as coord:
        if scenario.recovery == "reenter":
            wait_until_claimable(coord)
            rerun = run_case(coord, case)  # the application re-enters its block, async with
            assert rerun is not None, "re-running it recorded nothing"
            assert rerun.is_terminal, f"re-running it returned while still {rerun.value}"
        recover_until_settled(coord, timeout=30)
        sagas = coord.list(limit=10)
        histories = {saga.id: coord.history(saga.id) for saga in sagas}
    book = ledger.read(ledger_path)
    expected = expected_status(scenario)
    if expected is None:
        assert sagas == [], "a saga was recorded before its first commit"
        assert book.calls == (), "a step ran before the saga was recorded"
        return
    (saga,) = sagas
    assert saga.status is expected, f"ended {saga.status.value}, expected {expected.value}"
    steps = [f"s{n}" for n in range(1, case.steps + 1)]
    check_saga(saga, book, steps, lambda name: case.kind_of(int(name[1:])))
    check_history(saga, histories[saga.id])


# -- parallel steps in flight -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fan:
    """A fan-out case: where its process dies, and how the saga must end."""

    name: str
    faults: str
    expected: SagaStatus
    hang: int | None = None
    fail: int | None = None
    on_crash: str = "resume"


FANS = [
    # s2 hangs in flight, s3 acted but is unrecorded, s4 in flight or done.
    Fan("in-flight-resume", "after_action:s3", SagaStatus.COMPLETED, hang=2),
    Fan(
        "in-flight-compensate",
        "after_action:s3",
        SagaStatus.COMPENSATED,
        hang=2,
        on_crash="compensate",
    ),
    # The commit that starts s2, s3 and s4 together: all may have started, none ran.
    Fan("started-together", "after_start_commit:s2", SagaStatus.COMPLETED),
    Fan(
        "started-together-compensate",
        "after_start_commit:s2",
        SagaStatus.COMPENSATED,
        on_crash="compensate",
    ),
    # s4 failed (after acting); the others were waited for; dead before unwinding.
    Fan("failed-branch", "before_unwind", SagaStatus.COMPENSATED, fail=4),
    # Dead halfway through unwinding: s1 is always undone last.
    Fan("unwinding", "before_undo:s1", SagaStatus.COMPENSATED, fail=4),
]


def _fan_params() -> list[object]:
    """Each case run by each driver on SQLite; on PostgreSQL, the drivers alternate."""
    params = []
    drivers = [("sync", "async"), ("async", "sync")]
    for index, (fan, (driver, recovered_by)) in enumerate(itertools.product(FANS, drivers)):
        name = f"{fan.name}-{driver}-then-{recovered_by}"
        params.append(pytest.param("sqlite", fan, driver, recovered_by, id=f"sqlite-{name}"))
        if index % 2 == FANS.index(fan) % 2:
            params.append(
                pytest.param(
                    "postgres",
                    fan,
                    driver,
                    recovered_by,
                    id=f"postgres-{name}",
                    marks=pytest.mark.postgres,
                )
            )
    return params


@pytest.mark.parametrize(
    ("backend_url", "fan", "driver", "recovered_by"), _fan_params(), indirect=["backend_url"]
)
def test_steps_in_flight_when_the_process_dies_are_recovered(
    backend_url: str,
    fan: Fan,
    driver: str,
    recovered_by: str,
    ledger_path: str,
    fork_server: ForkServer,
    tmp_path: Path,
) -> None:
    case = Case(
        "declarative",
        5,
        fail=fan.fail,
        hang=fan.hang,
        on_crash=fan.on_crash,  # type: ignore[arg-type]
        faults=fan.faults,
        url=backend_url,
        ledger=ledger_path,
        key="fan" if driver == "sync" else "fan-async",
    )
    _killed(fork_server, case, tmp_path / "child.log")
    with recoverer(backend_url, recovered_by) as coord:
        recover_until_settled(coord, timeout=30)
        (saga,) = coord.list(limit=10)
        history = coord.history(saga.id)
    book = ledger.read(ledger_path)
    assert saga.name == crash_child.fan_name(fan.on_crash)  # type: ignore[arg-type]
    assert saga.status is fan.expected, f"ended {saga.status.value}, expected {fan.expected}"
    check_fan(saga, book)
    check_history(saga, history)
    if fan.hang is not None:  # s2 was in flight (hanging): re-run going forward, else undone
        rerun = 2 if fan.expected is SagaStatus.COMPLETED else 1
        assert saga.step("s2").attempt == rerun


def check_fan(saga: SagaView, book: ledger.Ledger) -> None:
    """The invariants of tests/crash, with a parallel saga's order of undoing:
    a step is undone before every step it ran after."""
    where = f"saga {saga.id} ({saga.status.value})"
    applied = {step for saga_id, step in book.applied if saga_id == saga.id}
    if saga.status is SagaStatus.COMPLETED:
        assert applied == set(crash_child.FAN_STEPS), f"{where}: applied {sorted(applied)}"
        assert all(s.status.value == "succeeded" for s in saga.steps), where
        assert not book.of(saga.id, kind="undo"), f"{where}: something was undone"
    else:
        assert not applied, f"{where}: effects left applied: {sorted(applied)}"
        assert all(s.status.value == "compensated" for s in saga.steps), where
    for step in saga.steps:
        _check_step_calls(book.of(saga.id, step.name), step.attempt, f"{where} {step.name}")
    undone = [c.step for c in book.of(saga.id, kind="undo")]
    for step, after in crash_child.FAN_STEPS.items():
        for dependency in after:
            if step in undone and dependency in undone:
                assert undone.index(step) < undone.index(dependency), f"{where}: undo {undone}"
    epochs = [c.epoch for c in book.of(saga.id)]
    assert epochs == sorted(epochs), f"{where}: a call ran under an older epoch: {epochs}"
