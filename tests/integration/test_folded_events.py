"""A step's start and success events folded into its row on PostgreSQL (schema revision
0006, adapters/sql/folding.py): what is left as event rows, and a downgrade that writes
the folded events back in their places."""

from __future__ import annotations

import json

import pytest
import sqlalchemy
from saga.adapters.sql import SqlSagaStore
from saga.adapters.sql.pg_async import PostgresAsyncStore
from saga.adapters.sql.pg_writer import PostgresHotPath
from saga.adapters.sql.postgres import PostgresDialect

from saga import Coordinator, Saga, SagaStatus, StepContext
from saga._internal.ports import EventRecord
from tests.cli.conftest import invoke

pytestmark = pytest.mark.postgres

ORDER = Saga("folded-order")


@ORDER.step()
def reserve(ctx: StepContext) -> str:
    return "r"


@ORDER.step()
def charge(ctx: StepContext) -> str:
    return "c"


@ORDER.step()
def ship(ctx: StepContext) -> str:
    return "s"


FAN = Saga("folded-fan", max_concurrency=8)
FAN.step(name="root")(reserve)
BRANCHES = [f"branch{i}" for i in range(6)]  # started by one commit: more than SMALL rows
for branch in BRANCHES:
    FAN.step(name=branch, after=("root",))(charge)
FAN.step(name="join", after=tuple(BRANCHES))(ship)


def _event_rows(url: str, saga_id: str) -> list[tuple[object, ...]]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sqlalchemy.text(
                    "SELECT id, at, kind, step, attempt, epoch, detail FROM saga_events"
                    " WHERE saga_id = :id ORDER BY id"
                ),
                {"id": saga_id},
            )
            return [tuple(row) for row in rows]
    finally:
        engine.dispose()


def _as_rows(history: list[EventRecord]) -> list[tuple[object, ...]]:
    """The rows ``history`` reads as (its details as the JSON text stored)."""
    return [
        (
            e.id,
            e.at,
            e.kind,
            e.step,
            e.attempt,
            e.epoch,
            None if e.detail is None else json.dumps(e.detail, sort_keys=True),
        )
        for e in history
    ]


def test_a_happy_saga_leaves_as_event_rows_only_what_its_step_rows_cannot_say(
    pg_url: str,
) -> None:
    with Coordinator(pg_url) as coord:
        done = coord.run(ORDER, key="k")
        assert done.status is SagaStatus.COMPLETED
        history = coord.history(done.id)
    assert [(e.kind, e.step) for e in history] == [
        ("saga_started", None),
        ("step_started", "reserve"),
        ("step_succeeded", "reserve"),
        ("step_started", "charge"),
        ("step_succeeded", "charge"),
        ("step_started", "ship"),
        ("step_succeeded", "ship"),
        ("saga_completed", None),
    ]
    assert [row[2] for row in _event_rows(pg_url, done.id)] == ["saga_started", "saga_completed"]


def test_parallel_steps_fold_each_event_into_its_own_step_row(pg_url: str) -> None:
    with Coordinator(pg_url) as coord:
        done = coord.run(FAN, key="k")
        assert done.status is SagaStatus.COMPLETED
        history = coord.history(done.id)
    for name in ["root", *BRANCHES, "join"]:
        kinds = [e.kind for e in history if e.step == name]
        assert kinds == ["step_started", "step_succeeded"], name
    assert [row[2] for row in _event_rows(pg_url, done.id)] == ["saga_started", "saga_completed"]


def test_a_downgrade_writes_the_folded_events_back_with_their_ids_and_times(
    pg_url: str,
) -> None:
    with Coordinator(pg_url) as coord:
        saga_id = coord.run(ORDER, key="k").id
        history = coord.history(saga_id)
    assert len(_event_rows(pg_url, saga_id)) < len(history)
    assert invoke(pg_url, "db", "downgrade", "0005").exit_code == 0
    assert _event_rows(pg_url, saga_id) == _as_rows(history)
    assert invoke(pg_url, "db", "upgrade").exit_code == 0
    with Coordinator(pg_url) as coord:
        assert coord.history(saga_id) == history


def test_the_native_async_store_shares_what_the_hot_path_folded(pg_url: str) -> None:
    """One memory per store (adapters/sql/fold_memory.py): were the async side's its own,
    a commit made by either side would leave the other's belief about a row stale."""
    store = SqlSagaStore(pg_url, PostgresDialect())
    try:
        native = store.native_async()
        assert isinstance(native, PostgresAsyncStore)
        assert isinstance(store.hot, PostgresHotPath)
        assert native.memory is store.hot.memory
        assert PostgresAsyncStore(store, {}).memory is store.hot.memory
    finally:
        store.close()
