"""How long the web console takes to render the page of a 1,000-step saga.

Not a test: it prints medians. The saga is real (1,000 no-op steps run by a
coordinator, the last one failing so that 999 compensations run too, about
4,000 events), and the page is fetched through the ASGI app in-process, so
the figure covers the admin reads, the timeline layout, the SVG and the HTML.

    python -m benchmarks.web_page [--postgres URL] [--steps 1000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator

import anyio
import httpx
import psycopg
from psycopg import sql

from saga import Coordinator, RetryPolicy, Saga, SagaFailed, StepContext
from saga.web import app

ONCE = RetryPolicy(max_attempts=1)


def undo(ctx: StepContext) -> None:
    """Nothing to undo: the benchmark times the page, not the work."""


def long_saga(steps: int) -> Saga:
    saga = Saga(f"bench-web-{steps}")
    for number in range(steps):
        last = number == steps - 1

        def action(ctx: StepContext, fail: bool = last, value: int = number) -> int:  # noqa: ARG001
            if fail:
                raise ValueError("the last step fails, so that every step is compensated")
            return value

        step = saga.step(name=f"s{number:04d}", retry=ONCE)(action)
        step.compensation(undo)
    return saga


def measure(url: str, steps: int, repeat: int) -> tuple[float, float, int]:
    """Median and max milliseconds for the saga page, and its size in bytes."""
    with contextlib.closing(Coordinator(url)) as coord:
        saga = long_saga(steps)
        coord.register(saga)
        try:
            coord.run(saga, data={"bench": True})
        except SagaFailed as failure:
            saga_id = failure.saga_id
        console = app(coord)
        times, size = anyio.run(_fetch, console, f"/saga/{saga_id}", repeat)
    return statistics.median(times), max(times), size


async def _fetch(console: object, path: str, repeat: int) -> tuple[list[float], int]:
    transport = httpx.ASGITransport(app=console)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        await client.get(path)  # warm up: imports, first connection
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            response = await client.get(path)
            times.append((time.perf_counter() - began) * 1000)
            response.raise_for_status()
        return times, len(response.content)


@contextlib.contextmanager
def fresh_schema(base: str) -> Iterator[str]:
    """A schema of its own on the server at ``base`` (a saga URL), dropped afterwards."""
    schema = f"bench_web_{uuid.uuid4().hex[:8]}"
    libpq = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(libpq, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--postgres", default=None, help="also on this server (a saga URL; a schema of its own)"
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        urls = [("sqlite", f"sqlite:///{folder}/bench.db")]
        if args.postgres:
            urls.append(("postgresql", stack.enter_context(fresh_schema(args.postgres))))
        print(f"saga page of a {args.steps}-step saga, compensated (median / max of {args.repeat})")
        for backend, url in urls:
            median, worst, size = measure(url, args.steps, args.repeat)
            print(f"  {backend:<10} {median:7.1f} ms / {worst:7.1f} ms  ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
