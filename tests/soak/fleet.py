"""The soak's processes: started, SIGKILLed, restarted, and stopped with SIGTERM.

A :class:`Fleet` owns a few named long-running processes (the driver and the
``saga worker`` processes). :meth:`Fleet.kill` SIGKILLs one and starts it
again at once; a reaper thread restarts any member that died by itself (a
crash-looping step SIGKILLs the process that runs it) and records how it
ended. :meth:`Fleet.stop` asks a member to finish with SIGTERM (once it says
it is ready for one) and returns its exit code; a stopped member is not
restarted.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.children import ROOT, child_env


@dataclasses.dataclass
class Member:
    """One named process and its successive incarnations."""

    name: str
    command: list[str]
    log: Path
    ready: str
    """What the process writes once SIGTERM would stop it cleanly (its handler is in place)."""
    process: subprocess.Popen[bytes] | None = None
    incarnations: int = 0
    stopping: bool = False

    def start(self) -> None:
        self.incarnations += 1
        with self.log.open("ab") as output:
            output.write(f"--- {self.name} incarnation {self.incarnations}\n".encode())
            output.flush()
            # Named in pg_stat_activity, to tell whose connections are whose.
            env = {**child_env(), "PGAPPNAME": f"soak-{self.name}-{self.incarnations}"}
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, env=env, stdout=output, stderr=output
            )

    def is_ready(self) -> bool:
        """Whether the current incarnation has said it is ready."""
        header = f"--- {self.name} incarnation {self.incarnations}\n".encode()
        return self.ready.encode() in self.log.read_bytes().rpartition(header)[2]

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


@dataclasses.dataclass(frozen=True)
class Death:
    """A member's process that ended without being asked: by whom, how, when."""

    at: float
    name: str
    pid: int
    returncode: int
    killed_by_us: bool


class Fleet:
    """Named processes kept alive until stopped."""

    def __init__(self, log: Callable[[str], None], started_at: float) -> None:
        self.members: dict[str, Member] = {}
        self.deaths: list[Death] = []
        self._log = log
        self._t0 = started_at
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="reaper", daemon=True)

    def add(self, name: str, command: Sequence[str], log: Path, ready: str) -> None:
        self.members[name] = Member(name, list(command), log, ready)

    def start(self) -> None:
        with self._lock:
            for member in self.members.values():
                member.start()
        self._reaper.start()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def kill(self, name: str) -> int:
        """SIGKILL ``name``'s current process, wait for it, start it again; its pid."""
        with self._lock:
            member = self.members[name]
            assert member.process is not None
            assert not member.stopping
            pid = member.pid
            member.process.send_signal(signal.SIGKILL)
            code = member.process.wait(30)
            self.deaths.append(Death(self.now(), name, pid, code, killed_by_us=True))
            member.start()
            return pid

    def _reap_loop(self) -> None:
        while not self._closing.wait(0.05):
            with self._lock:
                for member in self.members.values():
                    process = member.process
                    if member.stopping or process is None or process.poll() is None:
                        continue
                    death = Death(self.now(), member.name, process.pid, process.returncode, False)
                    self.deaths.append(death)
                    self._log(
                        f"{death.at:7.2f}s  {member.name} pid {death.pid} ended by itself "
                        f"(returncode {death.returncode}); restarting"
                    )
                    member.start()

    def stop(self, name: str, timeout: float) -> int | None:
        """SIGTERM ``name`` once it is ready (a process just restarted may still be
        importing) and wait up to ``timeout`` s; its exit code (None: it was still running
        and got SIGKILL)."""
        with self._lock:
            member = self.members[name]
            member.stopping = True
            process = member.process
        assert process is not None
        deadline = time.monotonic() + timeout
        while process.poll() is None and not member.is_ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return None

    def close(self) -> None:
        """Stop the reaper and SIGKILL whatever still runs (after a failure)."""
        self._closing.set()
        if self._reaper.is_alive():
            self._reaper.join(5)
        with self._lock:
            for member in self.members.values():
                member.stopping = True
                if member.process is not None and member.process.poll() is None:
                    member.process.kill()
                    member.process.wait()
