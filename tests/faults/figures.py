"""The fault suite's figures (sagas, kills, lost acknowledgements...), counted as tests run.

Tests call :func:`count` as they inject faults and check sagas. This module
is also a pytest plugin (``pytest_plugins`` in tests/conftest.py): it adds
the pass/fail tally of the fault and soak suites, prints the figures at the
end of the run and, when ``SAGA_FAULTS_SUMMARY`` names a file, writes them
there as Markdown (the table in ``docs/reliability.md`` is pasted from it).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

import pytest

SUMMARY_ENV = "SAGA_FAULTS_SUMMARY"
COUNTED = ("tests/faults/", "tests/soak/")
"""The suites whose test cases are counted (and whose failures are violations)."""

FIGURES: Counter[str] = Counter()
NOTES: list[str] = []
"""Lines that are not counts (failover times, per round), printed after the table."""
_lock = threading.Lock()

LABELS = {
    "cases": "test cases run",
    "violations": "invariant violations (failed cases)",
    "sagas": "sagas driven to their end and checked",
    "invariant checks": "per-saga invariant checks (ledger + store)",
    "kills": "processes killed with SIGKILL",
    "freezes": "processes frozen with SIGSTOP past their lease",
    "lost acks": "commit acknowledgements lost (write committed, connection reported dropped)",
    "terminated backends": "PostgreSQL backends terminated by the chaos thread",
    "restarts": "PostgreSQL immediate stops and restarts",
    "failovers": "PostgreSQL primaries killed with SIGKILL, synchronous standby promoted",
    "recoverer processes": "recoverer processes run concurrently",
    "hostile inputs": "hostile inputs refused (or stored verbatim, where valid)",
    "places checked for the password": "outputs checked for the DSN password",
    "admin command reads under chaos": "saga list / show runs (--json) under chaos, all exit 0",
    "sagas taken over under chaos": "sagas whose owner lost its lease under chaos",
    "dumps compared": "database dumps compared before and after",
    "engine examples": "engine state-machine runs (Hypothesis examples, shrinking included)",
    "engine rules": "engine state-machine rules applied (invariants checked after each)",
}


def count(name: str, amount: int = 1) -> None:
    """Add ``amount`` to figure ``name`` (thread-safe)."""
    with _lock:
        FIGURES[name] += amount


def note(line: str) -> None:
    """Add a line to print after the figures (thread-safe)."""
    with _lock:
        NOTES.append(line)


def table() -> str:
    """The figures as a Markdown table, in a fixed order."""
    rows = ["| figure | value |", "| --- | ---: |"]
    names = [n for n in LABELS if n in FIGURES or n in ("cases", "violations")]
    names += sorted(n for n in FIGURES if n not in LABELS)
    rows += [f"| {LABELS.get(name, name)} | {FIGURES[name]} |" for name in names]
    return "\n".join(rows + (["", *NOTES] if NOTES else []))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not any(suite in report.nodeid for suite in COUNTED):
        return
    if report.when == "call":
        count("cases")
        if report.failed:
            count("violations")
    elif report.failed:  # an error outside the test body: counted as a failed case
        count("cases")
        count("violations")


@pytest.hookimpl(trylast=True)  # after the soak's own lines (tests/soak/conftest.py)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES["cases"]:
        return
    terminalreporter.write_sep("-", "saga fault suite: figures of this run")
    terminalreporter.write_line(table())
    target = os.environ.get(SUMMARY_ENV)
    if target:
        Path(target).write_text(table() + "\n")
        terminalreporter.write_line(f"(written to {target})")
