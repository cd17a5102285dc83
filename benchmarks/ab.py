"""Two builds of saga side by side: ``python -m benchmarks.ab OLD NEW``.

OLD and NEW are folders a build of saga was installed into (``pip install
--no-deps --target DIR CHECKOUT``). Each measurement runs in a child process
importing one build; the builds take turns, workload by workload, so that they
share the machine's changing load alike. Printed: each build's median sagas/s
and the median of the per-turn ratios NEW/OLD (1.00: no change).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

from benchmarks.common import DEFAULT_POSTGRES, W1, W2, W4, W5, dedicated_database

_CHILD = """
import json, sys
from benchmarks import saga_bench
from benchmarks.common import WORKLOADS
workload = next(w for w in WORKLOADS if w.key == sys.argv[1])
result = saga_bench.run(sys.argv[2], workload, int(sys.argv[3]), sys.argv[4])
print(json.dumps(result.sagas_per_s))
"""


def measure(build: str, workload: str, url: str, n: int, backend: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([build, os.getcwd()])}
    args = [sys.executable, "-c", _CHILD, workload, url, str(n), backend]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    args = parser.parse_args()
    plan = [(W1, 600), (W2, 600), (W4, 300), (W5, 30)]
    print(f"{'workload':<10} {'old/s':>9} {'new/s':>9} {'new/old':>8}")
    with dedicated_database(args.postgres, f"ab_{uuid.uuid4().hex[:6]}") as url:
        for workload, n in plan:
            old, new, ratios = [], [], []
            for turn in range(args.repeat):
                order = [args.old, args.new] if turn % 2 == 0 else [args.new, args.old]
                got = {build: measure(build, workload.key, url, n, "postgresql") for build in order}
                old.append(got[args.old])
                new.append(got[args.new])
                ratios.append(got[args.new] / got[args.old])
            print(
                f"{workload.key:<10} {statistics.median(old):>9.1f} "
                f"{statistics.median(new):>9.1f} {statistics.median(ratios):>8.3f}"
                f"  [{min(ratios):.3f}-{max(ratios):.3f}]"
            )


if __name__ == "__main__":
    main()
