"""A participant double: the outside world a saga writes to, shared by all processes.

:class:`Ledger` is a SQLite file. ``apply(kind, key)`` applies an effect
(a charge, a booking) at most once per ``(kind, key)``: pass it
``ctx.idempotency_key``, as a real payment API takes an idempotency key.
``revert(kind, key)`` undoes it, at most once, and an effect reverted (or
reverted before it was ever applied: the compensation of a step whose action
is still under way in a stalled process) is never applied again under that
key, as a well-behaved payment API refuses a charge whose key was refunded or
cancelled. Every call is counted, so a
check can say "charged once, refunded once" after any crash, whichever
process made the calls. ``record(kind, key)`` is the non-idempotent kind of
call (it counts every time), for systems that have no idempotency key.

Each call that changes something commits, then passes the fault point
``inside_action`` (or ``inside_undo`` in a compensation): the crash matrix
kills the process there too, when the effect is applied but the step has not
returned.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from saga._internal import faults
from saga._internal.context import current_step
from saga._internal.errors import ConfigurationError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    kind TEXT NOT NULL, key TEXT NOT NULL, amount INTEGER NOT NULL,
    reverted INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, key)
);
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL, key TEXT NOT NULL, op TEXT NOT NULL,
    amount INTEGER NOT NULL, effective INTEGER NOT NULL
);
"""
ENV = "SAGA_TEST_LEDGER"


class Ledger:
    """The participant double; ``path`` defaults to ``$SAGA_TEST_LEDGER``, read at each
    call (the ``saga_ledger`` fixture and ``crash_matrix`` set it for every process)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._path = None if path is None else str(path)

    @property
    def path(self) -> str:
        path = self._path or os.environ.get(ENV)
        if not path:
            raise ConfigurationError(
                f"Ledger: no file; pass a path or set ${ENV} (the saga_ledger fixture does)"
            )
        return path

    def create(self) -> Ledger:
        """Create the file's tables (idempotent); return the ledger."""
        with self._db() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
        return self

    # -- what steps call -----------------------------------------------------------------------

    def apply(self, kind: str, key: str, amount: int = 1) -> bool:
        """Apply the effect ``(kind, key)`` unless it is applied; whether this call did."""
        changed = self._call(
            kind,
            key,
            "apply",
            amount,
            "INSERT OR IGNORE INTO effects (kind, key, amount) VALUES (?, ?, ?)",
            (kind, key, amount),
        )
        return changed

    def revert(self, kind: str, key: str) -> bool:
        """Undo the effect ``(kind, key)`` if it is applied; whether this call did."""
        return self._call(
            kind,
            key,
            "revert",
            0,
            # The upsert leaves a tombstone for a key never applied: a late apply is refused.
            "INSERT INTO effects (kind, key, amount, reverted) VALUES (?, ?, 0, 2)"
            " ON CONFLICT (kind, key) DO UPDATE SET reverted = 1 WHERE effects.reverted = 0",
            (kind, key),
        )

    def record(self, kind: str, key: str, amount: int = 1) -> None:
        """A call with no idempotency: counted every time it is made."""
        self._call(kind, key, "record", amount, None, ())

    def _call(
        self, kind: str, key: str, op: str, amount: int, sql: str | None, params: tuple[object, ...]
    ) -> bool:
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            changed = True if sql is None else db.execute(sql, params).rowcount == 1
            if op == "revert" and changed:  # a tombstone written is not an effect undone
                changed = (
                    db.execute(
                        "SELECT reverted FROM effects WHERE kind = ? AND key = ?", (kind, key)
                    ).fetchone()[0]
                    == 1
                )
            db.execute(
                "INSERT INTO calls (kind, key, op, amount, effective) VALUES (?, ?, ?, ?, ?)",
                (kind, key, op, amount, int(changed)),
            )
            db.execute("COMMIT")
        if changed:
            _inside_step()
        return changed

    # -- what checks read ------------------------------------------------------------------

    def applied(self, kind: str, key: str | None = None, *, saga: str | None = None) -> int:
        """How many ``(kind, key)`` effects are applied now (every key, or a saga's keys)."""
        where, params = _matching(kind, key, saga)
        with self._db() as db:
            sql = f"SELECT count(*) FROM effects WHERE {where} AND reverted = 0"  # noqa: S608 (fixed fragments, bound values)
            row = db.execute(sql, params).fetchone()
        return int(row[0])

    def count(
        self, kind: str, key: str | None = None, *, saga: str | None = None, op: str = "apply"
    ) -> int:
        """How many ``op`` calls (``apply``, ``revert``, ``record``) changed something.

        ``saga`` keeps the keys of one saga (idempotency keys begin with its id).
        """
        where, params = _matching(kind, key, saga)
        sql = f"SELECT count(*) FROM calls WHERE {where} AND op = ? AND effective = 1"  # noqa: S608 (fixed fragments, bound values)
        with self._db() as db:
            row = db.execute(sql, (*params, op)).fetchone()
        return int(row[0])

    def calls(
        self, kind: str | None = None, *, saga: str | None = None
    ) -> list[tuple[str, str, str]]:
        """Every call as ``(op, kind, key)``, in order; effective or not."""
        where, params = _matching(kind, None, saga)
        with self._db() as db:
            rows = db.execute(f"SELECT op, kind, key FROM calls WHERE {where} ORDER BY id", params)  # noqa: S608 (fixed fragments, bound values)
            return [(op, k, key) for op, k, key in rows.fetchall()]

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        connection = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        # A committed call survives its process being killed (only a power cut loses it).
        connection.execute("PRAGMA synchronous=NORMAL")
        try:
            yield connection
        finally:
            connection.close()


def _matching(kind: str | None, key: str | None, saga: str | None) -> tuple[str, tuple[str, ...]]:
    clauses, params = ["1 = 1"], []
    if kind is not None:
        clauses.append("kind = ?")
        params.append(kind)
    if key is not None:
        clauses.append("key = ?")
        params.append(key)
    if saga is not None:
        clauses.append("substr(key, 1, length(?) + 1) = ? || ':'")
        params += [saga, saga]
    return " AND ".join(clauses), tuple(params)


def _inside_step() -> None:
    """The fault point for a crash while a step is under way (its effect applied)."""
    try:
        ctx = current_step()
    except RuntimeError:  # called outside a step: no such point
        return
    faults.point("inside_undo" if ctx.compensating else "inside_action", ctx.step)
