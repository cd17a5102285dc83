"""A saga whose ``charge`` fails its first attempt at once and waits 10 min for the next,
importable as ``tests.cli.wait_steps`` (``--app``); ``python -m tests.cli.wait_steps URL
KEY`` runs it in a process of its own, which a test kills during the wait.

:func:`waiting` starts that process and returns once the failed attempt is in the
history (the event, not a sleep, is the signal); on leaving, the process is SIGKILLed
and the saga recovered by the real ``saga recover``, which makes the next attempt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

from saga import Coordinator, RetryPolicy, Saga, StepContext
from saga._internal.ports import EventRecord

BACKOFF = 600.0
"""The wait after the failed attempt: far longer than the attempt, which returns at once,
and than the test's look at the saga meanwhile (a few ``saga`` commands on a busy
machine), which ends by killing the process: nothing waits it out."""

WAIT = Saga("cli-retry-wait")


@WAIT.step()
def reserve(ctx: StepContext) -> str:
    return "R-1"


@WAIT.step(
    retry=RetryPolicy(
        max_attempts=3,
        initial_delay=BACKOFF,
        max_delay=BACKOFF,
        jitter=0,
        retry_on=(ConnectionError,),
    )
)
def charge(ctx: StepContext) -> str:
    if ctx.attempt == 1:
        raise ConnectionError("card network reset")
    return "C-1"


def failure_event(coord: Coordinator, saga_id: str) -> EventRecord | None:
    return next((e for e in coord.history(saga_id) if e.kind == "attempt_failed"), None)


@contextlib.contextmanager
def waiting(url: str, key: str, timeout: float = 60.0) -> Iterator[str]:
    """The id of a ``cli-retry-wait`` saga whose process is in the wait after ``charge``
    failed; the process is killed when the block ends."""
    from tests.cli.conftest import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SAGA_FAULTS", None)
    with contextlib.closing(Coordinator(url)) as coord:  # the schema, before the child
        child = subprocess.Popen([sys.executable, "-m", "tests.cli.wait_steps", url, key], env=env)
        try:
            yield _failed(coord, key, child, timeout)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(30)


def _failed(coord: Coordinator, key: str, child: subprocess.Popen[bytes], timeout: float) -> str:
    """Poll the database until the saga's failed attempt is recorded (or fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise AssertionError(f"the saga's process exited with {child.returncode}")
        found = coord.list(key=key)
        if found and failure_event(coord, found[0].id) is not None:
            return found[0].id
        time.sleep(0.05)
    raise AssertionError(f"no attempt_failed recorded within {timeout:g}s")


def main(url: str, key: str) -> None:
    Coordinator(url, lease_ttl=5.0).run(WAIT, data={}, key=key)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
