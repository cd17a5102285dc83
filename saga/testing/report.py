"""The crash matrix's result: one row per case, as data and as a table."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from saga._internal.ports import EventRecord


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    """One cell of the matrix: where the process dies, on which path, recovered how.

    ``point`` is a ``SAGA_FAULTS`` spec (``after_action:charge``, ``#2`` for the
    second time that point is reached); ``failing`` the step made to fail (``None``:
    the path that succeeds); ``mode`` ``recover``, ``compensate`` or ``zombie``.
    ``url`` is the case's own saga store.
    """

    point: str
    failing: str | None
    mode: str
    url: str = ""

    @property
    def path(self) -> str:
        return "ok" if self.failing is None else f"{self.failing} fails"


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """How one case ended: the saga's final status (``-``: nothing was recorded), what ran
    (``reserve``, ``charge!`` failed, ``~charge`` compensated; see :func:`what_ran`),
    and what went wrong."""

    case: Case
    status: str
    ran: str
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclasses.dataclass(frozen=True)
class Report:
    """All the rows, in the matrix's order (the same for the same saga)."""

    saga: str
    rows: tuple[Row, ...]

    @property
    def ok(self) -> bool:
        """Whether every case passed (and there was at least one)."""
        return bool(self.rows) and all(row.ok for row in self.rows)

    @property
    def failures(self) -> list[Row]:
        return [row for row in self.rows if not row.ok]

    def table(self, *, only_failures: bool = True) -> str:
        """The rows as text (the failing ones, unless ``only_failures=False``)."""
        rows = self.failures if only_failures else list(self.rows)
        header = ("point", "path", "mode", "status", "ran", "result")
        cells = [header] + [
            (
                r.case.point,
                r.case.path,
                r.case.mode,
                r.status,
                r.ran,
                "ok" if r.ok else "FAIL: " + "; ".join(r.problems),
            )
            for r in rows
        ]
        widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
            for row in cells
        ]
        passed = len(self.rows) - len(self.failures)
        title = f"crash matrix of {self.saga}: {passed} of {len(self.rows)} cases passed"
        return "\n".join([title, *lines])

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:  # short: pytest shows it under a failed ``assert report.ok``
        return f"<Report {self.saga}: {len(self.failures)} of {len(self.rows)} cases failed>"


def what_ran(events: Sequence[EventRecord]) -> str:
    """The story of a history in a few words: ``a b! ~b ~a`` (``~a!``: a's compensation
    failed for good)."""
    marks = {
        "step_succeeded": "{}",
        "step_failed": "{}!",
        "compensation_done": "~{}",
        "compensation_failed": "~{}!",
    }
    words = [marks[e.kind].format(e.step) for e in events if e.kind in marks and e.step is not None]
    return " ".join(words) or "-"
