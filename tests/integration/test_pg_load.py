"""PostgreSQL reads a saga with its steps in one statement (adapters/sql/pg_load.py):
what it returns is exactly what the portable two-SELECT read returns, for a saga with
payloads, NULLs, strange text, floats and several steps, in seq order; an unknown id
is None. A recoverer reads every saga it claims this way, and a creation that inserted
nothing (a keyed re-run, or our own insert whose acknowledgement was lost) reads what
it clashed with so too, and a keyed block finds the saga its key ran."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from saga.adapters.sql import reads, writes
from sqlalchemy import event

from saga import Coordinator, Saga, SagaFailed, StepContext, StorageError
from tests.integration.support import sql_store

pytestmark = pytest.mark.postgres

saga = Saga("pg-load-shapes")


@saga.step()
def reserve(ctx: StepContext) -> dict[str, object]:
    return {"note": ctx.data["note"], "pi": 3.141592653589793, "none": None, "list": [1, 2.5, "x"]}


@reserve.compensation
def release(ctx: StepContext) -> None:
    return None


@saga.step()
def refuse(ctx: StepContext) -> None:
    raise ValueError("refused: 'quotes' \"and\" \\backslashes\\ é 🧾")


def test_the_one_statement_read_is_the_portable_read(pg_url: str) -> None:
    with Coordinator(pg_url) as coord:
        with pytest.raises(SagaFailed) as failed:
            coord.run(saga, data={"note": "line\nbreak ü"}, key="k'1")
        saga_id = failed.value.saga_id
        store = sql_store(coord)
        one = store.load(saga_id)
        portable = store.read(lambda connection: reads.load(connection, saga_id))
        assert one is not None
        assert one == portable
        assert [step.seq for step in one.steps] == sorted(step.seq for step in one.steps)
        assert len(one.steps) == 2
        assert store.load("00000000-0000-4000-8000-000000000000") is None


def failed_under_a_key(coord: Coordinator, prefix: str) -> tuple[str, str]:
    """Run the saga (its second step refuses) under a fresh key: its id and the key."""
    key = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SagaFailed) as failed:
        coord.run(saga, data={"note": prefix}, key=key)
    return failed.value.saga_id, key


def test_a_clash_is_read_in_one_statement_as_the_portable_read_finds_it(pg_url: str) -> None:
    with Coordinator(pg_url) as coord:
        saga_id, _ = failed_under_a_key(coord, "clash")
        store = sql_store(coord)
        hot = store.hot
        existing = store.load(saga_id)
        assert existing is not None
        # Another run under the same key: its insert clashed with the saga above.
        again = dataclasses.replace(existing, id=str(uuid.uuid4()))
        portable = store.once(lambda connection: writes.clash(connection, again))
        assert hot.clash(again) == portable == (existing, False)
        # Our own insert, its acknowledgement lost: the row with our id is ours.
        assert hot.clash(existing) == (existing, True)
        # Neither: said, not guessed.
        nowhere = dataclasses.replace(existing, id=str(uuid.uuid4()), key="no-such-key")
        with pytest.raises(StorageError, match="clashed but was not found"):
            hot.clash(nowhere)


def test_a_keyed_re_run_returns_the_recorded_outcome_through_the_clash(pg_url: str) -> None:
    with Coordinator(pg_url) as coord:
        key = f"rerun-{uuid.uuid4().hex[:8]}"
        with pytest.raises(SagaFailed) as first:
            coord.run(saga, data={"note": "once"}, key=key)
        with pytest.raises(SagaFailed) as second:
            coord.run(saga, data={"note": "once"}, key=key)
        assert second.value.saga_id == first.value.saga_id


def test_a_saga_is_found_by_name_and_key_in_one_statement(pg_url: str) -> None:
    with Coordinator(pg_url) as coord:
        saga_id, key = failed_under_a_key(coord, "find")
        store = sql_store(coord)
        portable = store.read(lambda connection: reads.find(connection, saga.name, key))
        sent: list[str] = []

        def record(conn: object, cursor: object, statement: str, *_: object) -> None:
            sent.append(statement)

        event.listen(store.engine, "before_cursor_execute", record)
        try:
            found = store.find(saga.name, key)
            missing = store.find(saga.name, "no-such-key")
        finally:
            event.remove(store.engine, "before_cursor_execute", record)
        assert found is not None
        assert found == portable
        assert found.id == saga_id
        assert [step.seq for step in found.steps] == sorted(step.seq for step in found.steps)
        assert missing is None
        assert sent == []  # neither read went through the portable transaction
