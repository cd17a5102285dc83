"""A context-manager step defined in a script run as ``python script.py``: refused
before anything runs, with an error that says what to do, and what it says works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.children import child_env

STEPS = """
def reserve(sku: str) -> dict:
    return {"hold": "H-" + sku}


def release(result: dict, sku: str) -> None:
    return None
"""

SCRIPT = """
import sys

from saga import Coordinator
{steps}

coord = Coordinator(sys.argv[1])
with coord.saga("script-order", key="o-1") as s:
    s.step(reserve, "sku-1", compensate=release)
print("completed")
"""


def run_script(folder: Path, script: str) -> subprocess.CompletedProcess[str]:
    path = folder / "order_script.py"
    path.write_text(script)
    url = f"sqlite:///{folder}/saga.db"
    return subprocess.run(
        [sys.executable, str(path), url],
        cwd=folder,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_step_in_the_script_is_refused_with_what_to_do(tmp_path: Path) -> None:
    refused = run_script(tmp_path, SCRIPT.format(steps=STEPS))
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert "step function 'reserve' is defined in the script run as __main__" in last
    assert str(tmp_path / "order_script.py") in last
    assert "move it into a module of its own that the recovering process imports" in last
    assert "from steps import reserve" in last
    assert "pass a module-level function" not in last  # it is one already


def test_following_the_advice_runs_the_saga_twice(tmp_path: Path) -> None:
    (tmp_path / "steps.py").write_text(STEPS)
    script = SCRIPT.format(steps="from steps import release, reserve")
    for _ in range(2):  # the second run finds the saga completed under its key
        done = run_script(tmp_path, script)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "completed"
