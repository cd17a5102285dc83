"""The soak's account of the run, printed at the end of it. Its figures are counted with the
fault suite's (tests/faults/figures.py, a plugin of every run), which prints them after these
lines and writes them to ``$SAGA_FAULTS_SUMMARY`` in the same Markdown table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.soak import bank
from tests.soak.soak import SUMMARY


@pytest.fixture(autouse=True)
def _bank_connections_closed() -> Iterator[None]:
    """The bank connections a test opened in this process are closed after it."""
    yield
    bank.close_pools()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not SUMMARY:
        return
    terminalreporter.write_sep("-", "saga SIGKILL soak")
    for line in SUMMARY:
        terminalreporter.write_line(line)
