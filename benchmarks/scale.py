"""Scale: saga's operator queries and throughput with a million finished sagas in the tables.

The tables are filled in SQL (``generate_series``) by copying one real
finished 3-step saga (its instance row, 3 step rows and its events), so the
rows have exactly the shape saga writes whatever columns the schema has
today. A few sagas are left ``running`` with an expired lease, so the stuck
scan has something to find.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import re
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, generate_latest
from psycopg import sql
from saga.adapters.sql import pg_load
from sqlalchemy import Engine, event

from benchmarks.common import W1, Result, interleaved, libpq_url, run_workload
from benchmarks.saga_bench import SagaSystem
from saga.metrics import MetricsListener

GET = "get(id)"
SCRAPE = "metrics scrape (gauges read from the store)"
_LONG_LIST = re.compile(r"\((%\(\w+\)s(?:::\w+)?)(?:, %\(\w+\)s(?:::\w+)?){3,}\)")
SPACING = 2.5  # seconds between two filled sagas' creation times (1M sagas span ~29 days)


@dataclasses.dataclass(frozen=True)
class Timed:
    """One operation, timed ``samples`` times as the caller sees it."""

    label: str
    median_ms: float
    max_ms: float
    samples: int
    rows: int


@dataclasses.dataclass
class ScaleReport:
    sagas: int
    stuck: int
    rows: dict[str, int]
    fill_seconds: float
    operations: list[Timed] = dataclasses.field(default_factory=list)
    empty_w1: list[Result] = dataclasses.field(default_factory=list)
    full_w1: list[Result] = dataclasses.field(default_factory=list)
    explains: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def operation(self, label: str) -> Timed | None:
        return next((op for op in self.operations if op.label == label), None)


# -- filling -----------------------------------------------------------------------------


def _columns(connection: psycopg.Connection[Any], table: str) -> list[tuple[str, str]]:
    """(name, type) of ``table``'s columns, without those filled by a sequence."""
    rows = connection.execute(
        "SELECT column_name, data_type, coalesce(column_default, '')"
        " FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [(name, kind) for name, kind, default in rows if not default.startswith("nextval(")]


def _copy(
    table: str,
    columns: list[tuple[str, str]],
    overrides: dict[str, sql.Composable],
    shift: sql.Composable,
    source: sql.Composable,
) -> sql.Composed:
    """INSERT INTO table SELECT template columns (times shifted, some overridden) FROM source."""
    items: list[sql.Composable] = []
    for name, kind in columns:
        column = sql.Identifier(name)
        if name in overrides:
            items.append(overrides[name])
        elif kind == "double precision":
            items.append(sql.SQL("t.{} + ({})").format(column, shift))
        else:
            items.append(sql.SQL("t.{}").format(column))
    names = sql.SQL(", ").join(sql.Identifier(name) for name, _ in columns)
    return sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
        sql.Identifier(table), names, sql.SQL(", ").join(items), source
    )


def _saga_id() -> sql.Composable:
    return sql.SQL("md5('bench-' || g)::uuid::text")


def fill(
    url: str,
    template: str,
    sagas: int,
    stuck: int,
    log: Callable[[str], None],
    chunk: int = 100_000,
) -> dict[str, int]:
    """Copy saga ``template`` ``sagas`` times as finished sagas, plus ``stuck`` stuck ones."""
    with psycopg.connect(libpq_url(url)) as connection:
        base = connection.execute("SELECT extract(epoch from clock_timestamp())").fetchone()
        assert base is not None
        now = float(base[0])
        for start in range(1, sagas + 1, chunk):
            end = min(sagas, start + chunk - 1)
            created = sql.SQL("{} - ({} - g) * {}").format(
                sql.Literal(now), sql.Literal(sagas), sql.Literal(SPACING)
            )
            status = sql.SQL(
                "CASE WHEN g % 50 = 0 THEN 'failed' WHEN g % 10 = 0 THEN 'compensated'"
                " ELSE 'completed' END"
            )
            _fill_range(connection, template, start, end, created, status, None)
            connection.commit()
            log(f"  filled {end:,} / {sagas:,} sagas")
        created = sql.SQL("{} - 900 + (g - {})").format(sql.Literal(now), sql.Literal(sagas))
        expired = sql.Literal(now - 300)
        _fill_range(
            connection, template, sagas + 1, sagas + stuck, created, sql.Literal("running"), expired
        )
        connection.commit()
        counts = {}
        for table in ("saga_instances", "saga_steps", "saga_events"):
            row = connection.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
            ).fetchone()
            counts[table] = int(row[0]) if row else 0
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute("VACUUM (ANALYZE) saga_instances, saga_steps, saga_events")
        # Write the fill's dirty pages out now, not during the measurements.
        connection.execute("CHECKPOINT")
    return counts


def _fill_range(
    connection: psycopg.Connection[Any],
    template: str,
    start: int,
    end: int,
    created: sql.Composable,
    status: sql.Composable,
    lease: sql.Composable | None,
) -> None:
    """Sagas ``start..end``: the instance rows, then their steps and events."""
    series = sql.SQL("generate_series({}, {}) AS g").format(sql.Literal(start), sql.Literal(end))
    where = sql.SQL("t.id = {}").format(sql.Literal(template))
    instance: dict[str, sql.Composable] = {
        "id": _saga_id(),
        "name": sql.SQL("t.name || '-' || (g % 8)"),
        "key": sql.NULL,
        "status": status,
        "created_at": created,
        "lease_expires_at": lease if lease is not None else sql.SQL("({}) + 30").format(created),
    }
    if lease is not None:
        instance["owner"] = sql.Literal("dead-worker")
    connection.execute(
        _copy(
            "saga_instances",
            _columns(connection, "saga_instances"),
            instance,
            sql.SQL("({}) - t.created_at").format(created),
            sql.SQL("{} CROSS JOIN saga_instances t WHERE {}").format(series, where),
        )
    )
    for table in ("saga_steps", "saga_events"):
        source = sql.SQL(
            "{} CROSS JOIN {} t JOIN saga_instances i ON i.id = t.saga_id WHERE t.saga_id = {}"
        ).format(series, sql.Identifier(table), sql.Literal(template))
        connection.execute(
            _copy(
                table,
                _columns(connection, table),
                {"saga_id": _saga_id()},
                sql.SQL("({}) - i.created_at").format(created),
                source,
            )
        )


# -- measuring ---------------------------------------------------------------------------


def timed(label: str, operation: Callable[[], int], samples: int, warmup: int = 2) -> Timed:
    """Median and max wall time of ``operation`` (which returns how many rows it saw)."""
    for _ in range(warmup):
        operation()
    durations = []
    rows = 0
    for _ in range(samples):
        started = time.perf_counter()
        rows = operation()
        durations.append(time.perf_counter() - started)
    return Timed(label, statistics.median(durations) * 1000, max(durations) * 1000, samples, rows)


@contextlib.contextmanager
def captured(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every statement ``engine`` sends while the block runs, with its parameters."""
    statements: list[tuple[str, Any]] = []

    def before(*args: Any) -> None:
        _, _, statement, parameters, _, executemany = args
        if not executemany:
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", before)


def explain(url: str, statements: list[tuple[str, Any]]) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of each statement, in a transaction rolled back."""
    parts = []
    with psycopg.connect(libpq_url(url)) as connection:
        cursor = psycopg.ClientCursor(connection)
        for statement, parameters in statements:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
            plan = "\n".join(_clipped(str(row[0])) for row in cursor.fetchall())
            parts.append(f"{_shortened(statement)}\n\n{plan}")
            connection.rollback()
    return "\n\n---\n\n".join(parts)


def _shortened(statement: str) -> str:
    """The statement on one line, a long list of bind parameters cut to its first one."""
    text = " ".join(statement.split())

    def cut(match: re.Match[str]) -> str:
        return f"({match.group(1)}, ... {match.group(0).count('%(')} parameters)"

    return _LONG_LIST.sub(cut, text)


def _clipped(line: str, width: int = 240) -> str:
    return line if len(line) <= width else line[: width - 5] + " ..."


def explained(
    url: str,
    system: SagaSystem,
    operation: Callable[[], object],
    hot: list[tuple[str, Any]] | None = None,
) -> str:
    """What ``operation`` sends through SQLAlchemy, explained; when it sends nothing there,
    the statements ``hot`` names (what PostgreSQL's hot path sends with psycopg)."""
    engine = getattr(system.coord.store, "engine", None)
    if not isinstance(engine, Engine):
        return "(the store is not a SQLAlchemy store: nothing to explain)"
    with captured(engine) as statements:
        operation()
    return explain(url, statements or hot or [])


def metrics_scrape(system: SagaSystem) -> Callable[[], int]:
    """A Prometheus scrape of ``system``'s coordinator, its gauges read from the store at
    every scrape (``every=0``); it returns how many samples the scrape held."""
    registry = CollectorRegistry()
    MetricsListener(registry).watch(system.coord, every=0.0)

    def scrape() -> int:
        text = generate_latest(registry).decode()
        return sum(1 for line in text.splitlines() if line and not line.startswith("#"))

    return scrape


def measure_operations(url: str, system: SagaSystem, report: ScaleReport, samples: int) -> None:
    """Time the operator queries, then capture and explain what each one sends."""
    coord, store = system.coord, system.coord.store
    owner, ids = coord.owner, _some_ids(url, report.sagas, samples + 2)
    pick = iter(ids)
    operations: list[tuple[str, Callable[[], object], Callable[[], int]]] = [
        (GET, lambda: coord.get(ids[-1]), lambda: int(bool(coord.get(next(pick))))),
        (
            "list(status='failed')",
            lambda: coord.list(status="failed"),
            lambda: len(coord.list(status="failed")),
        ),
        (
            "list(status='completed')",
            lambda: coord.list(status="completed"),
            lambda: len(coord.list(status="completed")),
        ),
        ("list(stuck=True)", lambda: coord.list(stuck=True), lambda: len(coord.list(stuck=True))),
        (
            "claim_expired (claims 1)",
            lambda: store.claim_expired(owner, 30.0, 1),
            lambda: len(store.claim_expired(owner, 30.0, 1)),
        ),
    ]
    hot = {GET: [(pg_load.LOAD, {"id": ids[-1]})]}
    for label, once, counted in operations:
        report.explains.append((label, explained(url, system, once, hot.get(label))))
        report.operations.append(timed(label, counted, samples, warmup=0))
    watched = SagaSystem(url, "postgresql")  # its own coordinator: the listener stays off w1
    try:
        scrape = metrics_scrape(watched)
        report.explains.append((SCRAPE, explained(url, watched, scrape)))
        report.operations.append(timed(SCRAPE, scrape, samples))
    finally:
        watched.close()
    while store.claim_expired(owner, 30.0, 100):
        pass
    idle = ("claim_expired (nothing stuck)", lambda: len(store.claim_expired(owner, 30.0, 1)))
    report.explains.append((idle[0], explained(url, system, idle[1])))
    report.operations.append(timed(*idle, samples))


def _some_ids(url: str, sagas: int, count: int) -> list[str]:
    chosen = random.sample(range(1, sagas + 1), min(count, sagas))
    with psycopg.connect(libpq_url(url)) as connection:
        rows = connection.execute(
            "SELECT md5('bench-' || g)::uuid::text FROM unnest(%s::int[]) AS g", (chosen,)
        ).fetchall()
    return [str(row[0]) for row in rows]


def run_scale(
    full_url: str,
    empty_url: str,
    *,
    sagas: int,
    samples: int,
    w1_n: int,
    repeat: int,
    log: Callable[[str], None],
) -> ScaleReport:
    """Fill ``full_url``, time the operator queries there, and workload 1 on both databases."""
    full = SagaSystem(full_url, "postgresql")
    empty = SagaSystem(empty_url, "postgresql")
    try:
        run_workload(full, W1, 5)
        template = full.coord.list(status="completed", limit=1)[0].id
        stuck = samples + 5
        started = time.perf_counter()
        rows = fill(full_url, template, sagas, stuck, log)
        report = ScaleReport(sagas, stuck, rows, time.perf_counter() - started)
        log(f"  filled in {report.fill_seconds:.0f} s: {rows}")
        measure_operations(full_url, full, report, samples)
        for rep in range(repeat):
            on_empty, on_full = interleaved([empty, full], W1, w1_n)
            report.empty_w1.append(on_empty)
            report.full_w1.append(on_full)
            log(
                f"  w1 rep {rep + 1}: empty {on_empty.sagas_per_s:.0f}/s,"
                f" {sagas:,} sagas {on_full.sagas_per_s:.0f}/s"
            )
        return report
    finally:
        full.close()
        empty.close()
