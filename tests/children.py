"""Child processes for the crash, fault, transactional and async suites: one harness.

The parent side starts children and reads how they ended:

* :class:`ForkServer`: saga.testing's fork server (the one ``crash_matrix``
  uses), started once per run from the repository root; each call forks a
  real process that a fault point (``SAGA_FAULTS``) kills with a real
  SIGKILL, without paying the ~0.5 s import of SQLAlchemy per case.
  :meth:`ForkServer.using` points the same server at another child's entry;
* :func:`spawn`: ``python -m MODULE ARGS`` in a fresh interpreter, for the
  children that must start cold or run side by side;
* :func:`log_tail`, :func:`wait_until_claimable`: reading a child's output
  and waiting for a dead child's leases to run out.

The child side holds what every child does the same way, so that a child
module keeps only its scenario: :class:`CommandLine` (``COMMAND URL
[OPTIONS]``, one function per command), :func:`recoverer`,
:func:`recover_until_settled`, the ``ready``/``--go`` handshake
(:func:`get_ready`) and :func:`report`, one JSON line on stdout that the
parent reads back. A child that raises exits 1 with its traceback in its log
(the fork server, or the interpreter, does that); a fault point ends it with
SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from saga import Coordinator, RecoveryOutcome, RetryPolicy, SagaStatus
from saga._internal.policy import DEFAULT_COMPENSATION_RETRY
from saga.testing.forkserver import Ended
from saga.testing.forkserver import ForkServer as SharedForkServer
from saga.testing.runner import settle

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: the children's working directory and ``PYTHONPATH``."""

CASES = "tests.crash.child"
"""The child that runs a crash ``Case`` (``run CASE_JSON``) or recovers (``recover URL``):
tests/crash's; the fault and async suites run their cases through it too."""

RECOVERY_LEASE_TTL = 10.0
"""Recoverers' lease (s): long, so that a slow recoverer never loses a saga to another."""

_ACTIVE = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)


class Runnable(Protocol):
    """A case a child can run: its JSON and where its process is to die."""

    @property
    def faults(self) -> str: ...

    def to_json(self) -> str: ...


# -- the parent side --------------------------------------------------------------------------


def child_env(faults: str = "") -> dict[str, str]:
    """The environment of a child: the repository on its path, ``SAGA_FAULTS`` as given."""
    env = {k: v for k, v in os.environ.items() if k != "SAGA_FAULTS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if faults:
        env["SAGA_FAULTS"] = faults
    return env


def spawn(
    module: str,
    args: Sequence[str],
    faults: str = "",
    env: dict[str, str] | None = None,
    **options: Any,
) -> subprocess.Popen[str]:
    """``python -m MODULE ARGS`` from the repository root (``env`` added to the child's)."""
    command = [sys.executable, "-m", module, *args]
    environment = {**child_env(faults), **(env or {})}
    return subprocess.Popen(command, cwd=ROOT, env=environment, text=True, **options)


def run_child(case: Runnable, log: Path, timeout: float = 60.0) -> Ended:
    """Run ``case`` in a fresh interpreter with ``SAGA_FAULTS=case.faults``; wait for its end."""
    with log.open("a") as output:
        argv = ["run", case.to_json()]
        process = spawn(CASES, argv, case.faults, stdout=output, stderr=output)
        return Ended.of(process.wait(timeout))


class ForkServer:
    """saga.testing's fork server from the repository root, calling ``entry(args)`` in each
    forked child (by default the crash child's command line: ``python -m tests.crash.child
    ARGV`` without the interpreter start)."""

    def __init__(self, entry: str = f"{CASES}:main", server: SharedForkServer | None = None):
        self.entry = entry
        self.server = server if server is not None else SharedForkServer(cwd=ROOT, env=child_env())

    def using(self, entry: str) -> ForkServer:
        """The same server (the same process), calling ``entry`` in its children."""
        return ForkServer(entry, self.server)

    def run(self, case: Runnable, log: Path, kill_after: float | None = None) -> Ended:
        """Run ``case`` in a forked process with ``SAGA_FAULTS=case.faults``."""
        return self.call(["run", case.to_json()], log, case.faults, kill_after)

    def call(
        self, args: Any, log: Path, faults: str = "", kill_after: float | None = None
    ) -> Ended:
        """``entry(args)`` in a forked process (its output appended to ``log``); SIGKILLed
        after ``kill_after`` seconds if it is still running then."""
        return self.server.call(self.entry, args, log, faults, kill_after=kill_after)

    def close(self) -> None:
        self.server.close()


def wait_until_claimable(coord: Coordinator, timeout: float = 30.0) -> None:
    """Poll (database clock) until no unfinished saga holds a live lease."""
    deadline = time.monotonic() + timeout
    while len(coord.list(status=_ACTIVE, limit=1000)) != len(coord.list(stuck=True, limit=1000)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"leases still live after {timeout:g}s")
        time.sleep(0.02)


def stopped(process: subprocess.Popen[str]) -> bool:
    """Whether the process is stopped (SIGSTOP): state ``T`` in /proc."""
    stat = Path(f"/proc/{process.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def wait_until_stopped(process: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Block until the process stopped itself (SIGSTOP), or fail if it exited first."""
    deadline = time.monotonic() + timeout
    while not stopped(process):
        if process.poll() is not None:
            raise AssertionError(f"the child exited ({process.returncode}) instead of stopping")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the child did not stop within {timeout:g}s")
        time.sleep(0.01)


def log_tail(log: Path, lines: int = 40) -> str:
    """The end of a child's output, for assertion messages."""
    if not log.exists():
        return "(no output)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) or "(no output)"


# -- the child side -----------------------------------------------------------------------------

Argument = tuple[str, dict[str, Any]]


def arg(name: str, **options: Any) -> Argument:
    """One argument of a command (``argparse``'s ``add_argument(name, **options)``)."""
    return name, options


class CommandLine:
    """A child's command line, ``python -m MODULE COMMAND [ARGS]``: each command is a
    function called with its parsed arguments as keyword arguments."""

    def __init__(self, prog: str) -> None:
        self.parser = argparse.ArgumentParser(prog=prog)
        self._commands = self.parser.add_subparsers(dest="command", required=True)

    def add(self, name: str, run: Callable[..., None], *arguments: Argument) -> None:
        """Command ``name`` calls ``run(**arguments)``."""
        command = self._commands.add_parser(name)
        for argument, options in arguments:
            command.add_argument(argument, **options)
        command.set_defaults(run=run)

    def main(self, argv: Sequence[str] | None = None) -> None:
        """Parse ``argv`` (default: the process's) and run its command."""
        options = vars(self.parser.parse_args(argv))
        del options["command"]
        options.pop("run")(**options)


def recoverer(
    url: str,
    trusted: Sequence[str],
    lease_ttl: float = RECOVERY_LEASE_TTL,
    compensation_retry: RetryPolicy = DEFAULT_COMPENSATION_RETRY,
) -> Coordinator:
    """A recovering coordinator that may compensate the context-manager sagas of ``trusted``
    (with ``compensation_retry``, as the application that ran them does)."""
    return Coordinator(
        url,
        lease_ttl=lease_ttl,
        trusted_modules=list(trusted),
        compensation_retry=compensation_retry,
    )


def recover_until_settled(coord: Coordinator, timeout: float = 60.0) -> list[RecoveryOutcome]:
    """``coord.recover()`` until no saga is running or compensating (leases expire
    meanwhile); every outcome of every pass."""
    outcomes: list[RecoveryOutcome] = []
    settle(lambda: outcomes.extend(coord.recover().outcomes), coord, timeout)
    return outcomes


def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    """Block until ``condition()`` holds (another thread or process makes it so)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the condition did not hold within {timeout:g}s")
        time.sleep(0.005)


def wait_for(path: Path, timeout: float) -> None:
    """Block until ``path`` exists (another process creates it)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def get_ready(coord: Coordinator, go: str | None, timeout: float) -> None:
    """Make the schema; with ``go``, print ``ready`` and wait for that file, so that the
    parent can start several children at once."""
    coord.create_schema()
    if go is not None:
        print("ready", flush=True)
        wait_for(Path(go), timeout)


def report(**fields: Any) -> None:
    """Tell the parent how this child ended: one JSON line on stdout."""
    print(json.dumps(fields), flush=True)


def report_outcomes(owner: str, outcomes: Iterable[RecoveryOutcome]) -> None:
    """A recoverer's report: its owner id, ``[saga_id, status, error]`` per outcome, and
    the sagas whose lease it lost."""
    done = list(outcomes)
    claimed = [[o.saga_id, None if o.status is None else o.status.value, o.error] for o in done]
    report(owner=owner, outcomes=claimed, lost=[o.saga_id for o in done if o.lost])
