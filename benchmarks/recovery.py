"""How fast one ``saga worker`` finishes sagas a dead process left behind, on PostgreSQL.

Not a test: it prints figures (docs/performance.md, "Recovery"). A child process runs a
3-step saga (workload 1's) and is killed with SIGKILL right after its first step's start
committed: the saga is ``running``, step 1 started and never ended, its owner dead. That
saga is copied ``--sagas`` times in SQL (each its own id, the lease expired), and then one
worker loop (``saga.admin.run_worker``, what ``saga worker`` runs) at each
``--concurrency`` finishes them all: each is claimed, its first step run again, the other
two run, the saga completed. The rate is completed sagas over the time from the worker's
start to the last completion (its own first pass included).

    python -m benchmarks.recovery [--postgres URL] [--sagas 1000] [--concurrency 1 4 8]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import psycopg
from psycopg import sql

from benchmarks.common import DEFAULT_POSTGRES, W1, dedicated_database, libpq_url
from benchmarks.saga_bench import definition
from benchmarks.scale import _columns, _copy
from saga import Coordinator, SagaStatus, admin

_CRASHING_CHILD = """
import sys
from benchmarks.common import W1
from benchmarks.saga_bench import definition
from saga import Coordinator
with Coordinator(sys.argv[1]) as coord:
    coord.run(definition(W1))
"""


def stuck_template(url: str) -> str:
    """A saga left ``running`` by a process killed after its first step's start."""
    with Coordinator(url) as coord:
        before = {view.id for view in coord.list(status=SagaStatus.RUNNING)}
    env = {**os.environ, "SAGA_FAULTS": "after_start_commit:step1"}
    # -P: the saga measured is the one on PYTHONPATH (benchmarks.ab), not the directory's.
    crash = [sys.executable, "-P", "-c", _CRASHING_CHILD, url]
    child = subprocess.run(crash, env=env, check=False)
    if child.returncode != -signal.SIGKILL:
        raise SystemExit(f"the crashing child exited {child.returncode}, not killed")
    with Coordinator(url) as coord:
        (left,) = {view.id for view in coord.list(status=SagaStatus.RUNNING)} - before
    return left


def copy_stuck(url: str, template: str, count: int) -> None:
    """``count`` - 1 more sagas like ``template`` (same name, their own ids), every lease
    expired."""
    series = sql.SQL("generate_series(2, {}) AS g").format(sql.Literal(count))
    new_id = sql.SQL("md5({} || g)::uuid::text").format(sql.Literal(template))
    with psycopg.connect(libpq_url(url)) as connection:
        expired = sql.SQL("extract(epoch from clock_timestamp()) - 300")
        where = sql.SQL("t.id = {}").format(sql.Literal(template))
        source = sql.SQL("{} CROSS JOIN saga_instances t WHERE {}").format(series, where)
        overrides = {"id": new_id, "key": sql.NULL, "lease_expires_at": expired}
        columns = _columns(connection, "saga_instances")
        connection.execute(_copy("saga_instances", columns, overrides, sql.SQL("0"), source))
        for table in ("saga_steps", "saga_events"):
            source = sql.SQL("{} CROSS JOIN {} t WHERE t.saga_id = {}").format(
                series, sql.Identifier(table), sql.Literal(template)
            )
            columns = _columns(connection, table)
            connection.execute(_copy(table, columns, {"saga_id": new_id}, sql.SQL("0"), source))
        connection.execute(
            "UPDATE saga_instances SET lease_expires_at = extract(epoch from clock_timestamp())"
            " - 300 WHERE id = %s",
            (template,),
        )
        connection.commit()
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")


def completed(connection: psycopg.Connection[tuple[int]]) -> int:
    row = connection.execute(
        "SELECT count(*) FROM saga_instances WHERE status = 'completed'"
    ).fetchone()
    return int(row[0]) if row else 0


def worker_rate(url: str, sagas: int, concurrency: int) -> tuple[float, float]:
    """(sagas/s, client CPU s per saga) of one worker loop finishing ``sagas`` stuck
    sagas at ``concurrency``."""
    stop = threading.Event()
    with Coordinator(url) as coord:
        coord.register(definition(W1))
        loop = threading.Thread(
            target=admin.run_worker,
            args=(coord, stop),
            kwargs={"interval": 0.05, "concurrency": concurrency, "log": lambda _line: None},
        )
        # One connection for the polling, opened before the clock starts: a connection
        # a poll would fork a server process every 20 ms beside the worker.
        with psycopg.connect(libpq_url(url), autocommit=True) as polling:
            done_before = completed(polling)  # an earlier measurement's, in a shared database
            began, spent = time.perf_counter(), _cpu()
            loop.start()
            try:
                while completed(polling) < done_before + sagas:
                    time.sleep(0.02)
                return sagas / (time.perf_counter() - began), (_cpu() - spent) / sagas
            finally:
                stop.set()
                loop.join()


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--sagas", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    for concurrency in args.concurrency:
        with dedicated_database(args.postgres, "recovery") as url:
            copy_stuck(url, stuck_template(url), args.sagas)
            rate, cpu = worker_rate(url, args.sagas, concurrency)
        print(
            f"one worker, --concurrency {concurrency}: finished {args.sagas:,} stuck 3-step"
            f" sagas at {rate:,.0f} sagas/s, {cpu * 1000:.2f} ms of client CPU each"
        )


if __name__ == "__main__":
    main()
