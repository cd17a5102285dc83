"""What this process last folded into a saga's step rows at the saga's current epoch, so
that a commit which alters none of those folded events can leave out the write-back.

A step row's folded events are written back as rows of their own before an update
would alter them (:mod:`.folding`). PostgreSQL's writer checks that inside the commit's
statement (``mat`` in :mod:`.pg_writer`), by joining every step row the commit updates;
on a saga's usual commits (a step finished by the commit after the one that started it)
that join finds nothing to write back, and it was the largest part of the server time
the fold added to a commit.

Only the owner of a saga's epoch folds events into its step rows, so what the owner
last wrote into a row at that epoch is what the row holds, unless the portable path
wrote it since (a transactional step's success), which writes back every folded event of
the row and leaves nothing to alter. The memory is kept by the commits' owner: a
``PostgresHotPath``, which its native async store shares. It is only ever a reason to
leave the write-back out: a row it does not know, an entry from another epoch, a commit
whose outcome is not known (its rows are forgotten before it is sent), and the statement
writes back as it did before.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

from saga._internal.ports import Commit

Slots = Sequence[tuple[int | None, int | None]]
"""Per step write of a commit, the positions of its folded start and success (folding.folds)."""


class Folded(NamedTuple):
    """What a step row holds folded, written by this process at the saga's epoch."""

    attempt: int
    success: bool  # True also when it may: it only ever makes a write-back happen


_Rows = dict[int, Folded]  # by the step's seq


class FoldMemory:
    """Folded step rows by (saga id, epoch), for the sagas in flight (bounded)."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._sagas: dict[tuple[str, int], _Rows] = {}
        self._lock = threading.Lock()

    def writes_back(self, change: Commit) -> bool:
        """Whether ``change``'s statement must write back folded events: unless every
        step row it updates is known and keeps what it holds (no new start, the same
        attempt, no second finish of a row holding a folded success). The rows it
        writes are forgotten until it is known to have landed (:meth:`landed`)."""
        updates = [write for write in change.steps if not write.new]
        with self._lock:
            rows = self._sagas.get((change.saga_id, change.epoch), {})
            needed = any(not _keeps(rows.get(w.step.seq), w.step.attempt, w.stamp) for w in updates)
            for write in change.steps:
                rows.pop(write.step.seq, None)
        return needed

    def landed(self, change: Commit, slots: Slots) -> None:
        """Remember what ``change`` (which has committed) folded into its step rows; a
        saga released by it (finished, or handed back) is forgotten."""
        key = (change.saga_id, change.epoch)
        with self._lock:
            if change.release:
                self._sagas.pop(key, None)
                return
            rows = self._sagas.get(key)
            if rows is None:
                rows = self._sagas[key] = {}
                if len(self._sagas) > self.capacity:  # the oldest saga in flight goes
                    del self._sagas[next(iter(self._sagas))]
            for write, (_, success) in zip(change.steps, slots, strict=True):
                # an update stamping no time keeps the row's success, unknown here
                may_hold = success is not None or (not write.new and write.stamp is None)
                rows[write.step.seq] = Folded(write.step.attempt, may_hold)


def _keeps(row: Folded | None, attempt: int, stamp: str | None) -> bool:
    """Whether an update (of ``attempt``, stamping ``stamp``) keeps what ``row`` holds."""
    if row is None or stamp == "started" or row.attempt != attempt:
        return False
    return not (row.success and stamp == "finished")
