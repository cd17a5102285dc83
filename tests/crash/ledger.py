"""The effect ledger: a SQLite file outside the saga store that sees every side effect.

Every action and compensation call appends one row to ``calls`` (saga id,
step, kind ``do``/``undo``, attempt, epoch, pid) in its own committed
transaction, whichever process makes it. The ``applied`` table stands for
the outside world the saga writes to: an action inserts its row keyed by
``ctx.idempotency_key`` (idempotently: a second insert changes nothing) and a
compensation deletes it. ``effective`` on a call says whether it changed
``applied``, so "applied at most once" and "undone at most once" are
checkable after any number of crashes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from collections.abc import Iterator

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id TEXT NOT NULL,
    step TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('do', 'undo')),
    attempt INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    effective INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS applied (
    key TEXT PRIMARY KEY,
    saga_id TEXT NOT NULL,
    step TEXT NOT NULL,
    UNIQUE (saga_id, step)
);
"""


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One action (``do``) or compensation (``undo``) call, in the order they happened."""

    id: int
    saga_id: str
    step: str
    kind: str
    attempt: int
    epoch: int
    pid: int
    effective: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Ledger:
    """Everything the ledger holds: the calls in order, and the effects still applied."""

    calls: tuple[Call, ...]
    applied: frozenset[tuple[str, str]]

    def of(self, saga_id: str, step: str | None = None, kind: str | None = None) -> list[Call]:
        """Calls for one saga (and one step, one kind), in order."""
        return [
            c
            for c in self.calls
            if c.saga_id == saga_id
            and (step is None or c.step == step)
            and (kind is None or c.kind == kind)
        ]

    def saga_ids(self) -> set[str]:
        return {c.saga_id for c in self.calls}


@contextlib.contextmanager
def _connected(path: str) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    # WAL + NORMAL: a committed call survives its process being killed (only a power
    # cut could lose it), without an fsync per call.
    connection.execute("PRAGMA synchronous=NORMAL")
    try:
        yield connection
    finally:
        connection.close()


def create(path: str) -> None:
    """Create an empty ledger at ``path``."""
    with _connected(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_SCHEMA)


def _append(
    db: sqlite3.Connection,
    saga_id: str,
    step: str,
    kind: str,
    attempt: int,
    epoch: int,
    effective: bool,
) -> None:
    db.execute(
        "INSERT INTO calls (saga_id, step, kind, attempt, epoch, pid, effective)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (saga_id, step, kind, attempt, epoch, os.getpid(), int(effective)),
    )


def do(path: str, saga_id: str, step: str, key: str, attempt: int, epoch: int) -> bool:
    """Apply the step's effect (at most once per ``key``); return whether this call applied it."""
    with _connected(path) as db:
        db.execute("BEGIN IMMEDIATE")
        inserted = db.execute(
            "INSERT OR IGNORE INTO applied (key, saga_id, step) VALUES (?, ?, ?)",
            (key, saga_id, step),
        ).rowcount
        _append(db, saga_id, step, "do", attempt, epoch, inserted == 1)
        db.execute("COMMIT")
    return inserted == 1


def attempted(path: str, saga_id: str, step: str, attempt: int, epoch: int) -> None:
    """Record an action call that has no effect (it fails, or hangs, before acting)."""
    with _connected(path) as db:
        db.execute("BEGIN IMMEDIATE")
        _append(db, saga_id, step, "do", attempt, epoch, False)
        db.execute("COMMIT")


def undo(path: str, saga_id: str, step: str, attempt: int, epoch: int) -> bool:
    """Remove the step's effect if present; return whether this call removed it."""
    with _connected(path) as db:
        db.execute("BEGIN IMMEDIATE")
        deleted = db.execute(
            "DELETE FROM applied WHERE saga_id = ? AND step = ?", (saga_id, step)
        ).rowcount
        _append(db, saga_id, step, "undo", attempt, epoch, deleted == 1)
        db.execute("COMMIT")
    return deleted == 1


def read(path: str) -> Ledger:
    """The whole ledger."""
    with _connected(path) as db:
        rows = db.execute(
            "SELECT id, saga_id, step, kind, attempt, epoch, pid, effective FROM calls ORDER BY id"
        ).fetchall()
        applied = db.execute("SELECT saga_id, step FROM applied").fetchall()
    calls = tuple(
        Call(number, saga_id, step, kind, attempt, epoch, pid, bool(effective))
        for number, saga_id, step, kind, attempt, epoch, pid, effective in rows
    )
    return Ledger(calls, frozenset((saga_id, step) for saga_id, step in applied))
