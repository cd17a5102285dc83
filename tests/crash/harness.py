"""Starting crash-test children from the test process, and reading how they ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from saga import Coordinator, SagaStatus
from saga.testing.forkserver import Ended
from saga.testing.forkserver import ForkServer as SharedForkServer
from tests.crash.child import ROOT, Case

__all__ = ["Ended", "ForkServer", "child_env", "log_tail", "run_child", "spawn"]


def child_env(faults: str = "") -> dict[str, str]:
    """The environment of a child: the repository on its path, ``SAGA_FAULTS`` as given."""
    env = {k: v for k, v in os.environ.items() if k != "SAGA_FAULTS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if faults:
        env["SAGA_FAULTS"] = faults
    return env


def spawn(args: Sequence[str], faults: str = "", **options: Any) -> subprocess.Popen[str]:
    """``python -m tests.crash.child ARGS`` from the repository root."""
    command = [sys.executable, "-m", "tests.crash.child", *args]
    return subprocess.Popen(command, cwd=ROOT, env=child_env(faults), text=True, **options)


def run_child(case: Case, log: Path, timeout: float = 60.0) -> Ended:
    """Run ``case`` in a fresh interpreter with ``SAGA_FAULTS=case.faults``; wait for its end."""
    with log.open("a") as output:
        process = spawn(["run", case.to_json()], case.faults, stdout=output, stderr=output)
        return Ended.of(process.wait(timeout))


class ForkServer:
    """saga.testing's fork server (the one ``crash_matrix`` uses), calling ``entry(argv)``
    in each forked child: ``python -m tests.crash.child ARGV`` without the interpreter start."""

    def __init__(self, entry: str = "tests.crash.child:main") -> None:
        self.entry = entry
        self.server = SharedForkServer(cwd=ROOT, env=child_env())

    def run(self, case: Case, log: Path, kill_after: float | None = None) -> Ended:
        """Run ``case`` in a forked process with ``SAGA_FAULTS=case.faults``."""
        return self.call(["run", case.to_json()], log, case.faults, kill_after)

    def call(
        self, argv: list[str], log: Path, faults: str = "", kill_after: float | None = None
    ) -> Ended:
        """``python -m tests.crash.child ARGV`` in a forked process; SIGKILLed after
        ``kill_after`` seconds if it is still running then."""
        return self.server.call(self.entry, argv, log, faults, kill_after=kill_after)

    def close(self) -> None:
        self.server.close()


def wait_until_claimable(coord: Coordinator, timeout: float = 30.0) -> None:
    """Poll (database clock) until no unfinished saga holds a live lease."""
    deadline = time.monotonic() + timeout
    active = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)
    while len(coord.list(status=active, limit=1000)) != len(coord.list(stuck=True, limit=1000)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"leases still live after {timeout:g}s")
        time.sleep(0.02)


def log_tail(log: Path, lines: int = 40) -> str:
    """The end of a child's output, for assertion messages."""
    if not log.exists():
        return "(no output)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) or "(no output)"
