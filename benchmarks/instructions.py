"""Client instructions per saga of two builds, counted by valgrind: ``python -m
benchmarks.instructions OLD NEW``.

Timing the client's CPU on a shared 2-core machine moves by 10-20 % from one run to
the next, more than most single changes to saga's own code are worth; the number of
instructions the client executes per saga moves much less (two runs of one build
agree within 1-4 %; compare two builds counted side by side in one run). Each build
runs a workload twice under ``valgrind --tool=callgrind``, with ``--small`` and with
``--large`` sagas; the difference over the difference in sagas is its instructions per
saga, start-up and imports cancelled out. The server's work is not counted (it is
another process), nor is waiting.

    python -m benchmarks.instructions OLD NEW [--workload w1|w4|async] [--backend sqlite|postgresql]

OLD and NEW are builds as ``benchmarks.ab`` takes them (``pip install --no-deps
--target DIR .``). Needs valgrind (Debian: ``apt-get install valgrind``). The two
builds are counted side by side, one process each (about a minute and a half on
PostgreSQL). Instructions are not time (a cache miss costs more than an add), so a
change found here is confirmed with ``benchmarks.ab``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from benchmarks.common import DEFAULT_POSTGRES, dedicated_database

_CHILD = """
import sys
from pathlib import Path
import saga
from benchmarks.common import WORKLOADS, measure
from benchmarks.saga_bench import SagaSystem
print(Path(saga.__file__).resolve())  # the parent checks that the build was counted
if sys.argv[3] == "async":  # AsyncCoordinator, 3-step sagas from 256 tasks at once
    import asyncio
    from benchmarks.async_wide import TASKS, async_saga
    async def main(url, n):
        definition = async_saga("instructions-async")
        async with saga.AsyncCoordinator(url) as coord:
            async def caller(count):
                for _ in range(count):
                    await coord.run(definition)
            await asyncio.gather(*(caller(n // TASKS) for _ in range(TASKS)))
    asyncio.run(main(sys.argv[1], int(sys.argv[4])))
else:
    workload = next(w for w in WORKLOADS if w.key == sys.argv[3])
    system = SagaSystem(sys.argv[1], sys.argv[2])
    measure(system.caller(workload), int(sys.argv[4]))
    system.close()
"""
_TOTAL = re.compile(r"refs:\s+([\d,]+)")


def count(build: str, url: str, backend: str, workload: str, sagas: int) -> int:
    """The instructions one process of ``build`` executes running ``sagas`` sagas."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([build, os.getcwd()]),
        "PYTHONHASHSEED": "0",  # the same hashes, so the same dict probes, in every run
    }
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, "-P", "-c", _CHILD, url, backend, workload, str(sagas)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    imported = Path(done.stdout.strip().splitlines()[-1])
    if not imported.is_relative_to(Path(build).resolve()):
        raise SystemExit(f"the child counted {imported}, not the build in {build}")
    found = _TOTAL.search(done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_saga(build: str, url: str, args: argparse.Namespace) -> float:
    # Both counted runs must find the schema made, or the first would count its making.
    prime = [sys.executable, "-P", "-c", _CHILD, url, args.backend, args.workload, "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([build, os.getcwd()])}
    subprocess.run(prime, env=env, capture_output=True, check=True)
    small = count(build, url, args.backend, args.workload, args.small)
    large = count(build, url, args.backend, args.workload, args.large)
    return float(large - small) / float(args.large - args.small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument(
        "--workload",
        default="w1",
        help="w1 (default), w2, w3, w4, w5, or async: AsyncCoordinator with 256 sagas in "
        "flight (give --small and --large as multiples of 256)",
    )
    parser.add_argument("--backend", default="postgresql", choices=["postgresql", "sqlite"])
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--large", type=int, default=250)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    builds = (args.old, args.new)
    with ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        if args.backend == "sqlite":
            urls = [f"sqlite:///{folder}/{side}.db" for side in ("old", "new")]
        else:  # a database each: a build refuses a schema revision newer than its own
            tag = uuid.uuid4().hex[:6]
            urls = [
                stack.enter_context(dedicated_database(args.postgres, f"ins_{side}_{tag}"))
                for side in ("old", "new")
            ]
        with ThreadPoolExecutor(2) as pool:  # one process per build, side by side
            old, new = pool.map(per_saga, builds, urls, [args, args])
    print(f"instructions per {args.workload} saga on {args.backend} (client, valgrind):")
    print(f"  old {old:,.0f}  new {new:,.0f}  new/old {new / old:.3f}")


if __name__ == "__main__":
    main()
