"""Events folded into the rows that say what they say, on PostgreSQL (adapters/sql/
folding.py): a step's start and success into its row (schema revision 0006), a saga's
start and completion into its own (0007); what is left as event rows, and a downgrade
that writes the folded events back in their places."""

from __future__ import annotations

import json

import pytest
import sqlalchemy
from saga.adapters.sql import SqlSagaStore
from saga.adapters.sql.pg_async import PostgresAsyncStore
from saga.adapters.sql.pg_hot import PostgresHotPath
from saga.adapters.sql.postgres import PostgresDialect

from saga import (
    Coordinator,
    OperationRefusedError,
    RetryPolicy,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
)
from saga._internal.ports import Event, EventRecord
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


def one() -> int:
    return 1


FAILING = Saga("folded-failing")
FAILING.step(name="reserve")(reserve)


@reserve.compensation
def release(ctx: StepContext) -> None:
    return None


@FAILING.step(retry=RetryPolicy(max_attempts=1))
def refuse(ctx: StepContext) -> None:
    raise ValueError("no")


FAN = Saga("folded-fan", max_concurrency=8)
FAN.step(name="root")(reserve)
BRANCHES = [f"branch{i}" for i in range(6)]  # started by one commit: more than SMALL rows
for branch in BRANCHES:
    FAN.step(name=branch, after=("root",))(charge)
FAN.step(name="join", after=tuple(BRANCHES))(ship)


WIDE = Saga("folded-wide-fan", max_concurrency=12)
WIDE.step(name="root")(reserve)
WIDE_BRANCHES = [f"wide{i:02d}" for i in range(12)]  # with root's success: more than DRAWN ids
for branch in WIDE_BRANCHES:
    WIDE.step(name=branch, after=("root",))(charge)
WIDE.step(name="join", after=tuple(WIDE_BRANCHES))(ship)


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
        created_at = coord.get(done.id).created_at
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
    assert history[0].detail == {"module": __name__}  # where an operator finds the definition
    assert history[0].at == created_at
    assert history[0].epoch == 1
    assert history[-1].at >= history[-2].at
    assert history[-1].epoch == 1
    assert _event_rows(pg_url, done.id) == []


def test_parallel_steps_fold_each_event_into_its_own_step_row(pg_url: str) -> None:
    with Coordinator(pg_url) as coord:
        done = coord.run(FAN, key="k")
        assert done.status is SagaStatus.COMPLETED
        history = coord.history(done.id)
    for name in ["root", *BRANCHES, "join"]:
        kinds = [e.kind for e in history if e.step == name]
        assert kinds == ["step_started", "step_succeeded"], name
    assert _event_rows(pg_url, done.id) == []


def test_a_large_commit_gives_each_folded_event_the_id_of_its_place_in_the_commit(
    pg_url: str,
) -> None:
    """Root's success and the twelve starts it allows are one commit, whose event ids
    are drawn by count (more than DRAWN) and handed out by position: the history reads
    them in the commit's order, the branches in the order they were started."""
    with Coordinator(pg_url) as coord:
        done = coord.run(WIDE, key="k")
        assert done.status is SagaStatus.COMPLETED
        history = coord.history(done.id)
    ids = [e.id for e in history]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    steps = [(e.kind, e.step) for e in history]
    succeeded = steps.index(("step_succeeded", "root"))
    started = [("step_started", name) for name in WIDE_BRANCHES]
    assert steps[succeeded + 1 : succeeded + 1 + len(started)] == started
    joined = steps.index(("step_started", "join"))
    assert all(steps.index(("step_succeeded", name)) < joined for name in WIDE_BRANCHES)
    assert _event_rows(pg_url, done.id) == []


def test_a_block_saga_folds_its_start_and_completion_too(pg_url: str) -> None:
    with Coordinator(pg_url) as coord:
        with coord.saga("folded-block", key="k") as block:
            block.step(one)
        done = coord.get(key="k", name="folded-block")
        assert done.status is SagaStatus.COMPLETED
        history = coord.history(done.id)
    assert [e.kind for e in history] == [
        "saga_started",
        "step_started",
        "step_succeeded",
        "saga_completed",
    ]
    assert history[0].detail is None
    assert _event_rows(pg_url, done.id) == []


def test_a_saga_that_does_not_complete_keeps_its_ending_as_a_row(pg_url: str) -> None:
    """Only a completion folds: a compensated saga's ending says what failed."""
    with Coordinator(pg_url) as coord:
        with pytest.raises(SagaFailed):
            coord.run(FAILING, key="k")
        failed = coord.list(name="folded-failing")[0]
        history = coord.history(failed.id)
    assert history[0].kind == "saga_started"
    assert history[-1].kind == "saga_compensated"
    rows = [row[2] for row in _event_rows(pg_url, failed.id)]
    assert "saga_started" not in rows
    assert rows[0] == "step_failed"
    assert rows[-1] == "saga_compensated"


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


def test_a_completed_saga_is_never_claimed_so_its_folded_completion_keeps_its_epoch(
    pg_url: str,
) -> None:
    """The folded completion reads its epoch from the saga row, which only a claim
    changes: a claim of a completed saga, by an operator or a recoverer, takes nothing."""
    with Coordinator(pg_url) as coord:
        done = coord.run(ORDER, key="k")
        history = coord.history(done.id)
        with pytest.raises(OperationRefusedError):
            coord.store.claim(done.id, "operator", 30.0, Event("operator_action"))
        assert coord.store.claim_expired("recoverer", 30.0, 10) == []
        assert coord.history(done.id) == history
        assert coord.get(done.id).epoch == 1
