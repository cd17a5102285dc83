"""SQLite's verdict on an owner's process (adapters/sql/liveness.py), on real processes:
gone once it has exited, also while it is a zombie nobody has reaped, and when its pid
names a process started at another time; alive otherwise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from saga.adapters.sql.liveness import process_gone, process_start

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_this_process_is_alive() -> None:
    assert not process_gone(os.getpid(), process_start(os.getpid()))


def test_an_exited_and_reaped_process_is_gone() -> None:
    child = _sleeper()
    started = process_start(child.pid)
    child.kill()
    child.wait()
    assert process_gone(child.pid, started)


def test_a_killed_process_not_yet_reaped_is_gone() -> None:
    child = _sleeper()
    started = process_start(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, left a zombie
        assert process_gone(child.pid, started)
    finally:
        child.wait()


def test_a_pid_now_naming_a_process_started_at_another_time_is_gone() -> None:
    child = _sleeper()
    try:
        started = process_start(child.pid)
        assert started is not None
        assert not process_gone(child.pid, started)
        assert process_gone(child.pid, str(int(started) - 1))  # as if the pid was reused
    finally:
        child.kill()
        child.wait()
