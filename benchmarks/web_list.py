"""How long the web console's list page takes with a million finished sagas.

Not a test: it prints medians. The tables are filled as the scale benchmark
fills them (``benchmarks.scale.fill``: one real finished 3-step saga copied in
SQL, 2 % failed, 8 % compensated, a few stuck), then the list page is fetched
through the ASGI app in-process, so the figure covers the counts per status,
one page of rows and the HTML. The exact GROUP BY count the page used before
is timed beside it.

    python -m benchmarks.web_list --postgres URL [--sagas 1000000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

import anyio

from benchmarks.common import W1, run_workload
from benchmarks.saga_bench import SagaSystem
from benchmarks.scale import fill
from benchmarks.web_page import _fetch, fresh_schema
from saga import admin
from saga.web import app
from saga.web.list_page import COUNT_CAP


def _median_ms(operation: Callable[[], object], repeat: int) -> float:
    operation()  # warm up
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        operation()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", required=True, help="a saga URL (a schema of its own)")
    parser.add_argument("--sagas", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(fresh_schema(args.postgres))
        system = SagaSystem(url, "postgresql")
        stack.callback(system.close)
        run_workload(system, W1, 5)
        template = system.coord.list(status="completed", limit=1)[0].id
        fill(url, template, args.sagas, 5, lambda line: print(line, flush=True))
        coord = system.coord
        times, size = anyio.run(_fetch, app(coord), "/", args.repeat)
        exact = _median_ms(lambda: admin.status_counts(coord), args.repeat)
        capped = _median_ms(lambda: admin.status_counts(coord, COUNT_CAP), args.repeat)
    print(f"list page with {args.sagas:,} finished sagas (median of {args.repeat})")
    print(f"  page         {statistics.median(times):7.1f} ms  ({size / 1024:.0f} KiB)")
    print(f"  counts, capped at {COUNT_CAP:,} {capped:7.1f} ms")
    print(f"  counts, exact GROUP BY   {exact:7.1f} ms")


if __name__ == "__main__":
    main()
