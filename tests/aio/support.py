"""Helpers for the async and parallel tests: waiting on what the store says, and
reading the order of things out of a saga's history."""

from __future__ import annotations

import time
from collections.abc import Callable

from saga import SagaStatus, StepStatus
from saga._internal.ports import EventRecord, SagaStore

WAIT_LIMIT = 20.0
"""How long a test waits for a condition before it fails (never reached when all is well)."""


def wait_until(condition: Callable[[], bool], what: str, limit: float = WAIT_LIMIT) -> None:
    """Block until ``condition()`` holds; fail naming ``what`` after ``limit`` seconds."""
    give_up = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < give_up, f"gave up waiting until {what}"
        time.sleep(0.005)


def step_status(store: SagaStore, saga_id: str, step: str) -> StepStatus | None:
    """The step's status as stored now (``None`` before it is recorded)."""
    record = store.load(saga_id)
    found = None if record is None else record.step(step)
    return None if found is None else found.status


def wait_for_step(store: SagaStore, saga_id: str, step: str, *statuses: StepStatus) -> None:
    """Block until the store records ``step`` in one of ``statuses``."""
    wanted = ", ".join(s.value for s in statuses)
    wait_until(
        lambda: step_status(store, saga_id, step) in statuses,
        f"step {step!r} of saga {saga_id} is {wanted}",
    )


def wait_for_cancel_request(store: SagaStore, saga_id: str) -> None:
    def requested() -> bool:
        record = store.load(saga_id)
        return record is not None and record.cancel_requested

    wait_until(requested, f"a cancel of saga {saga_id} is recorded")


def wait_past_deadline(store: SagaStore, saga_id: str) -> None:
    """Block until the database clock is past the saga's deadline."""
    record = store.load(saga_id)
    assert record is not None
    assert record.deadline is not None
    deadline = record.deadline
    wait_until(lambda: store.now() > deadline, f"the deadline of saga {saga_id} passed")


def order_of(history: list[EventRecord], kind: str) -> list[str]:
    """The steps named by ``kind`` events, in the order the history recorded them."""
    return [e.step for e in history if e.kind == kind and e.step is not None]


def most_in_flight(history: list[EventRecord]) -> int:
    """The largest number of steps recorded started and not yet ended, at any point."""
    in_flight: set[str] = set()
    most = 0
    for event in history:
        if event.step is None:
            continue
        if event.kind == "step_started":
            in_flight.add(event.step)
            most = max(most, len(in_flight))
        elif event.kind in ("step_succeeded", "step_failed", "step_in_doubt", "step_skipped"):
            in_flight.discard(event.step)
    return most


def unwound(status: SagaStatus) -> bool:
    return status in (SagaStatus.COMPENSATED, SagaStatus.CANCELLED)
