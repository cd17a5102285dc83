"""``saga --app MODULE:FUNCTION``: every command runs with the coordinator the
application builds (its database, lease and resources), through the real script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from saga import Coordinator, SagaStatus
from tests.cli import factory_app
from tests.cli.conftest import REPO, expire, one_error_line, run_saga, saga_command
from tests.cli.test_worker_and_demo import _wait_for

FACTORY = "tests.cli.factory_app:make_coordinator"


@pytest.fixture
def app_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The application's configuration, here and for the child processes."""
    env = {"FACTORY_DB": db_url, "FACTORY_LEDGER": str(tmp_path / "ledger.txt")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def stuck_order(key: str) -> str:
    """An order whose process "died" inside ``book``, its lease long expired."""
    coord = factory_app.make_coordinator()
    try:
        with pytest.raises(factory_app.SimulatedCrash):
            coord.run(factory_app.order, data={"sku": "mug", "crash": True}, key=key)
        saga_id = coord.get(key=key).id
        expire(coord, saga_id)
        return saga_id
    finally:
        coord.close()


def ledger(env: dict[str, str]) -> list[str]:
    path = Path(env["FACTORY_LEDGER"])
    return path.read_text().splitlines() if path.exists() else []


def test_a_worker_from_the_factory_runs_steps_with_its_resources_and_closes_them(
    app_env: dict[str, str], db_url: str, tmp_path: Path
) -> None:
    saga_id = stuck_order("o-1")
    Path(app_env["FACTORY_LEDGER"]).unlink()  # what the set-up's coordinator wrote
    command = [*saga_command(), "--app", FACTORY, "worker", "--interval", "0.1s"]
    environment = {**os.environ, "PYTHONPATH": str(REPO), **app_env}
    worker = subprocess.Popen(  # no --db: the factory names the database
        command, cwd=tmp_path, env=environment, stderr=subprocess.PIPE, text=True
    )
    try:
        with Coordinator(db_url) as checker:
            _wait_for(lambda: checker.get(saga_id).status is SagaStatus.COMPLETED)
            view = checker.get(saga_id)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, stderr
    assert view.results["book"] == "B-mug"  # the factory's settings resource
    assert ledger(app_env) == [f"booked mug for {worker.pid}", "closed"]


def test_every_command_reads_the_factorys_database(app_env: dict[str, str], tmp_path: Path) -> None:
    saga_id = stuck_order("o-2")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shown = run_saga("--app", FACTORY, "show", "--key", "o-2", cwd=elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert saga_id in shown.stdout
    assert not (elsewhere / "saga.db").exists()  # not the default database


def test_a_generator_factory_is_set_up_before_and_torn_down_after(
    app_env: dict[str, str], tmp_path: Path
) -> None:
    stuck_order("o-3")
    Path(app_env["FACTORY_LEDGER"]).unlink()
    listed = run_saga("--app", "tests.cli.factory_app:lifecycle", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "o-3" in listed.stdout
    assert ledger(app_env) == ["started", "closed", "stopped"]


@pytest.mark.parametrize(
    ("apps", "said"),
    [
        (["tests.cli.factory_app:nope"], "module 'tests.cli.factory_app' has no 'nope'"),
        (["tests.cli.factory_app:not_a_function"], "names a 'int' object, not a function"),
        (["tests.cli.factory_app:returns_nothing"], "returned 'NoneType'; it must return"),
        (["tests.cli.factory_app:fails"], "the factory failed: RuntimeError: settings file"),
        (
            ["tests.cli.factory_app:fails_at_start_up"],
            "--app tests.cli.factory_app:fails_at_start_up: the factory failed at start-up: "
            "RuntimeError: settings file missing",
        ),
        ([FACTORY, "tests.cli.factory_app:lifecycle"], "more than one --app factory"),
        (["no_such_module:make"], "cannot import --app module 'no_such_module'"),
    ],
)
def test_a_bad_factory_is_one_clear_line(
    apps: list[str], said: str, app_env: dict[str, str], tmp_path: Path
) -> None:
    arguments = [word for app in apps for word in ("--app", app)]
    result = run_saga(*arguments, "list", cwd=tmp_path)
    assert result.returncode == 2
    assert said in one_error_line(result.stderr)


@pytest.mark.parametrize(
    ("options", "dropped"),
    [
        (["--db", "sqlite:///other.db", "list"], "drop --db"),
        (["worker", "--lease-ttl", "5s"], "drop --lease-ttl"),
    ],
)
def test_options_the_factory_already_sets_are_refused(
    options: list[str], dropped: str, app_env: dict[str, str], tmp_path: Path
) -> None:
    if options[0] == "--db":
        options = [options[0], options[1], "--app", FACTORY, *options[2:]]
    else:
        options = ["--app", FACTORY, *options]
    result = run_saga(*options, cwd=tmp_path)
    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert f"--app {FACTORY} builds the coordinator" in line
    assert dropped in line
    assert not (tmp_path / "other.db").exists()


TORN = "tests.cli.factory_app:fails_at_tear_down"
TORN_LINE = (
    f"saga: error: --app {TORN}: the factory's tear-down failed once the command ran: "
    "RuntimeError: could not flush the ledger"
)


def test_a_tear_down_that_fails_is_one_line_after_the_output_and_exit_1(
    app_env: dict[str, str], tmp_path: Path
) -> None:
    listed = run_saga("--app", TORN, "list", cwd=tmp_path)
    assert listed.stdout == "no sagas match\n"
    assert listed.stderr.splitlines() == [TORN_LINE]
    assert listed.returncode == 1
    as_json = run_saga("--app", TORN, "--json", "list", cwd=tmp_path)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["sagas"] == []
    assert json.loads(as_json.stderr) == {"error": TORN_LINE[13:], "exit_code": 1}


def test_a_tear_down_that_fails_keeps_a_failed_commands_own_exit_code(
    app_env: dict[str, str], tmp_path: Path
) -> None:
    shown = run_saga("--app", TORN, "show", "not-an-id", cwd=tmp_path)
    lines = shown.stderr.splitlines()
    assert len(lines) == 2, shown.stderr
    assert "Traceback" not in shown.stderr
    assert "'not-an-id' is not a saga id" in lines[0]
    assert lines[1] == TORN_LINE
    assert shown.returncode == 2
