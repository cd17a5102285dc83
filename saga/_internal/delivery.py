"""Delivering lifecycle events to one listener, isolated from the saga it hears of.

A :class:`Delivery` calls its listener inline or from a thread of its own fed by a
bounded queue, and counts (and logs once) what each of the listener's hooks raises;
:func:`scoped` enters the listeners' step scopes around one step attempt or
compensation so that none of them can change the step's outcome. The rules are
:mod:`saga._internal.listening`'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from saga._internal.context import StepContext
from saga._internal.lifecycle import Listener, SagaEvent

log = logging.getLogger("saga.listeners")

T = TypeVar("T")


class Delivery:
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


def is_coroutine_function(listener: Listener) -> bool:
    call = listener if inspect.isfunction(listener) else type(listener).__call__
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(listener)


async def _awaited(outcome: Any) -> None:
    await outcome


@contextlib.contextmanager
def scoped(scopes: Sequence[Delivery], context: StepContext) -> Iterator[None]:
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
    delivery: Delivery, context: StepContext
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
    entered: Sequence[tuple[Delivery, contextlib.AbstractContextManager[Any]]],
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
