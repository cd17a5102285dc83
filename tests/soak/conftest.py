"""The soak's figures: counted with the fault suite's (tests/faults/figures.py), printed at the
end of the run, and written to ``$SAGA_FAULTS_SUMMARY`` in the same Markdown table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults import figures
from tests.soak.soak import SUMMARY

SUMMARY_ENV = "SAGA_FAULTS_SUMMARY"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/soak/" not in report.nodeid:
        return
    if report.when == "call":
        figures.count("cases")
        if report.failed:
            figures.count("violations")
    elif report.failed:
        figures.count("cases")
        figures.count("violations")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not SUMMARY:
        return
    terminalreporter.write_sep("-", "saga SIGKILL soak")
    for line in SUMMARY:
        terminalreporter.write_line(line)
    target = os.environ.get(SUMMARY_ENV)
    if target:  # the whole table: the fault suite's figures too, when it ran alongside
        Path(target).write_text(figures.table() + "\n")
        terminalreporter.write_line(f"(figures written to {target})")
