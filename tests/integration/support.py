"""Helpers for the integration tests: fast policies, lease games and event replay."""

from __future__ import annotations

import time
from collections.abc import Iterable

from saga.adapters.sql import tables
from saga.adapters.sql.store import SqlSagaStore
from sqlalchemy import update

from saga import Coordinator, RetryPolicy, SagaStatus, StepStatus
from saga._internal.ports import EventRecord


def fast(max_attempts: int | None = 3, **kwargs: object) -> RetryPolicy:
    """A retry policy with tiny delays, so retries cost no test time."""
    options: dict[str, object] = {"initial_delay": 0.001, "max_delay": 0.005, "jitter": 0.0}
    options.update(kwargs)
    return RetryPolicy(max_attempts=max_attempts, **options)  # type: ignore[arg-type]


def sql_store(coord: Coordinator) -> SqlSagaStore:
    store = coord.store
    assert isinstance(store, SqlSagaStore)
    return store


def expire_lease(coord: Coordinator, saga_id: str) -> None:
    """Make the saga's lease look expired, as if its process had paused past it."""
    with sql_store(coord).engine.begin() as connection:
        connection.execute(
            update(tables.instances)
            .where(tables.instances.c.id == saga_id)
            .values(lease_expires_at=0.0)
        )


def set_compensation_ref(coord: Coordinator, saga_id: str, step: str, ref: str) -> None:
    """Forge a stored compensation reference, as an attacker with database access could."""
    with sql_store(coord).engine.begin() as connection:
        connection.execute(
            update(tables.steps)
            .where(tables.steps.c.saga_id == saga_id, tables.steps.c.name == step)
            .values(compensation_ref=ref)
        )


def wait_until_expired(coord: Coordinator, saga_id: str, limit: float = 30.0) -> None:
    """Block until the saga's lease has expired by the database clock."""
    give_up = time.monotonic() + limit
    while True:
        expires = coord.get(saga_id).lease_expires_at
        assert expires is not None
        if coord.store.now() > expires:
            return
        assert time.monotonic() < give_up, f"lease of {saga_id} never expired"
        time.sleep(0.05)


def wait_for_the_clock(coord: Coordinator, past: float) -> None:
    """Spin until the database clock is past ``past`` (SQLite keeps milliseconds): a time
    stamped from now on differs from ``past``, whatever the machine's speed."""
    while coord.store.now() <= past:
        pass


def replay(events: Iterable[EventRecord]) -> tuple[SagaStatus | None, dict[str, StepStatus]]:
    """The saga and step statuses that a saga's history implies."""
    status: SagaStatus | None = None
    steps: dict[str, StepStatus] = {}
    step_moves = {
        "step_started": StepStatus.RUNNING,
        "step_succeeded": StepStatus.SUCCEEDED,
        "step_failed": StepStatus.FAILED,
        "step_in_doubt": StepStatus.IN_DOUBT,
        "compensation_started": StepStatus.COMPENSATING,
        "compensation_done": StepStatus.COMPENSATED,
        "step_skipped": StepStatus.SKIPPED,
        "step_reset": StepStatus.PENDING,
    }
    for event in events:
        if event.kind == "saga_started":
            status = SagaStatus.RUNNING
        elif event.kind.startswith("saga_"):
            status = SagaStatus(event.kind.removeprefix("saga_"))
        elif event.kind in step_moves:
            assert event.step is not None
            steps[event.step] = step_moves[event.kind]
    return status, steps


def assert_history_replays(coord: Coordinator, saga_id: str) -> None:
    """The events of the saga replay to exactly its stored saga and step statuses."""
    view = coord.get(saga_id)
    status, steps = replay(coord.history(saga_id))
    assert status is view.status
    assert steps == {s.name: s.status for s in view.steps}


def kinds(coord: Coordinator, saga_id: str) -> list[str]:
    return [event.kind for event in coord.history(saga_id)]
