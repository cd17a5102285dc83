"""Bad input: exit 2, one line on stderr naming the problem, no traceback, no password."""

from __future__ import annotations

from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.cli.conftest import World, invoke, one_error_line

UNREACHABLE = "postgresql+psycopg://postgres:s3cr3t@127.0.0.1:1/x"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["show", "not-an-id"], "'not-an-id' is not a saga id"),
        (["history", "00000000-0000-0000-0000-000000000000"], "no saga with id"),
        (["diff", "00000000-0000-0000-0000-000000000000", "x"], "no saga with id"),
        (["list", "--status", "stuck"], "unknown status 'stuck'; use one of: running"),
        (["list", "--older-than", "ten minutes"], "--older-than 'ten minutes' is not a duration"),
        (["list", "--limit", "0"], "--limit must be at least 1"),
        (["list", "--before", "00000000-0000-0000-0000-000000000000"], "no saga with id"),
        (["recover", "nope"], "'nope' is not a saga id"),
        (["compensate", "00000000-0000-0000-0000-000000000000"], "no saga with id"),
        (["purge", "--older-than", "30d", "--status", "runing", "--yes"], "unknown status"),
        (["purge", "--older-than", "30d", "--pace", "0", "--yes"], "--pace 0 is not a share"),
        (["purge", "--older-than", "30d", "--pace", "2", "--yes"], "--pace 2 is not a share"),
        (["worker", "--lease-ttl", "0s"], "--lease-ttl must be positive"),
        (["worker", "--lease-ttl", "soon"], "--lease-ttl 'soon' is not a duration"),
        (["worker", "--lease-ttl", "50ms"], "--lease-ttl 0.05s is out of range; pass a number"),
        (["worker", "--lease-ttl", "2d"], "--lease-ttl 172800s is out of range; pass a number"),
        (["worker", "--interval", "0s"], "--interval must be positive, not 0s"),
        (["worker", "--batch", "0"], "--batch must be at least 1, not 0"),
        (["worker", "--log-format", "xml"], "--log-format 'xml': use text or json"),
        (["worker", "--log-file", "/nonexistent/dir/saga.log"], "--log-file /nonexistent/dir"),
    ],
)
def test_bad_input_exits_2_with_one_line(world: World, args: list[str], expected: str) -> None:
    result = invoke(world.url, *args)
    assert result.exit_code == 2, result.output
    assert expected in one_error_line(result.stderr)
    assert result.stdout == ""


def test_a_refused_recovery_of_an_unknown_id_changes_nothing(
    world: World, coord: Coordinator
) -> None:
    result = invoke(world.url, "recover", world.stuck, "00000000-0000-0000-0000-000000000000")
    assert result.exit_code == 2
    assert coord.get(world.stuck).status is SagaStatus.RUNNING


def test_unknown_url_scheme_is_bad_input(tmp_path: object) -> None:
    result = invoke("mysql://root:hunter2@db/x", "list")
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "unknown database URL scheme 'mysql'" in line
    assert "hunter2" not in result.output


def test_an_empty_db_url_is_bad_input_not_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default would create saga.db here
    result = invoke("", "list")  # saga --db "$DATABASE_URL" with the variable unset
    assert result.exit_code == 2, result.output
    assert one_error_line(result.stderr).endswith(
        "the database URL is empty; pass one (postgresql+psycopg://... or sqlite:///FILE), "
        "or none at all for $SAGA_DATABASE_URL, else sqlite:///saga.db"
    )
    assert list(tmp_path.iterdir()) == []


def test_unreachable_database_fails_fast_and_never_shows_the_password() -> None:
    result = invoke(UNREACHABLE, "list")
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "cannot reach the database" in line
    assert "postgres:***@127.0.0.1:1/x" in line
    assert "s3cr3t" not in result.output


def test_debug_adds_the_traceback(world: World) -> None:
    result = invoke(world.url, "--debug", "show", "not-an-id")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("saga: error: ")


def test_an_app_module_that_cannot_be_imported_is_bad_input(sqlite_url: str) -> None:
    from typer.testing import CliRunner

    from saga.cli import app

    result = CliRunner().invoke(app, ["--db", sqlite_url, "--app", "no_such_module", "list"])
    assert result.exit_code == 2
    assert "cannot import --app module 'no_such_module'" in one_error_line(result.stderr)
