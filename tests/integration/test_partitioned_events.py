"""The event table partitioned by time on PostgreSQL, as docs/operating.md tells a DBA
to do it: its statements run as written, and then sagas run, their history reads,
``saga db check`` passes, purge deletes, and an old month's partition is dropped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy

from saga import Coordinator, Saga, SagaStatus, StepContext, admin

DOC = Path(__file__).resolve().parents[2] / "docs" / "operating.md"

pytestmark = pytest.mark.postgres


def sql_blocks() -> list[str]:
    """The ```sql blocks of the partitioning section, in order."""
    text = DOC.read_text()
    section = text.split("### Billions of events", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, flags=re.DOTALL)


ORDER = Saga("partitioned-order")


@ORDER.step()
def reserve(ctx: StepContext) -> str:
    return "r"


def test_the_documented_partitioning_keeps_saga_working(pg_url: str) -> None:
    partition, retire = sql_blocks()
    with Coordinator(pg_url) as coord:
        before = coord.run(ORDER, key="before")
        engine = sqlalchemy.create_engine(pg_url)
        with engine.connect() as connection:
            connection.exec_driver_sql(partition)  # BEGIN ... COMMIT as written
            kind = connection.exec_driver_sql(
                "SELECT relkind FROM pg_class WHERE oid = to_regclass('saga_events')"
            ).scalar()
        assert kind == "p"  # partitioned

        after = coord.run(ORDER, key="after")
        assert after.status is SagaStatus.COMPLETED
        assert [e.kind for e in coord.history(before.id)][-1] == "saga_completed"  # copied
        assert [e.kind for e in coord.history(after.id)][-1] == "saga_completed"
        assert admin.check_versions(coord).ok

        with engine.begin() as connection:  # the events as if from December 2026
            connection.exec_driver_sql(
                "UPDATE saga_events SET at = extract(epoch FROM timestamptz '2026-12-15 00:00Z')"
            )
        unfinished, *_ = (s for s in retire.split(";") if s.strip())
        with engine.connect() as connection:
            assert connection.exec_driver_sql(unfinished).scalar() == 0
            connection.exec_driver_sql(retire.split(";", 1)[1])  # detach and drop
            connection.commit()
        # Its history went with the month, but for what its rows hold themselves (the
        # step's start and success, folded into the step row; the saga's start and
        # completion, into the saga row), which goes with the saga at purge.
        left = [(e.kind, e.step) for e in coord.history(before.id)]
        assert left == [
            ("saga_started", None),
            ("step_started", "reserve"),
            ("step_succeeded", "reserve"),
            ("saga_completed", None),
        ]
        assert admin.purge(coord, older_than=0.0) == 2
        assert coord.list() == []
        engine.dispose()
