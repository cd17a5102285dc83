"""Pausing: an operator's pause of a running saga, the flow behind ``Engine.pause``.

A saga held at a step boundary for a person (docs/recovery.md, "Paused sagas, in
detail"). The owner's side, stopping at its next step boundary and handing the saga
back, is ``Forward``'s (``Phase.PAUSING``); a step's ``on_exhausted="pause"`` leads
there too. ``Engine.resume`` reopens a paused saga as ``saga retry`` reopens a failed
one (``reopening.reopened``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from saga._internal.engine import records, rules
from saga._internal.engine.effects import WHO_ASKS, Flow, RequestPause, Tell, write
from saga._internal.engine.fault_points import fault
from saga._internal.errors import OperationRefusedError
from saga._internal.ports import ClaimGuard, Event, SagaRecord
from saga._internal.status import SagaStatus

T = TypeVar("T")
Refusal = Callable[[SagaRecord], object]


class Engine(Protocol):
    """What a pause needs of the engine (``saga._internal.engine.core.Engine``)."""

    def load(self, saga_id: str) -> Flow[SagaRecord]: ...

    def guarded(self, call: Flow[T], saga_id: str, refuse: Refusal) -> Flow[T]: ...

    def claim_guarded(
        self, saga_id: str, event: Event, guard: ClaimGuard, refuse: Refusal
    ) -> Flow[SagaRecord]: ...


def pause(engine: Engine, saga_id: str) -> Flow[SagaRecord]:
    """Turn a running saga ``paused`` (the guard checked inside that write), then hand it
    back by the operator's own claim if no live process holds it; a live owner hands it
    back itself at its next step boundary (its next commit or renewal answers "stop").
    A paused saga still held (a pause that died before its claim) is handed back too."""
    record = yield from engine.load(saga_id)
    rules.refuse_pause(record)
    who = yield WHO_ASKS
    if record.status is SagaStatus.RUNNING:
        event = rules.by_operator("pause", who)
        yield from engine.guarded(_request(record, event), saga_id, rules.refuse_pause)
    yield from fault("after_pause_request")
    claimed = Event("lease_claimed", detail={"why": "pause", **who})
    try:
        record = yield from engine.claim_guarded(
            saga_id, claimed, rules.paused_guard(), rules.refuse_pause
        )
    except OperationRefusedError:  # its owner is alive and hands it back, or it moved on
        return (yield from engine.load(saga_id))
    paused = records.moved(record, SagaStatus.PAUSED, reason="operator pause")
    return (yield from write(record, [], [paused], SagaStatus.PAUSED))


def _request(record: SagaRecord, event: Event) -> Flow[None]:
    yield RequestPause(record.id, event, rules.pause_guard())
    yield Tell(record, (event,))
