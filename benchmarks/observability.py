"""What observability costs on the hot path: ``python -m benchmarks.observability``.

One process, one database, the same saga (3 no-op steps, sequential), run by
coordinators that differ only in what watches them, taking turns so that they
share the machine's changing load alike:

- ``bare``: no listener at all (``log_events=False``);
- ``default``: the log listener every coordinator has, with logging not
  configured (nothing is emitted: the ``saga`` loggers are at WARNING);
- ``info``: the same listener with the ``saga`` loggers at INFO, written by a
  JSON handler to a file;
- ``debug``: at DEBUG (every attempt a record), same handler;
- ``traced``: default logging, plus the OpenTelemetry and Prometheus listeners
  when those extras are installed (skipped, and said so, when they are not).

Printed: each variant's median sagas/s and the median per-turn ratio to
``bare`` (1.00: no cost). Timing lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from saga import Coordinator, Saga, StepContext
from saga.logs import configure

Variant = Callable[[str], tuple[Coordinator, Callable[[], None]]]


def _saga() -> Saga:
    saga = Saga("obs-bench")
    for n in range(3):
        saga.step(name=f"s{n}")(_noop)
    return saga


def _noop(_: StepContext) -> None:
    return None


def _logged(level: int, folder: Path) -> Variant:
    def make(url: str) -> tuple[Coordinator, Callable[[], None]]:
        handler = configure(log_format="json", log_file=str(folder / f"{level}.log"), level=level)

        def undo() -> None:
            logging.getLogger("saga").removeHandler(handler)
            logging.getLogger("saga").setLevel(logging.NOTSET)
            handler.close()

        return Coordinator(url), undo

    return make


def _traced(url: str) -> tuple[Coordinator, Callable[[], None]]:
    listeners: list[Any] = []
    try:
        from saga.otel import TracingListener  # type: ignore[import-not-found, unused-ignore]

        listeners.append(TracingListener())
    except ImportError:
        pass
    try:
        from saga.metrics import MetricsListener  # type: ignore[import-not-found, unused-ignore]

        listeners.append(MetricsListener())
    except ImportError:
        pass
    if not listeners:
        raise ImportError("neither saga[otel] nor saga[metrics] is installed")
    return Coordinator(url, listeners=listeners), lambda: None


def variants(folder: Path) -> dict[str, Variant]:
    return {
        "bare": lambda url: (Coordinator(url, log_events=False), lambda: None),
        "default": lambda url: (Coordinator(url), lambda: None),
        "info": _logged(logging.INFO, folder),
        "debug": _logged(logging.DEBUG, folder),
        "traced": _traced,
    }


def _turn(make: Variant, url: str, sagas: int) -> float:
    coord, undo = make(url)
    try:
        saga = _saga()
        coord.register(saga)
        coord.run(saga, key=uuid.uuid4().hex)  # warm: tables, connections
        began = time.perf_counter()
        for _ in range(sagas):
            coord.run(saga)
        return sagas / (time.perf_counter() - began)
    finally:
        coord.close()
        undo()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    parser.add_argument("--sagas", type=int, default=300, help="sagas a turn")
    parser.add_argument("--repeat", type=int, default=5, help="turns of each variant")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = options.db or f"sqlite:///{folder}/bench.db"
        made = variants(Path(folder))
        rates: dict[str, list[float]] = {name: [] for name in made}
        for _ in range(options.repeat):
            for name, make in list(made.items()):
                try:
                    rates[name].append(_turn(make, url, options.sagas))
                except ImportError as missing:
                    print(f"{name}: skipped ({missing})")
                    del made[name], rates[name]
        _report(rates)


def _report(rates: dict[str, list[float]]) -> None:
    bare = rates["bare"]
    print(f"{'variant':<8} {'sagas/s':>9} {'vs bare':>8}")
    for name, measured in rates.items():
        ratio = statistics.median(m / b for m, b in zip(measured, bare, strict=True))
        print(f"{name:<8} {statistics.median(measured):>9.0f} {ratio:>8.3f}")


if __name__ == "__main__":
    main()
