"""Starting crash-test children from the test process, and reading how they ended."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from saga import Coordinator, SagaStatus
from tests.crash.child import ROOT, Case


@dataclasses.dataclass(frozen=True, slots=True)
class Ended:
    """How a child process ended: killed by ``signal``, or exited with ``code``."""

    signal: int | None
    code: int | None

    @property
    def killed(self) -> bool:
        return self.signal == signal.SIGKILL

    @classmethod
    def of(cls, returncode: int) -> Ended:
        return cls(-returncode, None) if returncode < 0 else cls(None, returncode)


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
    """``python -m tests.crash.child serve``: forks one process per case (see child.py)."""

    def __init__(self) -> None:
        self.process = spawn(["serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, case: Case, log: Path, kill_after: float | None = None) -> Ended:
        """Run ``case`` in a forked process with ``SAGA_FAULTS=case.faults``."""
        return self.call(["run", case.to_json()], log, case.faults, kill_after)

    def call(
        self, argv: list[str], log: Path, faults: str = "", kill_after: float | None = None
    ) -> Ended:
        """``python -m tests.crash.child ARGV`` in a forked process; SIGKILLed after
        ``kill_after`` seconds if it is still running then."""
        stdin, stdout = self._pipes()
        request = {"argv": argv, "faults": faults, "log": str(log), "kill_after": kill_after}
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        reply = stdout.readline()
        if not reply:
            raise RuntimeError(f"the fork server died (exit {self.process.poll()})")
        answer = json.loads(reply)
        return Ended(answer["signal"], answer["code"])

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        return self.process.stdin, self.process.stdout

    def close(self) -> None:
        stdin, _ = self._pipes()
        stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


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
