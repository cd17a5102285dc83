"""Lifecycle listeners: what a coordinator tells, after the record it describes.

Every event a saga's history holds (``saga history`` shows the same kinds) is
told to the coordinator's listeners once the store has committed it, never
before: a ``step_succeeded`` listener never hears of a step whose record was
lost. Two events are told that no history holds: ``retry_scheduled`` (this
process will try the step again after ``delay`` seconds; the failed attempt is
recorded next, as ``attempt_failed``, before the wait) and
``lease_lost`` (the store refused a write: another process claimed the saga).

A listener is any callable taking a :class:`SagaEvent` (a coroutine function
too). By default each runs on a thread of its own, fed by a bounded queue, so
that a listener that is slow, hangs or raises never delays a saga nor holds its
lease: past ``queue_size`` waiting events, further ones are dropped for that
listener and counted. A listener with ``inline = True`` (saga's own logging,
metrics and tracing listeners) is called in the saga's thread right after the
commit: it must be quick.

A listener never changes a saga's outcome: every call into it (``wants``, its
step scope's enter and exit, the event's delivery, ``trace_context``,
``discard``) is isolated. What it raises is counted by listener and hook
(:data:`HOOKS`) and logged once per listener and hook on the ``saga.listeners``
logger, with its traceback; the saga goes on as if the listener were not there (a
scope's exit cannot swallow the step's error either).

A listener may have a ``wants(kind)`` method: an event it does not want is not
made for it. It may also have a ``step_scope(context)`` method returning a context
manager: it is entered around every step attempt and compensation, in the
thread or task that runs it (a tracer makes the step's span current there).
A tracer also has ``trace_context(saga_id, name, key)``, called as a saga is
about to be created in the caller's thread: what it returns (the W3C headers of
the run's span, as JSON) is stored with the saga, and every later event of it
carries it, so that the process that recovers it continues the trace; and
``discard(saga_id)``, called when that saga was not created after all (its key
named an existing one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable, Iterator, Sequence

from saga._internal.context import StepContext
from saga._internal.delivery import Delivery, is_coroutine_function, scoped
from saga._internal.errors import LeaseLostError
from saga._internal.lifecycle import (
    ATTEMPT_ENDS,
    ATTEMPT_STARTS,
    HOOKS,
    SAGA_ENDS,
    Listener,
    SagaEvent,
    error_parts,
)
from saga._internal.record import Commit, Event, SagaRecord
from saga._internal.status import SagaStatus

__all__ = [
    "ATTEMPT_ENDS",
    "ATTEMPT_STARTS",
    "DEFAULT_QUEUE_SIZE",
    "HOOKS",
    "SAGA_ENDS",
    "Listener",
    "Listeners",
    "SagaEvent",
    "error_parts",
]

DEFAULT_QUEUE_SIZE = 10_000
"""How many events wait for a listener on its own thread before further ones are dropped."""


class Listeners:
    """The listeners of one coordinator, and the clock of what they were told."""

    def __init__(self, listeners: Iterable[Listener] = (), queue_size: int = DEFAULT_QUEUE_SIZE):
        self._deliveries: list[Delivery] = []
        self._scopes: list[Delivery] = []  # those with a step_scope
        self._tracers: list[Delivery] = []  # those with a trace_context
        self._queue_size = queue_size
        # saga id -> (step, 'step' | 'undo') or (None, 'saga') -> when this process saw it begin
        self._began: dict[str, dict[tuple[str | None, str], float]] = {}
        for listener in listeners:
            self.add(listener)

    def __bool__(self) -> bool:
        return bool(self._deliveries)

    def add(
        self, listener: Listener, *, inline: bool | None = None, queue_size: int | None = None
    ) -> None:
        """Tell ``listener`` every event from now on. ``inline`` (default: the
        listener's own ``inline`` attribute, else False) calls it in the saga's thread;
        else at most ``queue_size`` events wait for it, and more are dropped."""
        if not callable(listener):
            raise TypeError(f"a listener must be callable, not {listener!r}")
        inline = bool(getattr(listener, "inline", False)) if inline is None else inline
        if inline and is_coroutine_function(listener):
            raise TypeError(f"an inline listener cannot be a coroutine function: {listener!r}")
        delivery = Delivery(listener, inline, queue_size or self._queue_size)
        self._deliveries.append(delivery)
        if delivery.step_scope is not None:
            self._scopes.append(delivery)
        if delivery.trace_context is not None:
            self._tracers.append(delivery)

    def holds(self, listener: Listener) -> bool:
        """Whether ``listener`` is one of these."""
        return any(delivery.listener is listener for delivery in self._deliveries)

    @property
    def errors(self) -> int:
        """How many times a listener raised, in any of its hooks."""
        return sum(d.errors for d in self._deliveries)

    def failures(self) -> list[tuple[Listener, str, int]]:
        """``(listener, hook, count)`` for every hook of a listener that raised (see
        :data:`HOOKS`): which listener is broken, and where."""
        return [
            (delivery.listener, hook, count)
            for delivery in self._deliveries
            for hook, count in sorted(delivery.errors_by_hook.items())
        ]

    def errors_by_hook(self) -> dict[str, int]:
        """How many times a listener raised, by hook (every hook of :data:`HOOKS`)."""
        counts = dict.fromkeys(HOOKS, 0)
        for delivery in self._deliveries:
            for hook, count in delivery.errors_by_hook.items():
                counts[hook] = counts.get(hook, 0) + count
        return counts

    @property
    def dropped(self) -> int:
        """How many events a listener that fell behind never got."""
        return sum(d.dropped for d in self._deliveries)

    # -- what the drivers tell -------------------------------------------------------------

    def starting(self, record: SagaRecord) -> SagaRecord:
        """``record``, about to be created, with the trace context a tracing listener
        started its run in (in the creating thread: the caller's context is the parent)."""
        for delivery in self._tracers:
            trace_context = delivery.trace_context
            assert trace_context is not None
            carried = delivery.called(
                "trace_context", trace_context, record.id, record.name, record.key
            )
            if carried is not None:
                return dataclasses.replace(record, trace_context=carried)
        return record

    def not_created(self, record: SagaRecord) -> None:
        """The saga ``record`` was not created (its key names another): a tracing
        listener drops the run it began for it (``discard(saga_id)``)."""
        if record.trace_context is None:
            return
        for delivery in self._deliveries:
            discard = getattr(delivery.listener, "discard", None)
            if discard is not None:
                delivery.called("discard", discard, record.id)

    def committed(self, record: SagaRecord | None, change: Commit) -> None:
        """``change`` to ``record`` committed: tell its events."""
        if self._deliveries and record is not None:
            self.tell(record, change.events, change.epoch, change.status or record.status)

    @contextlib.contextmanager
    def writing(self, record: SagaRecord | None, change: Commit) -> Iterator[None]:
        """Around a driver's commit of ``change``: told ``committed`` once it returned,
        ``refused`` if it raised (the error goes on)."""
        try:
            yield
        except Exception as error:
            self.refused(record, change, error)
            raise
        self.committed(record, change)

    def refused(self, record: SagaRecord | None, change: Commit, error: Exception) -> None:
        """The store refused ``change``: if because another process claimed the saga
        (the lease is lost), tell that."""
        if self._deliveries and record is not None and isinstance(error, LeaseLostError):
            lost = Event("lease_lost", detail={"epoch": change.epoch})
            self.tell(record, [lost], change.epoch, durable=False)

    def tell(
        self,
        record: SagaRecord,
        events: Sequence[Event],
        epoch: int | None = None,
        status: SagaStatus | None = None,
        durable: bool = True,
    ) -> None:
        """Tell every listener ``events`` of ``record`` (committed, unless not ``durable``)."""
        for event in events:
            duration = self._duration(record.id, event)
            # Nothing is built for an event no listener wants (a log record below its
            # logger's level): what saga's own log listener costs while logs are off.
            targets = [d for d in self._deliveries if d.wants(event.kind)]
            if not targets:
                continue
            detail = event.detail or {}
            error_type, error_message = error_parts(detail.get("error"))
            told = SagaEvent(
                event.kind,
                record.id,
                record.name,
                record.key,
                status or record.status,
                record.epoch if epoch is None else epoch,
                event.step,
                event.attempt,
                time.time(),
                duration,
                detail.get("delay"),
                error_type,
                error_message,
                event.detail,
                durable,
                record.trace_context,
            )
            for delivery in targets:
                delivery.tell(told)

    def _duration(self, saga_id: str, event: Event) -> float | None:
        now, kind = time.monotonic(), event.kind
        began = self._began.setdefault(saga_id, {})
        if kind in ("saga_started", "lease_claimed"):
            began.setdefault((None, "saga"), now)
        elif kind in ATTEMPT_STARTS:
            began[(event.step, ATTEMPT_STARTS[kind])] = now
        elif kind in ATTEMPT_ENDS or kind == "retry_scheduled":
            # A retry is told when its attempt failed: that attempt's time ends there
            # (its ``attempt_failed``, told after it, then has none).
            part = ATTEMPT_ENDS.get(kind) or (
                "undo" if (event.detail or {}).get("compensating") else "step"
            )
            since = began.pop((event.step, part), None)
            return None if since is None else now - since
        elif kind in SAGA_ENDS or kind == "lease_lost":
            since = self._began.pop(saga_id, {}).get((None, "saga"))
            return None if since is None or kind == "lease_lost" else now - since
        return None

    def step_scope(self, context: StepContext) -> contextlib.AbstractContextManager[None]:
        """What the listeners enter around a step attempt or compensation."""
        if not self._scopes:
            return contextlib.nullcontext()
        return scoped(self._scopes, context)

    # -- ending ------------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued event was delivered (True) or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        return all([delivery.flush(deadline) for delivery in self._deliveries])

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (for at most ``timeout`` seconds) and stop the threads."""
        deadline = time.monotonic() + timeout
        for delivery in self._deliveries:
            delivery.close(deadline)
