"""The sagas a worker claimed beyond its free slots, so that one claim serves many sagas.

A claim is a transaction of its own (suspect the dead owners, lock and take the oldest
leases, record each claim): measured on PostgreSQL it cost as much as finishing a short
saga, so a worker claiming one saga per free slot spent half its time claiming. It now
claims up to ``--batch`` at once and keeps what its slots cannot start yet here.

Nothing renews a lease while its saga waits here, so a saga waits at most a third of the
lease (the heartbeat's interval; the heartbeat takes it over once its run starts, well
before the lease ends) and is then given back untouched, claimable at once by any
worker. How many are claimed ahead follows how long sagas take in this worker, so that
they are started within that time: a worker whose sagas are slow claims for its free
slots only, and never keeps sagas from an idle neighbour for long.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable


@dataclasses.dataclass
class ClaimedAhead:
    """Claimed sagas not started yet, oldest claim first, and how many to claim next."""

    patience: float
    """Seconds a saga may wait here (a third of the lease)."""
    batch: int
    """At most this many sagas a claim (``--batch``)."""
    waiting: collections.deque[tuple[str, float]] = dataclasses.field(
        default_factory=collections.deque
    )
    typical: float | None = None
    """A saga's typical time in this worker (moving average, seconds); None before one
    has finished."""
    clock: Callable[[], float] = time.monotonic

    def __len__(self) -> int:
        return len(self.waiting)

    def to_claim(self, free: int, concurrency: int) -> int:
        """How many to ask for with ``free`` slots free: at least one per free slot (as
        ``batch`` allows), and beyond them as many as the slots are expected to start
        within half the patience, at the typical time a saga takes here."""
        if self.typical is None:
            return min(free, self.batch)
        startable = concurrency * (self.patience / 2) / max(self.typical, 1e-6)
        return min(self.batch, max(free, free + math.floor(startable)))

    def keep(self, saga_ids: list[str]) -> None:
        now = self.clock()
        self.waiting.extend((saga_id, now) for saga_id in saga_ids)

    def next(self) -> str | None:
        """The oldest claim still within its patience, or None."""
        return self.waiting.popleft()[0] if self.waiting else None

    def overdue(self) -> list[str]:
        """Take out the sagas that waited past their patience (oldest first)."""
        limit = self.clock() - self.patience
        late: list[str] = []
        while self.waiting and self.waiting[0][1] <= limit:
            late.append(self.waiting.popleft()[0])
        return late

    def take_all(self) -> list[str]:
        """Every saga still waiting (a stopping worker gives them back)."""
        left = [saga_id for saga_id, _ in self.waiting]
        self.waiting.clear()
        return left

    def finished_in(self, seconds: float) -> None:
        """One saga took ``seconds`` in this worker: fold it into the typical time."""
        if self.typical is None:
            self.typical = seconds
        else:
            self.typical += (seconds - self.typical) / 8
