"""The run path: the lines of saga a 2-step declarative saga executes, by coverage.

Not a test: it prints a figure. One process imports saga, runs the saga once on a fresh
SQLite file (the schema created, every first-use cost paid), then measures one more run
under coverage: the distinct lines of saga's own source (the package and its adapters)
that run executes. Import-time lines (module bodies, ``def`` and ``class`` statements)
are not counted: they run once per process, whatever it runs.

Any commit can be measured the same way, so that two are compared on one scale::

    python -m benchmarks.run_path                   # HEAD (what is committed)
    python -m benchmarks.run_path --commit e1266f4  # another commit, from git

``--commit`` copies that commit's ``saga`` and ``adapters`` into a temporary tree laid out
as an install lays them out (``saga.adapters`` is ``adapters/``) and measures it in a
child process, with this interpreter and its installed dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys, tempfile
from pathlib import Path
import coverage
import saga
from saga import Coordinator, Saga, StepContext

flow = Saga("run-path")

@flow.step()
def first(ctx: StepContext) -> int:
    return 1

@first.compensation
def undo_first(ctx: StepContext) -> None:
    return None

@flow.step()
def second(ctx: StepContext) -> int:
    return 2

package = Path(saga.__file__).resolve().parent
coord = Coordinator(f"sqlite:///{Path(tempfile.mkdtemp()) / 'run-path.db'}")
coord.run(flow)  # the schema, the first connection: once per process
measured = coverage.Coverage(data_file=None, include=[str(package / "*")])
measured.start()
coord.run(flow)
measured.stop()
coord.close()
data = measured.get_data()
lines = {name: len(data.lines(name) or ()) for name in data.measured_files()}
json.dump({str(Path(k).relative_to(package)): v for k, v in lines.items()}, sys.stdout)
"""


def measure(tree: Path) -> dict[str, int]:
    """Lines executed per file (relative to the package) by the saga in ``_CHILD``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("SAGA_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, cwd=tree, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"the measured run failed:\n{done.stderr}")
    return dict(json.loads(done.stdout))


def installed_layout(commit: str, into: Path) -> Path:
    """``commit``'s ``saga`` package with ``adapters`` inside it, as installed."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "saga", "adapters"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "adapters").rename(into / "saga" / "adapters")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", help="measure this commit instead of the checkout")
    parser.add_argument("--files", action="store_true", help="print the lines per file too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        commit = args.commit or "HEAD"
        lines = measure(installed_layout(commit, Path(scratch)))
    label = args.commit or "this checkout (HEAD)"
    print(f"{label}: {sum(lines.values()):,} lines in {len(lines)} files")
    if args.files:
        for name, count in sorted(lines.items(), key=lambda item: -item[1]):
            print(f"  {count:5d}  {name}")


if __name__ == "__main__":
    main()
