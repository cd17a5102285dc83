"""DBOS Transact, the peer: each workload as a ``@DBOS.workflow`` calling ``@DBOS.step`` functions.

DBOS is a process-wide singleton: one ``DbosSystem`` may be open at a time.
Importing this module registers the workflows, so import it only when DBOS
is installed (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import multiprocessing.queues
import time
from collections.abc import Callable

import psycopg
from dbos import DBOS, DBOSConfig, SetWorkflowID

from benchmarks.common import BenchmarkError, StepFailure, Workload, libpq_url


@DBOS.step()
def noop_step() -> None:
    return None


@DBOS.step()
def undo_step() -> None:
    return None


@DBOS.step()
def failing_step() -> None:
    raise StepFailure("this step fails on purpose")


@DBOS.workflow()
def chain(steps: int) -> int:
    """``steps`` no-op steps one after another."""
    for _ in range(steps):
        noop_step()
    return steps


@DBOS.workflow()
def chain_with_compensations(steps: int, fail_at: int) -> None:
    """The saga pattern by hand: on failure, undo the steps done so far, newest first."""
    done = 0
    try:
        for position in range(1, steps + 1):
            if position == fail_at:
                failing_step()
            else:
                noop_step()
                done += 1
    except StepFailure:
        for _ in range(done):
            undo_step()
        raise


def config(url: str) -> DBOSConfig:
    """DBOS with its system database at ``url`` (a dedicated database or SQLite file)."""
    return {"name": "saga-bench", "system_database_url": url, "log_level": "WARNING"}


class DbosSystem:
    """DBOS launched in this process on its own system database."""

    name = "dbos"

    def __init__(self, url: str, backend: str) -> None:
        self.backend = backend
        DBOS(config=config(url))
        try:
            DBOS.launch()
        except BaseException:
            DBOS.destroy()
            raise

    def caller(self, workload: Workload) -> Callable[[], None]:
        steps, fail_at = workload.steps, workload.fail_at
        if fail_at is None:

            def complete() -> None:
                if chain(steps) != steps:
                    raise BenchmarkError("the DBOS workflow returned a wrong result")

            return complete

        def compensate() -> None:
            try:
                chain_with_compensations(steps, fail_at)
            except StepFailure:
                return
            raise BenchmarkError("the failing DBOS workflow completed")

        return compensate

    def close(self) -> None:
        DBOS.destroy()


def chain_child(
    url: str,
    steps: int,
    workflow_id: str,
    channel: multiprocessing.queues.Queue[tuple[str, object]],
) -> None:
    """In a child process: one workflow of ``steps`` sequential steps, timed."""
    try:
        began = time.perf_counter()
        system = DbosSystem(url, "postgresql")
        try:
            channel.put(("ready", time.perf_counter() - began))
            started = time.perf_counter()
            with SetWorkflowID(workflow_id):
                chain(steps)
            channel.put(("done", time.perf_counter() - started))
        finally:
            system.close()
    except Exception as error:  # reported to the parent, which keeps going
        channel.put(("error", f"{type(error).__name__}: {error}"))


def steps_done(url: str, workflow_id: str) -> int:
    """How many steps of workflow ``workflow_id`` DBOS has recorded."""
    with psycopg.connect(libpq_url(url)) as connection:
        row = connection.execute(
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
            (workflow_id,),
        ).fetchone()
    return int(row[0]) if row else 0
