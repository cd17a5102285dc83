"""Versions on the SQL stores, through both APIs: what each instance records, and how
rows written before versions read."""

from __future__ import annotations

import uuid

from saga.adapters.sql import tables
from sqlalchemy import update

from saga import Coordinator, Saga
from tests.integration.support import sql_store


def _pair() -> tuple[Saga, Saga]:
    name = f"vers-{uuid.uuid4().hex[:8]}"
    v1, v2 = Saga(name, version=1), Saga(name, version=2)
    for saga, steps in ((v1, ["a", "b"]), (v2, ["a", "b", "c"])):
        for step in steps:
            saga.step(name=step)(lambda ctx, step=step: step)
    return v1, v2


def test_each_instance_records_its_version_and_fingerprint(any_coord: Coordinator) -> None:
    v1, v2 = _pair()
    any_coord.register(v1, v2)
    old = any_coord.run(v1, key="old")
    new = any_coord.run(v1.name, key="new")  # by name: the newest
    assert (old.version, old.fingerprint) == (1, v1.fingerprint)
    assert (new.version, new.fingerprint) == (2, v2.fingerprint)
    again = any_coord.run(v1.name, key="old")  # a rerun returns the recorded instance
    assert (again.id, again.version, again.results) == (old.id, 1, {"a": "a", "b": "b"})
    assert [s.version for s in any_coord.list(name=v1.name)] == [2, 1]


def test_a_row_written_before_versions_reads_as_version_1(coord: Coordinator) -> None:
    v1, _ = _pair()
    view = coord.run(v1, key="k")
    with sql_store(coord).engine.begin() as connection:  # as an older release writes it
        connection.execute(
            update(tables.instances).values(version=v1.fingerprint, fingerprint=None)
        )
    again = coord.get(view.id)
    assert (again.version, again.fingerprint) == (1, v1.fingerprint)
    assert coord.run(v1, key="k").id == view.id
