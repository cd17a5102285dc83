"""The console script's small courtesies: its version, ``python -m saga``, help without
type placeholders, JSON errors under ``--json``, one hint per error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from saga import __version__
from tests.cli.conftest import World, one_error_line, run_saga

COMMANDS = [
    [],
    ["list"],
    ["show"],
    ["history"],
    ["recover"],
    ["compensate"],
    ["cancel"],
    ["worker"],
    ["purge"],
    ["web"],
    ["db", "upgrade"],
]


def test_the_version_from_the_script_and_from_python_m(tmp_path: Path) -> None:
    script = run_saga("--version", cwd=tmp_path)
    assert (script.returncode, script.stdout) == (0, f"saga {__version__}\n")
    module = subprocess.run(
        [sys.executable, "-m", "saga", "--version"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert (module.returncode, module.stdout) == (0, f"saga {__version__}\n")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "saga")
def test_help_names_values_not_python_types(command: list[str], tmp_path: Path) -> None:
    result = run_saga(*command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "<bool>" not in result.stdout  # a flag takes no value
    options = result.stdout.split("Options:", 1)[1]
    for placeholder in ("<str>", "<int>", "<list[str]>"):  # an option names what it takes
        assert placeholder not in options


def test_an_error_under_json_is_a_json_line(world: World, tmp_path: Path) -> None:
    result = run_saga("--db", world.url, "show", "not-an-id", "--json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    error = json.loads(result.stderr)
    assert error["exit_code"] == 2
    assert "'not-an-id' is not a saga id" in error["error"]
    plain = run_saga("--db", world.url, "show", "not-an-id", cwd=tmp_path)
    assert one_error_line(plain.stderr).count("find ids with `saga list`") == 1
