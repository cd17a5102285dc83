"""The admin command's reads never create a database or tables: from the wrong
directory or with the wrong --db they say so, instead of an empty all-clear."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from saga import Coordinator, DatabaseRefusedError, RetryPolicy, StorageUnavailableError
from saga._internal.errors import DatabaseNotFoundError
from tests.cli.conftest import one_error_line, run_saga

FOREVER = RetryPolicy(max_attempts=None, retry_on=(StorageUnavailableError,))
"""A store retry that never gives up: an error it retried would hang the test."""


@pytest.mark.parametrize(
    "args",
    [["list", "--stuck"], ["show", "00000000-0000-0000-0000-000000000000"], ["recover"]],
)
def test_a_read_in_the_wrong_directory_creates_no_saga_db(tmp_path: Path, args: list[str]) -> None:
    result = run_saga(*args, cwd=tmp_path, env={"SAGA_DATABASE_URL": ""})
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_error_line(result.stderr)
    assert f"no such database file: {tmp_path / 'saga.db'}" in line
    assert result.stdout == ""
    assert not (tmp_path / "saga.db").exists()


def test_db_upgrade_still_creates_the_file_and_then_reads_work(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/new.db"
    assert run_saga("--db", url, "db", "upgrade", cwd=tmp_path).returncode == 0
    listed = run_saga("--db", url, "list", "--stuck", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "no stuck sagas\n"  # now true: the database is the right one


@pytest.mark.postgres
def test_a_postgres_database_without_saga_tables_is_named(pg_url: str, tmp_path: Path) -> None:
    result = run_saga("--db", pg_url, "list", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no saga tables at" in one_error_line(result.stderr)
    assert "saga db upgrade" in result.stderr
    engine = create_engine(pg_url)
    try:
        assert not [t for t in inspect(engine).get_table_names() if t.startswith("saga_")]
    finally:
        engine.dispose()


def test_the_library_refuses_too_when_asked(tmp_path: Path) -> None:
    with pytest.raises(DatabaseNotFoundError, match="no such database file"):
        Coordinator(f"sqlite:///{tmp_path}/absent.db", create_tables=False)
    assert not (tmp_path / "absent.db").exists()
    empty = tmp_path / "empty.db"
    create_engine(f"sqlite:///{empty}").connect().close()  # a file, no tables
    with (
        Coordinator(f"sqlite:///{empty}", create_tables=False) as coord,
        pytest.raises(DatabaseNotFoundError, match="no saga tables"),
    ):
        coord.list()
    with Coordinator(f"sqlite:///{tmp_path}/made.db") as coord:  # the default: first use creates
        assert coord.list() == []


@pytest.mark.postgres
def test_a_database_that_refuses_for_good_fails_fast_with_the_right_words(
    pg_url: str, tmp_path: Path
) -> None:
    wrong = make_url(pg_url).set(database="no_such_database_here")
    url = wrong.render_as_string(hide_password=False)
    result = run_saga("--db", url, "list", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_error_line(result.stderr)
    assert 'database "no_such_database_here" does not exist' in line
    assert "server is up" not in line  # it is up: it said no
    with pytest.raises(DatabaseRefusedError) as refused:
        Coordinator(url, store_retry=FOREVER).list()  # never retried: no retry can fix it
    assert not isinstance(refused.value, StorageUnavailableError)
    with pytest.raises(DatabaseRefusedError, match="unable to open database file"):
        Coordinator(f"sqlite:///{tmp_path}/no/such/dir/saga.db", store_retry=FOREVER).list()
