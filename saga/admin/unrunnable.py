"""The stuck sagas a worker leaves alone because it cannot run them.

A worker claims only what it can finish (``Coordinator.runnable``, checked in the
claim): a saga of a version it has not, or whose compensations it may not import,
stays untouched for a process that can run it. So that this is not silent, the
worker counts those sagas (``saga_unrunnable``) and names each in its log, once
every few minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from saga._internal.coordinator import Coordinator
from saga._internal.ports import ListQuery, SagaRecord
from saga._internal.views import SagaView

SAY_EVERY = 300.0
"""Seconds between two log lines about the same saga."""
PAGE = 200
"""Stuck sagas looked at a pass (the newest): the count is of these."""


def unrunnable_here(coord: Coordinator, views: Sequence[SagaView]) -> dict[str, str]:
    """Of ``views`` (stuck sagas), the ones ``coord`` cannot run, and why."""
    runnable, found = coord.runnable(), {}
    for view in views:
        record = coord.store.load(view.id)
        if record is not None and not runnable.admits(record):
            found[view.id] = why_not(coord, record)
    return found


def why_not(coord: Coordinator, record: SagaRecord) -> str:
    """Why ``coord`` cannot run ``record``: the refusal a claim would have met."""
    try:
        saga = coord.definitions.saga_for(record)
        coord.engine.check_compensations(record, saga)
    except Exception as refusal:  # the reason is the message, whatever its class
        return str(refusal)
    return "no definition here matches it"


class Unrunnable:
    """Counts the stuck sagas ``coord`` cannot run, and logs each once per ``every`` s."""

    def __init__(
        self, coord: Coordinator, log: Callable[[str], None], every: float = SAY_EVERY
    ) -> None:
        self.coord, self.log, self.every = coord, log, every
        self.count = 0
        self._said: dict[str, float] = {}  # saga id -> when it was last logged (monotonic)

    def look(self) -> int:
        """Count (and log) what is stuck and cannot run here; after a pass caught up, so
        that whatever is still stuck is left by every process that can run it, or by
        none. Two cheap reads: a count, and a page only when something is stuck."""
        if self.coord.store.stuck_count() == 0:
            self.count = 0
            return 0
        runnable = self.coord.runnable()
        stuck = self.coord.store.list(ListQuery(stuck=True, limit=PAGE))
        left = [record for record in stuck if not runnable.admits(record)]
        now = time.monotonic()
        self._said = {i: at for i, at in self._said.items() if now - at < self.every}
        for record in left:
            if record.id not in self._said:
                self._said[record.id] = now
                why = why_not(self.coord, record)
                self.log(f"saga {record.id} ({record.name}) left unclaimed: {why}")
        self.count = len(left)
        return self.count
