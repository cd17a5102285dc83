"""The completions a run (forward, or unwinding) has not written yet: they ride with its
next commit."""

from __future__ import annotations

from saga._internal.engine import records
from saga._internal.ports import Event, SagaRecord, StepWrite


class Carried:
    """The completions not yet written: they ride with the next commit."""

    def __init__(self) -> None:
        self.writes: list[StepWrite] = []
        self.events: list[Event] = []
        self._ahead: tuple[SagaRecord, int, SagaRecord] | None = None

    def __bool__(self) -> bool:
        return bool(self.writes)

    def add(self, write_: StepWrite, event: Event) -> None:
        self.writes.append(write_)
        self.events.append(event)

    def take(self) -> tuple[list[StepWrite], list[Event]]:
        """Everything carried, to commit now; nothing is carried afterwards."""
        taken = self.writes, self.events
        self.writes, self.events, self._ahead = [], [], None
        return taken

    def ahead(self, record: SagaRecord) -> SagaRecord:
        """``record`` as it will be once the carried writes commit. Kept until the
        record or the writes change: a turn of the forward run asks two or three times,
        and each answer copies the record."""
        kept = self._ahead
        if kept is None or kept[0] is not record or kept[1] != len(self.writes):
            kept = self._ahead = (record, len(self.writes), records.ahead(record, self.writes))
        return kept[2]
