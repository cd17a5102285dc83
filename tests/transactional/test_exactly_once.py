"""Transactional steps: the step's writes and its recorded outcome commit together or not at all."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import create_engine, insert, text

from saga import (
    AsyncCoordinator,
    Coordinator,
    LeaseLostError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
)
from tests.transactional import app
from tests.transactional.invariants import check_agree


@pytest.fixture
def tables(db_url: str) -> str:
    app.create_tables(db_url)
    return db_url


def test_step_writes_commit_with_its_success_record(coord: Coordinator, tables: str) -> None:
    view = coord.run(app.FORWARD, data={})

    assert view.status is SagaStatus.COMPLETED
    rows = app.read_effects(tables)
    assert [(r.step, r.kind) for r in rows] == [("s1", "do"), ("s2", "do")]
    check_agree(coord.get(view.id), rows, ("s1", "s2"))


def test_failed_step_leaves_nothing_and_earlier_steps_are_undone_in_their_own_transaction(
    coord: Coordinator, tables: str
) -> None:
    with pytest.raises(SagaFailed) as failed:
        coord.run(app.FORWARD, data={"fail": "s2"})

    view = coord.get(failed.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert [s.status for s in view.steps] == [StepStatus.COMPENSATED, StepStatus.FAILED]
    rows = app.read_effects(tables)
    assert [(r.step, r.kind) for r in rows] == [("s1", "do"), ("s1", "undo")]
    check_agree(view, rows, ("s1", "s2"))


committing = Saga("tx-commit-inside")


@committing.step(transactional=True)
def commits_then_fails(ctx: StepContext) -> None:
    app.write_effect(ctx, "do")
    ctx.session.commit()  # releases the savepoint only: the store's transaction stays open
    raise app.Refused("after commit")


def test_session_commit_inside_a_step_does_not_commit_early(
    coord: Coordinator, tables: str
) -> None:
    with pytest.raises(SagaFailed):
        coord.run(committing)

    assert app.read_effects(tables) == []


def run_block(coord: Coordinator) -> None:
    with coord.saga("tx-cm-inline") as s:
        s.step(app.cm_act, transactional=True, compensate=app.cm_undo, step_name="s1")
        s.step(app.cm_act, True, transactional=True, compensate=app.cm_undo, step_name="s2")


def test_context_manager_steps_use_current_step_session(coord: Coordinator, tables: str) -> None:
    with pytest.raises(SagaFailed) as failed:
        run_block(coord)

    view = coord.get(failed.value.saga_id)
    rows = app.read_effects(tables)
    assert [(r.step, r.kind) for r in rows] == [("s1", "do"), ("s1", "undo")]
    check_agree(view, rows, ("s1", "s2"))


def test_async_coordinator_runs_transactional_steps_and_compensations(tables: str) -> None:
    async def scenario() -> str:
        async with AsyncCoordinator(tables, lease_ttl=5.0) as coord:
            await coord.run(app.FORWARD, data={})
            try:
                await coord.run(app.FORWARD, data={"fail": "s2"})
            except SagaFailed as failure:
                return failure.saga_id
        raise AssertionError("the second saga did not fail")

    failed_id = asyncio.run(scenario())

    rows = app.read_effects(tables)
    assert sorted((r.saga_id == failed_id, r.step, r.kind) for r in rows) == [
        (False, "s1", "do"),
        (False, "s2", "do"),
        (True, "s1", "do"),
        (True, "s1", "undo"),
    ]
    with Coordinator(tables) as coord:
        check_agree(coord.get(failed_id), rows, ("s1", "s2"))


taken_over = Saga("tx-taken-over")


@taken_over.step(transactional=True)
def loses_its_lease(ctx: StepContext) -> None:
    app.write_effect(ctx, "do")
    # Another process claims the saga meanwhile (its epoch moves on, committed).
    engine = create_engine(ctx.data["url"])
    with engine.begin() as connection:
        bump = text("UPDATE saga_instances SET epoch = epoch + 1 WHERE id = :id")
        connection.execute(bump, {"id": ctx.saga_id})
    engine.dispose()


@pytest.mark.postgres
def test_step_that_lost_its_lease_commits_none_of_its_writes(pg_url: str) -> None:
    # PostgreSQL only: SQLite's single writer lock makes the takeover wait for the step.
    app.create_tables(pg_url)
    with Coordinator(pg_url, lease_ttl=5.0) as coord, pytest.raises(LeaseLostError):
        coord.run(taken_over, data={"url": pg_url})

    assert app.read_effects(pg_url) == []


def test_application_rows_written_outside_saga_are_untouched(
    coord: Coordinator, tables: str
) -> None:
    engine = create_engine(tables)
    with engine.begin() as connection:
        row = {"saga_id": "outside", "step": "-", "kind": "do", "attempt": 1, "pid": 0}
        connection.execute(insert(app.effects).values(row))
    engine.dispose()

    with pytest.raises(SagaFailed):
        coord.run(app.FORWARD, data={"fail": "s1"})

    assert [r.saga_id for r in app.read_effects(tables)] == ["outside"]
