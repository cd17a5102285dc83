"""Versioned migrations: what a store opens, refuses and creates, and what ``saga db
upgrade / status / downgrade`` do, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from saga.adapters.sql import revisions, tables
from saga.adapters.sql.migrate import read
from sqlalchemy import MetaData, func, inspect, select, text

from saga import Coordinator, SagaStatus, SchemaVersionError, admin
from tests.cli.conftest import invoke
from tests.integration import steps
from tests.integration.support import sql_store

HEAD = revisions.HEAD


def _transfer(coord: Coordinator, key: str) -> str:
    with coord.saga("transfer", key=key) as s:
        s.step(steps.debit, "alice", 10, compensate=steps.refund)
        s.step(steps.credit, "bob", 10, compensate=steps.uncredit)
    return s.id


def _shape(coord: Coordinator) -> dict[str, Any]:
    """Every table's columns, indexes and rows: to prove that nothing changed."""
    with sql_store(coord).engine.connect() as connection:
        inspector = inspect(connection)
        shape: dict[str, Any] = {}
        for name in sorted(inspector.get_table_names()):
            columns = sorted(c["name"] for c in inspector.get_columns(name))
            rows = connection.execute(text(f'SELECT * FROM "{name}"')).mappings().all()
            indexes = sorted(i["name"] or "" for i in inspector.get_indexes(name))
            shape[name] = (columns, indexes, sorted(repr(sorted(r.items())) for r in rows))
        return shape


def _execute(coord: Coordinator, *statements: str) -> None:
    with sql_store(coord).engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))


def _rows(coord: Coordinator) -> int:
    with sql_store(coord).engine.begin() as connection:
        return int(connection.execute(select(func.count()).select_from(tables.instances)).scalar())


def test_an_empty_database_is_created_at_first_use(db_url: str) -> None:
    coord = Coordinator(db_url)
    try:
        assert coord.store.schema_version() is None
        saga_id = _transfer(coord, "t-1")
        assert coord.get(saga_id).status is SagaStatus.COMPLETED
        assert coord.store.schema_version() == HEAD
    finally:
        coord.close()


def test_a_schema_from_a_newer_release_is_refused_before_anything_is_written(
    db_url: str,
) -> None:
    maker = Coordinator(db_url)
    maker.create_schema()
    _execute(maker, f"UPDATE {revisions.VERSION_TABLE} SET version_num = '9001'")
    maker.close()
    older = Coordinator(db_url)
    try:
        with (
            pytest.raises(SchemaVersionError, match="at 9001, newer than this release"),
            older.saga("transfer", key="t-1") as s,
        ):
            s.step(steps.debit, "alice", 10, compensate=steps.refund)
        assert steps.CALLS == []
        assert _rows(older) == 0
        upgraded = invoke(db_url, "db", "upgrade")
        assert upgraded.exit_code == 1
        assert f"newer than this release of saga knows (its newest is {HEAD}" in upgraded.stderr
        status = invoke(db_url, "db", "status")
        assert status.exit_code == 1
        assert "from a newer release of saga" in status.stdout
        assert "run `saga db upgrade`" not in status.stdout
    finally:
        older.close()


def test_a_database_behind_this_release_is_refused_with_the_command_to_run(db_url: str) -> None:
    maker = Coordinator(db_url)
    saga_id = _transfer(maker, "t-1")
    assert invoke(db_url, "db", "downgrade", "0002").exit_code == 0
    maker.close()
    coord = Coordinator(db_url)
    try:
        with pytest.raises(SchemaVersionError, match=r"older than .*run `saga db upgrade` first"):
            coord.get(saga_id)
        status = invoke(db_url, "db", "status", "--json")
        assert status.exit_code == 1
        assert '"state": "behind"' in status.stdout
        assert invoke(db_url, "db", "upgrade").exit_code == 0
        fresh = Coordinator(db_url)
        try:
            assert fresh.get(saga_id).status is SagaStatus.COMPLETED
            assert fresh.get(_transfer(fresh, "t-2")).status is SagaStatus.COMPLETED
        finally:
            fresh.close()
    finally:
        coord.close()


def test_a_database_of_a_release_before_migrations_is_stamped_then_migrated(db_url: str) -> None:
    maker = Coordinator(db_url)
    saga_id = _transfer(maker, "t-1")
    # Revision 0002's tables without the revision table: what today's release made.
    assert invoke(db_url, "db", "downgrade", "0002").exit_code == 0
    _execute(maker, f"DROP TABLE {revisions.VERSION_TABLE}")
    before = _shape(maker)
    status = invoke(db_url, "db", "status")
    assert "version 2 of a release before migrations (revision 0002)" in status.stdout
    upgraded = invoke(db_url, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.stderr
    assert "applied 0003" in upgraded.stdout
    after = _shape(maker)
    assert after["saga_events"][2] == before["saga_events"][2]  # the same rows, unchanged
    # saga_instances and saga_steps gained columns (null on old rows); their other values
    # are unchanged.
    added = (" ('fingerprint', None),", " ('trace_context', None),")
    added += tuple(f" ('{name}', None)," for name in tables.INSTANCE_FOLD_COLUMNS)
    assert [_without(r, added) for r in after["saga_instances"][2]] == (before["saga_instances"][2])
    folds = (" ('finished_event', None),", " ('fold_epoch', None),", " ('started_event', None),")
    assert [_without(r, folds) for r in after["saga_steps"][2]] == before["saga_steps"][2]
    maker.close()
    coord = Coordinator(db_url)
    try:
        assert coord.get(saga_id).status is SagaStatus.COMPLETED
    finally:
        coord.close()


@pytest.mark.parametrize("damage", ["dropped column", "foreign table"])
def test_upgrade_of_a_database_it_does_not_recognise_says_what_it_found_and_changes_nothing(
    db_url: str, damage: str
) -> None:
    maker = Coordinator(db_url)
    if damage == "dropped column":
        _transfer(maker, "t-1")
        _execute(maker, "ALTER TABLE saga_instances DROP COLUMN fingerprint")
        expected = "table saga_instances lacks column(s) fingerprint"
    else:  # an application's own table that happens to have saga's name
        _execute(maker, "CREATE TABLE saga_steps (id INTEGER PRIMARY KEY, label VARCHAR)")
        expected = "tables named like saga's (saga_steps) but no schema version"
    before = _shape(maker)
    upgraded = invoke(db_url, "db", "upgrade")
    assert upgraded.exit_code == 1
    assert expected in upgraded.stderr
    assert "changed nothing" in upgraded.stderr or "Nothing was changed" in upgraded.stderr
    assert "Traceback" not in upgraded.stderr
    assert _shape(maker) == before
    if damage == "foreign table":  # not empty, so not created at first use either
        with pytest.raises(SchemaVersionError, match="does not recognise"):
            maker.get("00000000-0000-4000-8000-000000000000")
        assert _shape(maker) == before
    maker.close()


@pytest.mark.parametrize("start", ["0001", "before migrations"])
def test_upgrade_sql_prints_a_script_that_a_dba_can_run_and_changes_nothing(
    db_url: str, start: str
) -> None:
    maker = Coordinator(db_url)
    saga_id = _transfer(maker, "t-1")
    assert invoke(db_url, "db", "downgrade", "0001" if start == "0001" else "0002").exit_code == 0
    if start != "0001":  # the script records the revision first, then migrates
        _execute(maker, f"DROP TABLE {revisions.VERSION_TABLE}")
    before = _shape(maker)
    printed = invoke(db_url, "db", "upgrade", "--sql")
    assert printed.exit_code == 0, printed.stderr
    script = printed.stdout
    if start == "0001":
        assert "ALTER TABLE saga_steps ADD COLUMN commit_token" in script
    else:
        assert f"CREATE TABLE {revisions.VERSION_TABLE}" in script
    assert "version_num='0003'" in script
    assert _shape(maker) == before
    raw = sql_store(maker).engine.raw_connection()
    try:  # as a DBA would run it: the whole script, its own BEGIN and COMMIT included
        cursor = raw.cursor()
        if db_url.startswith("sqlite"):
            raw.driver_connection.executescript(script)  # type: ignore[union-attr]
        else:
            cursor.execute(script)
            raw.commit()
    finally:
        raw.close()
    assert maker.store.schema_version() == HEAD
    assert invoke(db_url, "db", "upgrade", "--sql").stdout.startswith("-- nothing to do")
    maker.close()
    coord = Coordinator(db_url)
    try:
        assert coord.get(saga_id).status is SagaStatus.COMPLETED
    finally:
        coord.close()


def test_two_deploys_upgrading_at_once_apply_each_revision_once(db_url: str) -> None:
    coords = [Coordinator(db_url) for _ in range(2)]
    start = threading.Barrier(2)
    applied: list[tuple[str, ...]] = []

    def deploy(coord: Coordinator) -> None:
        start.wait(timeout=30)
        applied.append(admin.upgrade_schema(coord).applied)

    threads = [threading.Thread(target=deploy, args=(c,)) for c in coords]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert sorted(applied) == [(), tuple(revisions.KNOWN)]
        with sql_store(coords[0]).engine.connect() as connection:
            assert read(connection).revision == HEAD
    finally:
        for coord in coords:
            coord.close()


def test_downgrade_refuses_what_cannot_be_reversed_and_an_unknown_revision(db_url: str) -> None:
    maker = Coordinator(db_url)
    _transfer(maker, "t-1")
    unknown = invoke(db_url, "db", "downgrade", "base")
    assert unknown.exit_code == 2
    assert "unknown revision 'base'; known: 0001, 0002, 0003" in unknown.stderr
    same = invoke(db_url, "db", "downgrade", HEAD)
    assert same.exit_code == 0
    assert "nothing to do" in same.stdout
    assert maker.store.schema_version() == HEAD
    maker.close()


def test_the_migrated_schema_matches_the_models(db_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    coord = Coordinator(db_url)
    try:
        coord.create_schema()
        with sql_store(coord).engine.connect() as connection:
            context = MigrationContext.configure(connection)
            ours = MetaData()  # saga's tables only: SQLModel's metadata is shared with apps
            for table in tables.ALL_TABLES:
                table.to_metadata(ours)
            differences = compare_metadata(context, ours)
        # PostgreSQL keys events by (saga_id, id) instead of the models' index (0003).
        if not db_url.startswith("sqlite"):
            differences = [d for d in differences if d[0] != "add_index"]
        tables_only = [d for d in differences if d[0] in ("add_table", "remove_table")]
        assert [d for d in tables_only if d[1].name != revisions.VERSION_TABLE] == []
        assert [d for d in differences if d[0] not in ("add_table", "remove_table")] == []
    finally:
        coord.close()


def test_an_applications_own_alembic_history_is_left_alone(db_url: str) -> None:
    """An application's own Alembic history (alembic_version) is not saga's."""
    coord = Coordinator(db_url)
    try:
        _execute(coord, "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        _execute(coord, "INSERT INTO alembic_version VALUES ('abc123')")
        _transfer(coord, "t-1")
        with sql_store(coord).engine.begin() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).all() == [
                ("abc123",)
            ]
        assert coord.store.schema_version() == HEAD
    finally:
        coord.close()


def _without(text: str, parts: tuple[str, ...]) -> str:
    for part in parts:
        text = text.replace(part, "")
    return text
