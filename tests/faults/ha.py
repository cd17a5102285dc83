"""What the failover-manager and restart-chaos tests share: ``saga worker`` processes,
the connection errors a store met, waiting until every saga has ended.

Each wait is on an answer (rows, a count), bounded by a limit that only guards
against a hang; figures are counted, never asserted.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from saga import Coordinator, SagaStatus
from saga._internal.errors import StorageUnavailableError
from tests.children import ROOT, child_env
from tests.faults import sagas
from tests.faults.workload import Runners

WORKER = [str(Path(sys.executable).parent / "saga")]
"""The installed admin command, next to this interpreter."""


@contextlib.contextmanager
def counting_unavailable() -> Iterator[list[str]]:
    """Every ``StorageUnavailableError`` made in this process meanwhile (a connection
    error a store met, and retried), its first line kept."""
    seen: list[str] = []
    original = StorageUnavailableError.__init__

    def counted(self: StorageUnavailableError, *args: Any) -> None:
        seen.append(str(args[0]).splitlines()[0] if args else "")
        original(self, *args)

    StorageUnavailableError.__init__ = counted  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        StorageUnavailableError.__init__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def workers(url: str, where: Path, count: int = 2) -> Iterator[list[Path]]:
    """``count`` ``saga worker`` processes on ``url``; their logs. SIGTERM at the end,
    and each must exit 0."""
    logs = [where / f"worker-{n}.log" for n in range(count)]
    command = [*WORKER, "--db", url, "--app", sagas.__name__, "worker"]
    command += ["--interval", "0.2s", "--lease-ttl", "5s", "--concurrency", "4"]
    processes = []
    for log in logs:
        with log.open("w") as output:
            processes.append(
                subprocess.Popen(command, cwd=ROOT, env=child_env(), stdout=output, stderr=output)
            )
    try:
        yield logs
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        codes = [process.wait(60) for process in processes]
        assert codes == [0] * count, f"saga workers exited {codes}"


def unfinished(coord: Coordinator) -> int:
    active = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)
    return sum(len(coord.list(status=status, limit=500)) for status in active)


def wait_until(condition: Callable[[], bool], what: str, limit: float) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened within {limit:g}s: {what}"
        time.sleep(0.05)


def worker_errors(logs: list[Path]) -> int:
    wanted = (
        "database unavailable",
        "refused the worker's statement",
        "refused the worker's connection",
        "not recovered",
        "could not tell",
    )
    return sum(
        1 for log in logs for line in log.read_text().splitlines() if any(w in line for w in wanted)
    )


def wait_for_more(runners: Runners, more: int, limit: float = 120.0) -> None:
    """Until ``more`` sagas more than now have ended in ``runners``."""
    wanted = runners.ended + more
    wait_until(lambda: runners.ended >= wanted, f"{wanted} sagas ended", limit)
