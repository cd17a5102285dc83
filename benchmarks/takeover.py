"""Takeover after a crash: ``python -m benchmarks.takeover``.

How long a saga whose process was SIGKILLed waits before a running ``saga worker``
claims it. Each kill: an owner process (a fresh interpreter, the default 30 s lease)
starts a saga whose first step waits; once that step runs, the owner is SIGKILLed and
the time until the saga's owner is the worker (polled every 5 ms) is one figure.
Printed per backend: p50 and p99 over ``--kills`` kills (20 by default). Without
instant takeover every figure would be about the lease, 30 s. Timing lives here,
never in the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from saga import Coordinator, Saga, SagaStatus, StepContext

ROOT = Path(__file__).resolve().parents[1]
POLL = 0.005  # seconds between two looks at the saga: the figures' resolution
WORKER_INTERVAL = "0.1s"  # how often the worker looks for sagas to take

victim = Saga("takeover-bench")


@victim.step()
def wait_here(ctx: StepContext) -> str:
    if ctx.attempt == 1:  # the owner: waits to be killed; the worker's attempt goes on
        time.sleep(3600)
    return "done"


def _until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:g}s")
        time.sleep(POLL)


def _python(args: list[str], **options: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SAGA_LEASE_TTL", None)  # the default 30 s lease, for owner and worker alike
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, **options)  # type: ignore[call-overload,no-any-return]


def one_kill(url: str, reader: Coordinator) -> float:
    """Seconds from the owner's SIGKILL to the worker's claim of its saga."""
    key = uuid.uuid4().hex
    owner = _python(["-m", "benchmarks.takeover", "owner", url, key])
    try:
        _until(lambda: _running(reader, key), "the owner's step did not start")
        first = reader.get(key=key).owner
        killed = time.monotonic()
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        _until(lambda: reader.get(key=key).owner != first, "no worker took the saga")
        taken = time.monotonic() - killed
    finally:
        owner.kill()
        owner.wait()
    _until(lambda: reader.get(key=key).status is SagaStatus.COMPLETED, "the saga did not end")
    return taken


def _running(reader: Coordinator, key: str) -> bool:
    found = reader.list(name=victim.name, limit=1000)
    return any(view.key == key and view.steps for view in found)


def measure(url: str, kills: int) -> list[float]:
    """``kills`` figures on ``url``, with one ``saga worker`` running throughout."""
    command = ["-m", "saga.cli", "--db", url, "--app", "benchmarks.takeover", "worker"]
    with tempfile.TemporaryFile() as log:
        worker = _python([*command, "--interval", WORKER_INTERVAL], stderr=log)
        try:
            with Coordinator(url, log_events=False) as reader:
                reader.register(victim)
                return [one_kill(url, reader) for _ in range(kills)]
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)


def report(backend: str, figures: list[float]) -> str:
    ordered = sorted(figures)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"{backend}: {len(figures)} kills, SIGKILL to claim p50 "
        f"{statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
        f"(lease 30 s, worker --interval {WORKER_INTERVAL})"
    )


def _owner(url: str, key: str) -> None:
    with Coordinator(url) as coord:
        coord.run(victim, key=key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.takeover")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-sqlite", action="store_true")
    args, rest = parser.parse_known_args(argv)
    if rest[:1] == ["owner"]:
        _owner(rest[1], rest[2])
        return
    with tempfile.TemporaryDirectory() as folder:
        if not args.no_sqlite:
            print(report("sqlite", measure(f"sqlite:///{folder}/takeover.db", args.kills)))
    if args.postgres:
        with _database(args.postgres) as url:
            print(report("postgresql", measure(url, args.kills)))


@contextlib.contextmanager
def _database(server: str) -> Iterator[str]:
    """A database of the benchmark's own on ``server``, dropped afterwards."""
    name = f"saga_takeover_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))  # our own generated name
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
