"""Throughput and latency benchmarks for saga, side by side with DBOS and a raw-driver floor.

Run ``python -m benchmarks.run`` from the repository root; see benchmarks/README.md.
Nothing here is imported by the library or its tests, except the smoke test
that checks the saga workload still runs.
"""
