"""A drain (``coord.drain()``) racing a compensation, a retry wait, a rival and an operator.

The saga is ``reserve -> charge``: ``charge``'s first attempt fails with a
transient error (recorded as ``attempt_failed``, then the retry wait), its
second fails for good, so the saga unwinds; ``reserve``'s compensation fails
once the same way (its backoff wait, which a drain cuts short), then succeeds.

For every free boundary j of the owner's run after the saga's creation
(counted by a dry run: :func:`census`), on SQLite and PostgreSQL, the owner
stalls before boundary j and then, in the order the case says:

* ``drain``: the drain is requested, the owner goes on; it must hand the saga
  back (``SagaHandedBack``) if a step boundary is still ahead of it, the start
  of the compensation's retry after its backoff included (the drain cuts the
  wait short), and otherwise finish (``SagaFailed``);
* ``drain-rival-waits``: a rival recoverer starts and stops before its first
  statement, the drain is requested, the owner goes on (it hands the saga back
  at the next step boundary, or finishes), then the rival goes on: it must
  find the saga free at once (the owner's own lease is an hour long);
* ``drain-rival-takes-over``: the drain is requested, but the owner's short
  lease runs out first (its renewals held) and the rival claims and finishes
  the saga; then the owner goes on and must be fenced;
* ``cancel-then-drain`` / ``compensate-then-drain``: the operator's verb runs
  to its end while the owner holds its lease, then the drain, then the owner;
* ``drain-then-cancel`` / ``drain-then-compensate``: the drain, the verb stops
  before its first statement, the owner goes on, the verb goes on.

An owner run by the asyncio driver (``AsyncCoordinator``, its native
PostgreSQL path included) is swept with ``drain`` and ``drain-rival-waits``.

What must hold after every interleaving: no step and no compensation runs in
two places at once; nothing is written or called under a stale epoch (the
events' and the calls' epochs never go down, and a fenced owner changes no
row); an owner that handed the saga back leaves it with no owner and no lease,
its last event ``lease_released``; and after every actor ended one recovery
pass, which claims only what no live lease holds, leaves the saga terminal
(``compensated``, or ``cancelled`` by a cancel), released, with a sound history
and ``reserve`` compensated.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    RetryPolicy,
    Saga,
    SagaFailed,
    SagaHandedBack,
    SagaStatus,
    StepContext,
    StepStatus,
)
from saga._internal.errors import LeaseLostError
from saga._internal.ports import SagaRecord
from tests.faults import races
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.interleave import Actor, Boundary, Interleaving

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

NAME = "drain-race"
ONCE = RetryPolicy(
    max_attempts=3, initial_delay=0.001, max_delay=0.01, jitter=0.0, retry_on=(TimeoutError,)
)
"""Retries a ``TimeoutError`` (the failures made to be retried) at once, nothing else."""
LONG, SHORT = 3600.0, 0.5  # the owner's lease (s): kept, or lost soon with renewals held


@dataclasses.dataclass(frozen=True)
class Call:
    saga_id: str
    what: str  # "reserve", "charge" or "undo reserve"
    epoch: int


CALLS: list[Call] = []
_INSIDE: set[tuple[str, str]] = set()
OVERLAPS: list[str] = []
_LOCK = threading.Lock()


def _enter(ctx: StepContext, what: str) -> int:
    """Record the call; how many calls of it this saga had before."""
    with _LOCK:
        here = (ctx.saga_id, what)
        if here in _INSIDE:
            OVERLAPS.append(f"{what} called at epoch {ctx.epoch} while it was running")
        _INSIDE.add(here)
        before = sum(1 for c in CALLS if c.saga_id == ctx.saga_id and c.what == what)
        CALLS.append(Call(ctx.saga_id, what, ctx.epoch))
        return before


def _leave(ctx: StepContext, what: str) -> None:
    with _LOCK:
        _INSIDE.discard((ctx.saga_id, what))


def _declare() -> Saga:
    saga = Saga(NAME)

    @saga.step(retry=ONCE)
    def reserve(ctx: StepContext) -> str:
        _enter(ctx, "reserve")
        _leave(ctx, "reserve")
        return "held"

    @reserve.compensation(retry=ONCE)
    def release(ctx: StepContext) -> None:
        try:
            if _enter(ctx, "undo reserve") == 0:
                raise TimeoutError("the release timed out; tried again after a backoff")
        finally:
            _leave(ctx, "undo reserve")

    @saga.step(retry=ONCE)
    def charge(ctx: StepContext) -> None:
        try:
            if _enter(ctx, "charge") == 0:
                raise TimeoutError("the bank timed out; tried again after a wait")
            raise RuntimeError("card declined")
        finally:
            _leave(ctx, "charge")

    return saga


DRAINED = _declare()


Drainable = Coordinator | AsyncCoordinator


@dataclasses.dataclass
class Case:
    """One interleaving: the actors, and what the owner's lease is."""

    run: Interleaving
    owner: Actor
    owner_coord: Drainable
    saga_id: str
    lease: float


def _drain(case: Case) -> list[str]:
    case.owner_coord.drain()
    case.owner.run_to_end()
    return []


def _rival(case: Case) -> Actor:
    coord = case.run.coordinator(lease_ttl=LONG)
    return case.run.actor("rival", lambda: coord.recover_saga(case.saga_id), coord)


def _drain_rival_waits(case: Case) -> list[str]:
    rival = _rival(case)
    rival.run_until(0)  # stopped before its first statement
    case.owner_coord.drain()
    case.owner.run_to_end()
    rival.run_to_end()
    problems = races.bad_outcome("the rival", rival.error, races.VERB_OUTCOMES)
    if isinstance(case.owner.error, SagaHandedBack) and rival.error is not None:
        problems.append(f"the rival could not take the handed-back saga: {rival.error!r}")
    return problems


def _drain_rival_takes_over(case: Case) -> list[str]:
    case.owner_coord.drain()
    case.run.wait_lease_expired(case.saga_id)
    epoch = _record(case).epoch
    rival = _rival(case).run_to_end()
    problems = races.bad_outcome("the rival", rival.error, races.VERB_OUTCOMES)
    if _record(case).epoch == epoch:
        return [*problems, "the rival never claimed the expired saga"]
    before = dump(case.run.url, case.saga_id)
    case.owner.run_to_end()
    problems += races.bad_outcome("the fenced owner", case.owner.error, (LeaseLostError,))
    return problems + races.changed(before, dump(case.run.url, case.saga_id), "the fenced owner")


def _verb_then_drain(verb: str) -> Callable[[Case], list[str]]:
    def act(case: Case) -> list[str]:
        op = races.operator(case.run, verb, case.saga_id).run_to_end()
        case.owner_coord.drain()
        case.owner.run_to_end()
        return races.bad_outcome(verb, op.error, races.VERB_OUTCOMES)

    return act


def _drain_then_verb(verb: str) -> Callable[[Case], list[str]]:
    def act(case: Case) -> list[str]:
        op = races.operator(case.run, verb, case.saga_id)
        op.run_until(0)
        case.owner_coord.drain()
        case.owner.run_to_end()
        op.run_to_end()
        return races.bad_outcome(verb, op.error, races.VERB_OUTCOMES)

    return act


ORDERS: dict[str, tuple[float, Callable[[Case], list[str]]]] = {
    "drain": (LONG, _drain),
    "drain-rival-waits": (LONG, _drain_rival_waits),
    "drain-rival-takes-over": (SHORT, _drain_rival_takes_over),
    "cancel-then-drain": (LONG, _verb_then_drain("cancel")),
    "compensate-then-drain": (LONG, _verb_then_drain("compensate")),
    "drain-then-cancel": (LONG, _drain_then_verb("cancel")),
    "drain-then-compensate": (LONG, _drain_then_verb("compensate")),
}
DRIVERS = ["threads", "asyncio"]
ASYNC_ORDERS = ("drain", "drain-rival-waits")
"""What the asyncio driver's owner is swept with (its drain is the same flag)."""
WIDTH = {"sqlite": 7, "postgres": 7}
"""Owner boundaries swept after its creation, per backend; :func:`test_the_owner_fits_the_sweep`
fails unless a dry run finds exactly these."""

_CENSUS: dict[tuple[str, str], list[Boundary]] = {}


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    with _LOCK:
        CALLS.clear()
        _INSIDE.clear()
        OVERLAPS.clear()
    races.reset_calls()


def _owner(run: Interleaving, lease: float, driver: str) -> tuple[Actor, Drainable]:
    """The owner actor, run by the thread driver or (``asyncio``) the asyncio one."""
    if driver == "asyncio":
        aio = run.async_coordinator(lease_ttl=lease)
        go: Callable[[], Any] = lambda: asyncio.run(aio.run(DRAINED, {}, key="drain-1"))  # noqa: E731
        owner = run.actor("owner", go, aio)
        owner.hold_heartbeat()
        return owner, aio
    coord = run.coordinator(lease_ttl=lease)
    owner = run.actor("owner", lambda: coord.run(DRAINED, {}, key="drain-1"), coord)
    owner.hold_heartbeat()
    return owner, coord


def census(backend: str, driver: str, fresh_url: FreshUrl) -> list[Boundary]:
    """The owner's free boundaries after the saga's creation, from a dry run alone."""
    if (backend, driver) not in _CENSUS:
        with Interleaving(fresh_url(), sagas=[DRAINED]) as run:
            owner, _ = _owner(run, LONG, driver)
            owner.run_to_end()
            _CENSUS[backend, driver] = [b for b in owner.boundaries[1:] if b.free]
    return _CENSUS[backend, driver]


@pytest.mark.parametrize("driver", DRIVERS)
def test_the_owner_fits_the_sweep(driver: str, backend: str, fresh_url: FreshUrl) -> None:
    found = census(backend, driver, fresh_url)
    listed = "\n  ".join(map(str, found))
    assert len(found) == WIDTH[backend], f"set WIDTH to {len(found)}:\n  {listed}"


def _cases() -> list[Any]:
    cases: list[Any] = []
    for backend, width in WIDTH.items():
        marks = [pytest.mark.postgres] if backend == "postgres" else []
        cases += [pytest.param(backend, j, marks=marks) for j in range(width)]
    return cases


@pytest.mark.parametrize(("backend", "j"), _cases(), ids=lambda x: x)
@pytest.mark.parametrize("order", [*ORDERS, *(f"asyncio:{o}" for o in ASYNC_ORDERS)])
def test_a_drain_racing_the_owner_hands_back_cleanly(
    order: str, j: int, backend: str, fresh_url: FreshUrl
) -> None:
    driver, _, order = order.rpartition(":")
    boundaries = census(backend, driver or "threads", fresh_url)
    assert j < len(boundaries), f"the owner has {len(boundaries)} free boundaries: fix WIDTH"
    lease, act = ORDERS[order]
    with Interleaving(fresh_url(), sagas=[DRAINED]) as run:
        owner, coord = _owner(run, lease, driver or "threads")
        at = owner.run_until(boundaries[j].index)
        assert at is not None, f"the owner finished before {boundaries[j]}: {owner}"
        assert at.sql == boundaries[j].sql, f"census mismatch: {at} is not {boundaries[j]}"
        created = owner.boundaries[0].change
        assert created is not None
        case = Case(run, owner, coord, created.saga_id, lease)
        problems = act(case)
        header = f"saga {case.saga_id}: owner stalled at {at}; {order}, owner {owner.outcome}"
        due = boundary_still_ahead(boundaries, j)
        problems += _owner_outcome(case, order, due) + _handed_back_free(case)
        problems += _never_stale(case) + _settled(case, order)
    races.verdict(header, problems)


def boundary_still_ahead(boundaries: list[Boundary], j: int) -> bool:
    """Whether the owner, drained while stopped before ``boundaries[j]``, still meets a
    step boundary where it looks at the drain: every boundary up to the start of the
    compensation's first attempt, whose backoff the drain cuts short. The commit that
    starts its second attempt comes after the last look: the owner then finishes."""
    last_look = next(
        i
        for i, b in enumerate(boundaries)
        if b.change is not None
        and any(e.kind == "compensation_attempt_failed" for e in b.change.events)
    )
    return j < last_look


def _owner_outcome(case: Case, order: str, handed_back: bool) -> list[str]:
    if order == "drain-rival-takes-over":
        return []  # judged there: fenced
    expected = SagaHandedBack if handed_back else SagaFailed
    problems = races.bad_outcome("the owner", case.owner.error, (expected,))
    return [f"{p} (expected {expected.__name__})" for p in problems]


def _handed_back_free(case: Case) -> list[str]:
    """A hand-back leaves nothing to wait for: no owner, no lease, ``lease_released``
    written (unless another actor has since claimed it, as it may at once)."""
    if not isinstance(case.owner.error, SagaHandedBack):
        return []
    events = case.run.observer.store.events(case.saga_id)
    released = [e for e in events if e.kind == "lease_released"]
    if not released:
        return ["the owner raised SagaHandedBack, but no lease_released was written"]
    record = _record(case)
    if record.status.is_terminal or record.epoch > (released[-1].epoch or 0):
        return []  # another actor took it (at once) and went on
    problems = []
    if record.owner is not None:
        problems.append(f"handed back, yet still owned by {record.owner}")
    now = case.run.observer.store.now()
    if record.lease_expires_at is not None and record.lease_expires_at > now:
        problems.append(f"handed back with a lease {record.lease_expires_at - now:.0f}s long")
    return problems


def _never_stale(case: Case) -> list[str]:
    problems = list(OVERLAPS)
    events = case.run.observer.store.events(case.saga_id)
    fenced = [e for e in events if e.epoch is not None]  # an unfenced request has none
    for before, after in itertools.pairwise(fenced):
        if (after.epoch or 0) < (before.epoch or 0):
            problems.append(f"{after.kind} at epoch {after.epoch} after {before.kind}")
    calls = [c for c in CALLS if c.saga_id == case.saga_id]
    for before_call, after_call in itertools.pairwise(calls):
        if after_call.epoch < before_call.epoch:
            problems.append(f"{after_call.what} called at stale epoch {after_call.epoch}")
    return problems


def _settled(case: Case, order: str) -> list[str]:
    problems = races.unsettled(case.run, case.saga_id)
    if problems:
        return problems
    record = _record(case)
    allowed = {SagaStatus.COMPENSATED}
    if "cancel" in order:
        allowed.add(SagaStatus.CANCELLED)
    if record.status not in allowed:
        problems.append(f"the saga ended {record.status.value}")
    reserve = record.step("reserve")
    if reserve is not None and reserve.status not in (StepStatus.COMPENSATED, StepStatus.SKIPPED):
        problems.append(f"reserve ended {reserve.status.value}, not compensated")
    return problems


def _record(case: Case) -> SagaRecord:
    record = case.run.observer.store.load(case.saga_id)
    assert record is not None
    return record
