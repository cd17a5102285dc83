"""Where a 3-step saga's time goes, on PostgreSQL: client CPU by layer, server cost.

Not a test: it prints figures (docs/performance.md, "Where the time goes").

* **Client CPU by layer**: workload 1 (3 no-op steps, one caller) under cProfile, each
  function's own time summed by where its code lives: saga's engine, the rest of
  saga, its SQL adapters, psycopg, SQLAlchemy, the standard library. Time spent
  waiting for the server (the driver's wait on its socket) is reported apart.
* **Client CPU against the floor**: ``resource.getrusage`` of this process over ``n``
  sagas, and over the raw-psycopg floor doing the same n+1 single-row commits, in
  ``--turns`` alternating turns of ``n / turns`` each (the machine's speed drifts: each
  turn's ratio compares two measurements a moment apart); the median of the turns.
* **Server cost**: WAL bytes (``pg_current_wal_lsn()`` deltas) per saga, saga's and
  the floor's, and the table + index bytes a finished saga occupies.

    python -m benchmarks.where_time_goes [--postgres URL] [--n 2000] [--turns 5]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import statistics
from collections.abc import Callable
from pathlib import Path

import psycopg
import saga.adapters

import saga
from benchmarks.common import DEFAULT_POSTGRES, W1, dedicated_database, libpq_url, measure
from benchmarks.floor_bench import FloorSystem
from benchmarks.saga_bench import SagaSystem

PACKAGE = str(Path(saga.__file__).resolve().parent)
ADAPTERS = str(Path(saga.adapters.__file__).resolve().parent)  # adapters/ in a checkout
LAYERS = (
    ("saga engine", f"{PACKAGE}/_internal/engine/"),
    ("saga SQL adapters", f"{ADAPTERS}/"),
    ("saga (rest)", f"{PACKAGE}/"),
    ("psycopg", "/psycopg/"),
    ("SQLAlchemy", "/sqlalchemy/"),
)
WAITING = ("wait", "select", "poll", "wait_conn")


def cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def layer_of(filename: str) -> str:
    for name, marker in LAYERS:
        if marker in filename:
            return name
    return "Python and the rest"


Profile = tuple[dict[str, float], float, list[tuple[float, str]]]
"""Own time per layer and waiting (seconds per saga), and the top functions outside saga."""


def by_layer(call: Callable[[], None], n: int) -> Profile:
    """Own time per layer (seconds per saga), the time spent waiting on the server, and
    the functions outside saga and the drivers that take the most."""
    profiler = cProfile.Profile()
    profiler.enable()
    measure(call, n)
    profiler.disable()
    layers: dict[str, float] = {}
    waiting = 0.0
    rest: list[tuple[float, str]] = []
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, line, function), (_cc, _nc, own, _cum, _callers) in stats.items():
        if function in WAITING and ("psycopg" in filename or filename == "~"):
            waiting += own
            continue
        layer = layer_of(filename)
        layers[layer] = layers.get(layer, 0.0) + own
        if layer == "Python and the rest":
            rest.append((own / n, f"{Path(filename).name}:{line}({function})"))
    return {k: v / n for k, v in layers.items()}, waiting / n, sorted(rest, reverse=True)[:8]


def cpu_per_saga(call: Callable[[], None], n: int) -> float:
    spent = cpu()
    measure(call, n)
    return (cpu() - spent) / n


def wal_per_saga(url: str, call: Callable[[], None], n: int) -> float:
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        before = connection.execute("SELECT pg_current_wal_lsn()").fetchone()
        measure(call, n)
        row = connection.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (before[0] if before else None,)
        ).fetchone()
    return float(row[0]) / n if row else 0.0


def wal_by_relation(url: str, call: Callable[[], None], n: int) -> list[tuple[str, float]]:
    """WAL bytes per saga by the table or index each record wrote (its first block;
    ``pg_walinspect``), full-page images included; "commit" for the commit records."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        start = connection.execute("SELECT pg_current_wal_lsn()").fetchone()
        measure(call, n)
        rows = connection.execute(
            "SELECT coalesce(c.relname, CASE WHEN w.resource_manager = 'Transaction'"
            " THEN 'commit' ELSE w.resource_manager END), sum(w.record_length)"
            " FROM pg_get_wal_records_info(%s, pg_current_wal_lsn()) w"
            " LEFT JOIN pg_class c ON c.relfilenode ="
            "  nullif(substring(w.block_ref from 'rel [0-9]+/[0-9]+/([0-9]+)'), '')::oid"
            " GROUP BY 1 ORDER BY 2 DESC",
            (start[0] if start else None,),
        ).fetchall()
    return [(str(name), float(size) / n) for name, size in rows]


def bytes_per_saga(url: str) -> tuple[float, int]:
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")
        row = connection.execute(
            "SELECT sum(pg_total_relation_size(c.oid)),"
            " (SELECT count(*) FROM saga_instances)"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'r' AND c.relname LIKE 'saga\\_%' AND n.nspname = current_schema()"
        ).fetchone()
    assert row is not None
    return float(row[0]) / max(1, int(row[1])), int(row[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    with (
        dedicated_database(args.postgres, "where_saga") as saga_url,
        dedicated_database(args.postgres, "where_floor") as floor_url,
    ):
        system, floor = SagaSystem(saga_url, "postgresql"), FloorSystem(floor_url, "postgresql")
        try:
            call, floor_call = system.caller(W1), floor.caller(W1)
            measure(call, 50)  # warm: connections, prepared statements
            measure(floor_call, 50)
            layers, waiting, rest = by_layer(call, args.n // 4)
            turn = max(1, args.n // args.turns)
            spent = [
                (cpu_per_saga(call, turn), cpu_per_saga(floor_call, turn))
                for _ in range(args.turns)
            ]
            saga_wal = wal_per_saga(saga_url, call, args.n // 4)
            wal_shares = wal_by_relation(saga_url, call, args.n // 4)
            floor_wal = wal_per_saga(floor_url, floor_call, args.n // 4)
        finally:
            system.close()
            floor.close()
        table_bytes, sagas = bytes_per_saga(saga_url)
    saga_cpu = statistics.median(mine for mine, _ in spent)
    floor_cpu = statistics.median(theirs for _, theirs in spent)
    ratio = statistics.median(mine / theirs for mine, theirs in spent)
    print(
        f"client CPU per 3-step saga: saga {saga_cpu * 1e3:.3f} ms, floor (n+1 commits)"
        f" {floor_cpu * 1e3:.3f} ms: {ratio:.2f}x (median of {args.turns} alternating turns;"
        f" turns {min(m / t for m, t in spent):.2f}-{max(m / t for m, t in spent):.2f}x)"
    )
    print(
        f"WAL per saga: saga {saga_wal:,.0f} bytes, floor {floor_wal:,.0f} bytes:"
        f" {saga_wal / floor_wal:.2f}x"
    )
    print("  saga's WAL per saga by what it wrote (pg_walinspect, record lengths):")
    for name, size in wal_shares[:12]:
        print(f"    {size:7,.0f} bytes  {name}")
    print(f"tables and indexes per finished saga: {table_bytes:,.0f} bytes ({sagas:,} sagas)")
    print(
        f"under cProfile (which slows Python code), per saga: waiting on the server"
        f" {waiting * 1e3:.3f} ms; own time by layer:"
    )
    total = sum(layers.values())
    for name, seconds in sorted(layers.items(), key=lambda item: -item[1]):
        print(f"  {name:<22} {seconds * 1e3:7.3f} ms  {seconds / total:5.1%}")
    print("  of which, outside saga and the drivers:")
    for seconds, where in rest:
        print(f"    {seconds * 1e3:7.3f} ms  {where}")


if __name__ == "__main__":
    main()
