"""A fork server: one process that imports saga once, then forks a child per request.

Crash tests start hundreds of processes that die with SIGKILL. Starting a
fresh interpreter for each costs ~0.5 s of imports (SQLAlchemy, the drivers);
forking a process that already has them costs milliseconds, and the child is
still a real process, killed by a real signal. ``saga.testing.crash_matrix``
and saga's own crash suite (tests/crash) both use this one implementation.

The protocol is one JSON line per request on the server's stdin and one JSON
line per reply on its stdout:

* ``{"entry": "module:function", "args": ..., "faults": SPEC, "log": PATH,
  "sys_path": [...], "kill_after": S, "freeze": false}``: fork; in the child
  set ``sys.path``, arm ``SAGA_FAULTS=SPEC`` (SIGSTOP instead of SIGKILL when
  ``freeze``), send its output to ``log`` and call ``function(args)``. The
  reply says how it ended (``{"signal": ..., "code": ...}``), or, when
  ``freeze`` and it stopped itself, ``{"stopped": PID}``;
* ``{"resume": PID}``: continue that stopped child, wait for its end, reply;
* ``{"import": [MODULE, ...], "sys_path": [...]}``: import those modules in the
  server itself, so that every later child has them already (a saga's module
  and what it imports); replies ``{"code": 0}``, or 1 and the ``error``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from saga._internal import faults

PRELOADED = (
    "saga.adapters.sql.sqlite",
    "saga.adapters.sql.postgres",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
)
"""Imported once by the server, not once per child."""


@dataclasses.dataclass(frozen=True, slots=True)
class Ended:
    """How a child ended: killed by ``signal``, exited with ``code``, or ``stopped`` (a pid)."""

    signal: int | None
    code: int | None
    stopped: int | None = None

    @property
    def killed(self) -> bool:
        """Whether SIGKILL ended it (a fault point was reached)."""
        return self.signal == signal.SIGKILL

    @classmethod
    def of(cls, returncode: int) -> Ended:
        """From a ``subprocess`` return code (negative: the signal)."""
        return cls(-returncode, None) if returncode < 0 else cls(None, returncode)

    def __str__(self) -> str:
        if self.stopped is not None:
            return f"stopped (pid {self.stopped})"
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exited {self.code}"


class ForkServer:
    """The client side: starts ``python -m saga.testing.serve`` and sends it requests."""

    def __init__(
        self,
        preload: Sequence[str] = (),
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        command = [sys.executable, "-m", "saga.testing.serve", *preload]
        environment = dict(os.environ if env is None else env)
        environment.pop("SAGA_FAULTS", None)  # the server itself must never crash
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=environment,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def call(
        self,
        entry: str,
        args: Any,
        log: Path,
        faults: str = "",
        *,
        kill_after: float | None = None,
        freeze: bool = False,
    ) -> Ended:
        """Run ``entry(args)`` in a forked child with ``SAGA_FAULTS=faults``; how it ended."""
        request = {
            "entry": entry,
            "args": args,
            "faults": faults,
            "log": str(log),
            "sys_path": list(sys.path),
            "kill_after": kill_after,
            "freeze": freeze,
        }
        return self._ask(request)

    def resume(self, pid: int) -> Ended:
        """Continue a child that stopped itself (``freeze``); wait for its end."""
        return self._ask({"resume": pid})

    def preload(self, modules: Sequence[str]) -> bool:
        """Import ``modules`` in the server (with this process's ``sys.path``): children
        then start with them imported. Whether that worked (if not, children import them
        themselves and report the error)."""
        return self._ask({"import": list(modules), "sys_path": list(sys.path)}).code == 0

    def _ask(self, request: dict[str, Any]) -> Ended:
        stdin, stdout = self._pipes()
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        reply = stdout.readline()
        if not reply:
            raise RuntimeError(f"the fork server died (exit {self.process.poll()})")
        answer = json.loads(reply)
        return Ended(answer.get("signal"), answer.get("code"), answer.get("stopped"))

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        return self.process.stdin, self.process.stdout

    def close(self) -> None:
        """Stop the server (it exits when its stdin closes)."""
        stdin, stdout = self._pipes()
        stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        stdout.close()


class ForkPool:
    """Up to ``size`` fork servers, started when first needed, each lent to one caller at a
    time: crash cases spend most of their time waiting for a lease to expire, so a few run
    at once even on two cores."""

    def __init__(self, size: int = 4, preload: Sequence[str] = ()) -> None:
        self.size = max(1, size)
        self.preload = tuple(preload)
        self._idle: queue.SimpleQueue[ForkServer] = queue.SimpleQueue()
        self._all: list[ForkServer] = []
        self._loaded: dict[int, set[str]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def server(self, modules: Sequence[str] = ()) -> Iterator[ForkServer]:
        """A server for this caller alone until the block ends, with ``modules`` imported."""
        with self._lock:
            if self._idle.empty() and len(self._all) < self.size:
                self._all.append(ForkServer(self.preload))
                self._idle.put(self._all[-1])
        lent = self._idle.get()
        try:
            missing = [m for m in modules if m not in self._loaded.setdefault(id(lent), set())]
            if missing and lent.preload(missing):
                self._loaded[id(lent)].update(missing)
            yield lent
        finally:
            self._idle.put(lent)

    def close(self) -> None:
        """Stop every server started."""
        for server in self._all:
            server.close()
        self._all.clear()


# -- the server side ------------------------------------------------------------------------------


def serve(preload: Sequence[str]) -> None:
    """Answer requests on stdin until it closes (see the module docstring)."""
    for module in (*PRELOADED, *preload):
        importlib.import_module(module)
    for line in sys.stdin:
        if line.strip():
            reply = _handle(json.loads(line))
            print(json.dumps(reply), flush=True)


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    if "import" in request:
        return _import(request["import"], request["sys_path"])
    if "resume" in request:
        pid = int(request["resume"])
        os.kill(pid, signal.SIGCONT)
        return _ending(os.waitpid(pid, 0)[1])
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _forked(request)
    if request.get("freeze"):
        status = os.waitpid(pid, os.WUNTRACED)[1]
        if os.WIFSTOPPED(status):
            return {"stopped": pid}
        return _ending(status)
    return _ending(_wait(pid, request.get("kill_after")))


def _import(modules: list[str], path: list[str]) -> dict[str, Any]:
    sys.path[:] = path
    try:
        for module in modules:
            importlib.import_module(module)
    except BaseException as error:  # noqa: BLE001 (the children report it, with a traceback)
        return {"code": 1, "error": f"{type(error).__name__}: {error}"}
    return {"code": 0}


def _ending(status: int) -> dict[str, Any]:
    return {
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
    }


def _wait(pid: int, kill_after: float | None) -> int:
    """Wait for ``pid``; SIGKILL it first if it is still running after ``kill_after`` s."""
    if kill_after is not None:
        deadline = time.monotonic() + kill_after
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.001)
        os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def _forked(request: dict[str, Any]) -> NoReturn:
    code = 1
    try:
        output = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(output, 1)
        os.dup2(output, 2)
        sys.stdin.close()  # the server's requests are not the child's to read
        sys.path[:] = request["sys_path"]
        spec = request["faults"]
        os.environ["SAGA_FAULTS"] = spec
        faults.disarm()
        faults.arm(spec, signal.SIGSTOP if request.get("freeze") else signal.SIGKILL)
        module, _, name = request["entry"].partition(":")
        getattr(importlib.import_module(module), name)(request["args"])
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
