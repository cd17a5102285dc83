"""A worker whose statement the database refuses (not an outage: here a table renamed
under it) says so, and backs off as from an outage, since an operator may mend it.
Before, it called every such failure "database unavailable", and a bad definition that
failed each claim's statement looked like an outage for as long as the process lived."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from saga import Coordinator, admin
from tests.integration.support import sql_store

pytestmark = pytest.mark.postgres


def test_a_refused_statement_is_not_called_an_outage(pg_url: str) -> None:
    with Coordinator(pg_url) as worker:
        worker.create_schema()
        with sql_store(worker).engine.begin() as connection:
            connection.execute(text("ALTER TABLE saga_owners RENAME TO saga_owners_gone"))
        lines: list[str] = []
        stop = threading.Event()

        def log(line: str) -> None:
            print(line)  # shown if the test fails
            lines.append(line)
            if "retrying in" in line:  # the first failed pass: enough
                stop.set()

        admin.run_worker(worker, stop, interval=0.05, log=log)
    (said,) = [line for line in lines if "retrying in" in line]
    assert said.startswith("the database refused the worker's statement ("), said
    assert 'relation "saga_owners" does not exist' in said
    assert "database unavailable" not in "\n".join(lines)
