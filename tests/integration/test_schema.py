"""The schema's version: an older release's database is brought up to date, a newer
release's is refused, by the library and by ``saga db upgrade`` alike."""

from __future__ import annotations

import pytest
from saga.adapters.sql import tables
from sqlalchemy import delete, func, insert, select, text

from saga import Coordinator, SagaStatus, SchemaVersionError
from tests.cli.conftest import invoke
from tests.integration import steps
from tests.integration.support import sql_store


def _record_version(coord: Coordinator, version: int) -> None:
    with sql_store(coord).engine.begin() as connection:
        connection.execute(delete(tables.schema_version))
        connection.execute(insert(tables.schema_version).values(version=version))


def _rows(coord: Coordinator) -> int:
    with sql_store(coord).engine.begin() as connection:
        return int(connection.execute(select(func.count()).select_from(tables.instances)).scalar())


def test_a_schema_from_a_newer_release_is_refused_before_anything_is_written(
    db_url: str,
) -> None:
    maker = Coordinator(db_url)
    maker.create_schema()
    _record_version(maker, tables.SCHEMA_VERSION + 1)
    maker.close()
    older = Coordinator(db_url)
    try:
        newer = f"version {tables.SCHEMA_VERSION + 1}"
        with (
            pytest.raises(SchemaVersionError, match=newer),
            older.saga("transfer", key="t-1") as s,
        ):
            s.step(steps.debit, "alice", 10, compensate=steps.refund)
        assert steps.CALLS == []
        assert _rows(older) == 0
    finally:
        older.close()


def test_db_upgrade_and_status_refuse_a_newer_schema_naming_both_versions(db_url: str) -> None:
    maker = Coordinator(db_url)
    maker.create_schema()
    _record_version(maker, tables.SCHEMA_VERSION + 1)
    maker.close()
    upgraded = invoke(db_url, "db", "upgrade")
    assert upgraded.exit_code == 1
    newer, known = tables.SCHEMA_VERSION + 1, tables.SCHEMA_VERSION
    assert f"version {newer}, newer than this release of saga knows (version {known})" in (
        upgraded.stderr
    )
    status = invoke(db_url, "db", "status")
    assert status.exit_code == 1
    assert "from a newer release of saga" in status.stdout
    assert "run `saga db upgrade`" not in status.stdout


def _transfer(coord: Coordinator, key: str) -> str:
    with coord.saga("transfer", key=key) as s:
        s.step(steps.debit, "alice", 10, compensate=steps.refund)
        s.step(steps.credit, "bob", 10, compensate=steps.uncredit)
    return s.id


def test_a_first_release_database_gains_the_step_commit_token_and_keeps_its_sagas(
    db_url: str,
) -> None:
    old = Coordinator(db_url)
    saga_id = _transfer(old, "t-1")
    with sql_store(old).engine.begin() as connection:  # as the first release left it
        connection.execute(text("ALTER TABLE saga_steps DROP COLUMN commit_token"))
    _record_version(old, 1)
    old.close()
    new = Coordinator(db_url)
    try:
        assert new.get(saga_id).status is SagaStatus.COMPLETED
        assert new.get(_transfer(new, "t-2")).status is SagaStatus.COMPLETED
        assert new.store.schema_version() == tables.SCHEMA_VERSION
    finally:
        new.close()
