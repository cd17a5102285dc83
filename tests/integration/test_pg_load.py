"""PostgreSQL reads a saga with its steps in one statement (adapters/sql/pg_load.py):
what it returns is exactly what the portable two-SELECT read returns, for a saga with
payloads, NULLs, strange text, floats and several steps, in seq order; an unknown id
is None. A recoverer reads every saga it claims this way."""

from __future__ import annotations

import pytest
from saga.adapters.sql import reads

from saga import Coordinator, Saga, SagaFailed, StepContext
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
