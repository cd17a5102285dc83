"""What the race sweeps share: the saga, the operator verbs as actors, the legality checks.

The saga is ``reserve -> charge -> ship (pivot) -> notify``. Every action and
compensation call is written to :data:`CALLS` (one process: a list will do),
with the epoch it ran under. ``notify`` fails for good when the input says
``{"fail": "notify"}``: the saga then ends ``failed`` past its pivot, its
lease released.

The rules every interleaving must keep:

* once the pivot may have acted (its action was called, or it is recorded as
  started and not as skipped), no step before it is ever compensated (no
  ``compensation_started`` / ``compensation_done`` event, no compensation
  call) and the saga never ends ``compensated`` or ``cancelled``;
* a verb that was refused changed nothing (the sweeps compare row dumps);
* each actor stops in an allowed way (a verb: returned, refused with
  ``OperationRefusedError`` / ``SagaBusyError``, or ``SagaFailed``; an owner:
  returned, ``SagaFailed``, ``LeaseLostError``, or killed by the test);
* once every actor returned and one recovery pass ran, the saga is terminal,
  holds no lease, and its history agrees with it (tests/crash/invariants.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    OperationRefusedError,
    RetryPolicy,
    Saga,
    SagaBusyError,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
)
from saga._internal.errors import LeaseLostError
from saga._internal.ports import EventRecord
from saga.admin import actions
from tests.crash.invariants import check_history
from tests.faults.dump import Dump
from tests.interleave import Actor, ActorKilled, Boundary, Interleaving

PIVOT = "ship"
BEFORE_PIVOT = ("reserve", "charge")
NAME = "interleave-order"
FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.01, jitter=0.0)


@dataclasses.dataclass(frozen=True)
class Call:
    saga_id: str
    step: str
    kind: str  # "do" or "undo"
    epoch: int


CALLS: list[Call] = []
_CALLS_LOCK = threading.Lock()


def _record(ctx: StepContext, kind: str) -> None:
    with _CALLS_LOCK:
        CALLS.append(Call(ctx.saga_id, ctx.step, kind, ctx.epoch))


def _act(ctx: StepContext) -> dict[str, str]:
    _record(ctx, "do")
    if (ctx.data or {}).get("fail") == ctx.step:
        raise RuntimeError(f"{ctx.step} failed for good")
    return {"done": ctx.step}


def _undo(ctx: StepContext) -> None:
    _record(ctx, "undo")


def _declare() -> Saga:
    saga = Saga(NAME)
    for name in BEFORE_PIVOT:
        saga.step(name=name, retry=FAST)(_act).compensation()(_undo)
    saga.step(name=PIVOT, pivot=True, retry=FAST)(_act)
    saga.step(name="notify", retry=FAST)(_act)
    return saga


ORDER = _declare()


def starts_pivot(b: Boundary) -> bool:
    """The commit that records the pivot as started (its action runs right after)."""
    return b.writes_step(PIVOT, "running")


def records_pivot(b: Boundary) -> bool:
    """The commit that records the pivot's success (its action already ran)."""
    return b.writes_step(PIVOT, "succeeded")


def is_final(b: Boundary) -> bool:
    """The commit that makes the saga completed (the pivot's success is durable)."""
    return b.change is not None and b.change.status is SagaStatus.COMPLETED


# -- the operator verbs, as actor functions ------------------------------------------------

Verb = Callable[[Any, str], Callable[[], Any]]


def _sync(method: str) -> Verb:
    return lambda coord, saga_id: lambda: getattr(coord, method)(saga_id)


def _async(method: str) -> Verb:
    return lambda coord, saga_id: lambda: asyncio.run(getattr(coord, method)(saga_id))


VERBS: dict[str, Verb] = {
    "compensate": _sync("compensate"),
    "cancel": _sync("cancel"),
    "resume": _sync("resume"),
    "retry": _sync("retry"),
    "retry-compensation": lambda c, s: lambda: actions.retry_compensation(c, s),
    "recover-saga": _sync("recover_saga"),
    "recover": lambda c, s: lambda: c.recover(),
    "async-compensate": _async("compensate"),
    "async-cancel": _async("cancel"),
    "async-resume": _async("resume"),
    "async-retry": _async("retry"),
}


def operator(run: Interleaving, verb: str, saga_id: str) -> Actor:
    """The verb as an actor, with a coordinator of its own (async for ``async-*``)."""
    coord: Coordinator | AsyncCoordinator = (
        run.async_coordinator() if verb.startswith("async-") else run.coordinator()
    )
    return run.actor(verb, VERBS[verb](coord, saga_id), coord)


VERB_OUTCOMES = (None, OperationRefusedError, SagaBusyError, SagaFailed)
OWNER_OUTCOMES = (None, SagaFailed, LeaseLostError, ActorKilled)


def refused(error: BaseException | None) -> bool:
    return isinstance(error, OperationRefusedError | SagaBusyError)


# -- the checks: each returns what it found wrong, so one failure message says it all --


def bad_outcome(name: str, error: BaseException | None, allowed: tuple[Any, ...]) -> list[str]:
    if error is None:
        return [] if None in allowed else [f"{name} returned, which it may not"]
    kinds = tuple(kind for kind in allowed if kind is not None)
    return [] if isinstance(error, kinds) else [f"{name} raised {type(error).__name__}: {error}"]


def pivot_may_have_acted(run: Interleaving, saga_id: str, events: list[EventRecord]) -> bool:
    """Its action was called, or it is recorded as started and never as skipped (a step
    is skipped only when the saga stopped before calling it)."""
    if any(c.saga_id == saga_id and c.step == PIVOT for c in CALLS):
        return True
    started = any(e.kind == "step_started" and e.step == PIVOT for e in events)
    record = run.observer.store.load(saga_id)
    pivot = record.step(PIVOT) if record is not None else None
    return started and (pivot is None or pivot.status is not StepStatus.SKIPPED)


def pivot_unwound(run: Interleaving, saga_id: str) -> list[str]:
    """Steps before a pivot that may have acted were compensated, or the saga unwound."""
    events = run.observer.store.events(saga_id)
    if not pivot_may_have_acted(run, saga_id, events):
        return []
    problems = [
        f"{e.kind} of {e.step} (epoch {e.epoch}), though the pivot may have acted"
        for e in events
        if e.kind in ("compensation_started", "compensation_done") and e.step in BEFORE_PIVOT
    ]
    undos = [f"{c.step}@{c.epoch}" for c in CALLS if c.saga_id == saga_id and c.kind == "undo"]
    if undos:
        problems.append(f"compensations called, though the pivot may have acted: {undos}")
    status = run.observer.get(saga_id).status
    if status in (SagaStatus.COMPENSATED, SagaStatus.CANCELLED):
        problems.append(f"the pivot may have acted, yet the saga ended {status.value}")
    return problems


def unsettled(run: Interleaving, saga_id: str) -> list[str]:
    """After every actor returned and a recovery pass: terminal, released, history sound."""
    run.observer.recover()
    record = run.observer.store.load(saga_id)
    assert record is not None
    where = f"saga ends {record.status.value} at epoch {record.epoch}"
    if not record.status.is_terminal:
        return [f"{where}: left unfinished, held by {record.owner}"]
    if record.owner is not None:
        return [f"{where}: finished, yet still held by {record.owner}"]
    try:
        check_history(run.observer.get(saga_id), run.observer.store.events(saga_id))
    except AssertionError as error:
        return [f"{where}: {error}"]
    return []


def changed(before: Dump, after: Dump, what: str) -> list[str]:
    if before == after:
        return []
    diffs = [table for table in before if before[table] != after[table]]
    return [f"{what} changed {', '.join(diffs)}"]


def verdict(header: str, problems: list[str]) -> None:
    """Fail with every problem found, under a header saying what interleaving it was."""
    assert not problems, header + "\n  " + "\n  ".join(problems)


def reset_calls() -> None:
    with _CALLS_LOCK:
        CALLS.clear()


def owner_of(run: Interleaving, data: Any, lease_ttl: float) -> Actor:
    """The owner actor: runs :data:`ORDER` with its own coordinator; renewals held."""
    coord = run.coordinator(lease_ttl=lease_ttl)
    owner = run.actor("owner", lambda: coord.run(ORDER, data, key="order-1"), coord)
    owner.hold_heartbeat()
    return owner


def sweep_cases(width: dict[str, dict[str, int]]) -> list[Any]:
    """(backend, name, k) for every boundary k of every swept actor, on each backend
    (PostgreSQL's marked, as the ``backend`` fixture marks them)."""
    cases = []
    for backend, counts in width.items():
        marks = [pytest.mark.postgres] if backend == "postgres" else []
        for name, count in counts.items():
            cases += [pytest.param(backend, name, k, marks=marks) for k in range(count)]
    return cases
