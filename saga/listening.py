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

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

from saga.context import StepContext
from saga.errors import LeaseLostError
from saga.ports import Commit, Event, SagaRecord
from saga.status import SagaStatus

log = logging.getLogger("saga.listeners")

T = TypeVar("T")

Listener = Callable[["SagaEvent"], Any]
"""A callable taking a :class:`SagaEvent`; a coroutine function is awaited."""

DEFAULT_QUEUE_SIZE = 10_000

ATTEMPT_ENDS = {
    "step_succeeded": "step",
    "attempt_failed": "step",
    "step_failed": "step",
    "step_in_doubt": "step",
    "compensation_done": "undo",
    "compensation_failed": "undo",
    "compensation_attempt_failed": "undo",
}
"""The events that end an attempt, of a step (``"step"``) or of its compensation
(``"undo"``): their ``duration`` runs from the matching one of :data:`ATTEMPT_STARTS`."""
ATTEMPT_STARTS = {"step_started": "step", "compensation_started": "undo"}
SAGA_ENDS = frozenset(
    f"saga_{s.value}"
    for s in (
        SagaStatus.COMPLETED,
        SagaStatus.COMPENSATED,
        SagaStatus.FAILED,
        SagaStatus.CANCELLED,
    )
)
"""The events that end a saga."""

HOOKS = ("wants", "step_scope enter", "step_scope exit", "event", "trace_context", "discard")
"""The calls into a listener whose errors are counted apart (``Listeners.failures``)."""


class SagaEvent(NamedTuple):
    """One lifecycle event of one saga, as a listener is told it.

    ``kind`` is the history's name for it (``saga_started``, ``step_started``,
    ``attempt_failed``, ``compensation_done``, ``lease_claimed``,
    ``operator_action``...) or ``retry_scheduled`` / ``lease_lost``.
    ``status`` is the saga's status once the event was recorded; ``duration``
    (seconds, measured by this process) is how long the attempt, compensation
    or saga that the event ends took, when this process saw it start;
    ``delay`` is a scheduled retry's wait. ``error_type`` and ``error_message``
    describe the failure the event records, if any. A named tuple: cheap to
    make, as one is made for every event.
    """

    kind: str
    saga_id: str
    saga_name: str
    key: str | None
    status: SagaStatus
    epoch: int
    step: str | None = None
    attempt: int | None = None
    at: float = 0.0
    duration: float | None = None
    delay: float | None = None
    error_type: str | None = None
    error_message: str | None = None
    detail: dict[str, Any] | None = None
    durable: bool = True
    trace_context: str | None = None

    @property
    def short_id(self) -> str:
        """The first 8 characters of the saga id: what a log line shows."""
        return self.saga_id[:8]


def error_parts(text: object) -> tuple[str | None, str | None]:
    """("TypeName", "message") from a recorded error line ``"TypeName: message"``."""
    if not isinstance(text, str) or not text:
        return None, None
    kind, sep, message = text.partition(": ")
    if not sep or not kind.replace(".", "").replace("_", "").isalnum():
        return None, text
    return kind, message


class _Delivery:
    """One listener and how it is called: inline, or from its own thread."""

    def __init__(self, listener: Listener, inline: bool, queue_size: int) -> None:
        self.listener = listener
        self.inline = inline
        self.step_scope: Callable[[StepContext], Any] | None = getattr(listener, "step_scope", None)
        self._wants: Callable[[str], bool] | None = getattr(listener, "wants", None)
        self.trace_context: Callable[[str, str, str | None], str | None] | None = getattr(
            listener, "trace_context", None
        )
        self.errors_by_hook: dict[str, int] = {}
        self.dropped = 0
        self._queue: queue.Queue[SagaEvent | None] | None = None
        self._size = queue_size
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def errors(self) -> int:
        return sum(self.errors_by_hook.values())

    def failed(self, hook: str) -> None:
        """Count what the listener's ``hook`` raised (call it in the ``except`` block);
        the first error of each hook is logged with its traceback, later ones only
        counted, so that a broken listener cannot flood the log."""
        with self._lock:  # steps in several threads may fail in it at once
            count = self.errors_by_hook.get(hook, 0) + 1
            self.errors_by_hook[hook] = count
        if count == 1:
            log.exception(
                "listener %r: %s raised (later errors of its %s are only counted)",
                self.listener,
                hook,
                hook,
            )

    def wants(self, kind: str) -> bool:
        """Whether the listener wants events of ``kind``; one whose ``wants`` raises is
        told the event (its call is isolated too)."""
        if self._wants is None:
            return True
        try:
            return bool(self._wants(kind))
        except Exception:  # a listener never changes a saga's outcome
            self.failed("wants")
            return True

    def tell(self, event: SagaEvent) -> None:
        if self.inline:
            self._call(event)
            return
        try:
            self._started().put_nowait(event)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("listener %r falls behind: events dropped", self.listener)
        except Exception:  # its thread could not start (out of threads): not the saga's
            self.failed("event")

    def _started(self) -> queue.Queue[SagaEvent | None]:
        if self._queue is None:
            with self._lock:
                if self._queue is None:
                    thread = threading.Thread(
                        target=self._deliver, name="saga-listener", daemon=True
                    )
                    self._queue = queue.Queue(self._size)  # what the thread reads
                    try:
                        thread.start()
                    except BaseException:  # no thread: the next event tries again
                        self._queue = None
                        raise
                    self._thread = thread
        return self._queue

    def _deliver(self) -> None:
        assert self._queue is not None
        with asyncio.Runner() as runner:  # for a coroutine listener: its own event loop
            while True:
                event = self._queue.get()
                try:
                    if event is None:
                        return
                    self._call(event, runner)
                finally:
                    self._queue.task_done()

    def _call(self, event: SagaEvent, runner: asyncio.Runner | None = None) -> None:
        try:
            outcome = self.listener(event)
            if inspect.isawaitable(outcome):
                assert runner is not None, "an inline listener cannot be a coroutine"
                runner.run(_awaited(outcome))
        except Exception:  # a listener never changes a saga's outcome
            self.failed("event")

    def called(self, hook: str, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)``, a call into the listener's ``hook``; None if it raised."""
        try:
            return fn(*args)
        except Exception:  # a listener never changes a saga's outcome
            self.failed(hook)
            return None

    def flush(self, deadline: float) -> bool:
        if self._queue is None:
            return True
        done = self._queue.all_tasks_done
        with done:
            return done.wait_for(
                lambda: self._queue is None or self._queue.unfinished_tasks == 0,
                max(0.0, deadline - time.monotonic()),
            )

    def close(self, deadline: float) -> None:
        if self._queue is None or self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
        self._thread.join(max(0.0, deadline - time.monotonic()))


def _is_coroutine_function(listener: Listener) -> bool:
    call = listener if inspect.isfunction(listener) else type(listener).__call__
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(listener)


async def _awaited(outcome: Any) -> None:
    await outcome


class Listeners:
    """The listeners of one coordinator, and the clock of what they were told."""

    def __init__(self, listeners: Iterable[Listener] = (), queue_size: int = DEFAULT_QUEUE_SIZE):
        self._deliveries: list[_Delivery] = []
        self._scopes: list[_Delivery] = []  # those with a step_scope
        self._tracers: list[_Delivery] = []  # those with a trace_context
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
        if inline and _is_coroutine_function(listener):
            raise TypeError(f"an inline listener cannot be a coroutine function: {listener!r}")
        delivery = _Delivery(listener, inline, queue_size or self._queue_size)
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
        return _scoped(self._scopes, context)

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


@contextlib.contextmanager
def _scoped(scopes: Sequence[_Delivery], context: StepContext) -> Iterator[None]:
    """The listeners' scopes around one step attempt or compensation. Not an ExitStack:
    a scope whose exit raised would replace the step's outcome with its error, and one
    whose exit answered True would swallow the step's error; here neither can."""
    entered = [(d, scope) for d in scopes if (scope := _entered(d, context)) is not None]
    try:
        yield
    except BaseException as error:
        _exited(entered, error)
        raise
    _exited(entered, None)


def _entered(
    delivery: _Delivery, context: StepContext
) -> contextlib.AbstractContextManager[Any] | None:
    """``delivery``'s scope of ``context``, entered (None: it raised, and is left out)."""
    step_scope = delivery.step_scope
    assert step_scope is not None
    try:
        scope: contextlib.AbstractContextManager[Any] = step_scope(context)
        scope.__enter__()
    except Exception:  # a listener never changes a saga's outcome
        delivery.failed("step_scope enter")
        return None
    return scope


def _exited(
    entered: Sequence[tuple[_Delivery, contextlib.AbstractContextManager[Any]]],
    error: BaseException | None,
) -> None:
    """Exit the scopes, newest first, each told the step's ``error`` (or None); what one
    answers is ignored and what one raises counted, so the step's outcome stays its own."""
    for delivery, scope in reversed(entered):
        try:
            if error is None:
                scope.__exit__(None, None, None)
            else:
                scope.__exit__(type(error), error, error.__traceback__)
        except Exception as raised:  # a listener never changes a saga's outcome
            if raised is not error:  # a scope re-raising the step's own error is no fault
                delivery.failed("step_scope exit")
