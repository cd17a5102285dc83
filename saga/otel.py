"""OpenTelemetry traces of sagas (the ``saga[otel]`` extra): ``TracingListener``.

Spans, named in OpenTelemetry's ``{operation} {target}`` style:

- ``saga run {name}``: a saga's run, from its start to its end in this process;
  its parent is the span current where ``run`` or ``saga()`` was called.
- ``saga recover {name}``: a process that claims a saga (recovery, an operator's
  verb, a rerun of its key) carries it on in this span, a child of the run's
  span (whose context is stored with the saga), so the whole story is one trace.
- ``step {step}``: one attempt of a step, a child of the saga's span, current
  while the step runs (an application's HTTP and database spans nest under it).
- ``compensate {step}``: one attempt of a compensation, likewise.

Attributes: ``saga.id``, ``saga.name``, ``saga.key``, ``saga.step``,
``saga.attempt``, ``saga.epoch``, ``saga.status``. An error is recorded as an
exception event with status ERROR. The listener uses the given or the global
``TracerProvider`` and never installs an exporter.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from saga._internal.context import StepContext
from saga._internal.lifecycle import ATTEMPT_ENDS, ATTEMPT_STARTS, SAGA_ENDS, SagaEvent

_PROPAGATOR = TraceContextTextMapPropagator()
_CLAIMS = frozenset(["lease_claimed", "operator_action"])


class TracingListener:
    """Makes spans of every saga this process runs or recovers (see the module)."""

    inline = True  # spans must begin and end in order, and a step's must be current in it

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        from saga import __version__

        self._tracer = trace.get_tracer("saga", __version__, tracer_provider=tracer_provider)
        self._sagas: dict[str, Span] = {}
        self._attempts: dict[tuple[str, str | None, str], Span] = {}
        self._lock = threading.Lock()

    # -- the listener hooks -----------------------------------------------------------------

    def trace_context(self, saga_id: str, name: str, key: str | None) -> str | None:
        """Begin the run's span (the caller's span is its parent); its W3C headers."""
        attributes = _saga_attributes(saga_id, name, key)
        attributes["saga.epoch"] = 1
        span = self._tracer.start_span(f"saga run {name}", attributes=attributes)
        with self._lock:
            self._sagas[saga_id] = span
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return json.dumps(carrier, sort_keys=True)

    def discard(self, saga_id: str) -> None:
        """The saga was not created (its key named another): end its run's span."""
        span = self._pop_saga(saga_id)
        if span is not None:
            span.set_attribute("saga.created", False)
            span.end()

    def __call__(self, event: SagaEvent) -> None:
        kind = event.kind
        action = (event.detail or {}).get("action") if kind == "operator_action" else None
        if action in ("cancel", "pause"):
            self._note(event, f"{action} requested")  # a request: the owner honours it
        elif kind in _CLAIMS:
            self._claimed(event)
        elif kind in ATTEMPT_STARTS:
            self._attempt_started(event, ATTEMPT_STARTS[kind])
        elif kind in ATTEMPT_ENDS:
            self._attempt_ended(event, ATTEMPT_ENDS[kind])
        elif kind == "retry_scheduled":
            part = "undo" if (event.detail or {}).get("compensating") else "step"
            self._attempt_ended(event, part, retry=True)
        elif kind in SAGA_ENDS or kind in ("lease_lost", "saga_paused"):  # this run ends
            self._saga_ended(event)
        elif kind == "saga_compensating":
            self._note(event, "saga compensating")

    def _note(self, event: SagaEvent, what: str) -> None:
        span = self._sagas.get(event.saga_id)
        if span is not None:
            span.add_event(what, {"saga.reason": _reason(event)})

    @contextlib.contextmanager
    def step_scope(self, context: StepContext) -> Iterator[None]:
        """Make the attempt's span current while the step or compensation runs."""
        part = "undo" if context.compensating else "step"
        span = self._attempts.get((context.saga_id, context.step, part))
        if span is None:
            yield
            return
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield
        finally:
            otel_context.detach(token)

    # -- spans --------------------------------------------------------------------------------

    def _claimed(self, event: SagaEvent) -> None:
        """Another process's saga, now carried on here: a child of its run's span."""
        previous = self._pop_saga(event.saga_id)
        if previous is not None:  # this process held it before (a rerun of its key)
            previous.end()
        parent = _stored_context(event.trace_context)
        attributes = _saga_attributes(event.saga_id, event.saga_name, event.key)
        attributes["saga.epoch"] = event.epoch
        why = (event.detail or {}).get("why") or (event.detail or {}).get("action")
        if why:
            attributes["saga.claimed_for"] = str(why)
        span = self._tracer.start_span(
            f"saga recover {event.saga_name}", context=parent, attributes=attributes
        )
        with self._lock:
            self._sagas[event.saga_id] = span

    def _attempt_started(self, event: SagaEvent, part: str) -> None:
        saga = self._sagas.get(event.saga_id)
        parent = trace.set_span_in_context(saga) if saga is not None else None
        name = "step" if part == "step" else "compensate"
        attributes: dict[str, Any] = {
            "saga.id": event.saga_id,
            "saga.name": event.saga_name,
            "saga.step": event.step or "",
            "saga.attempt": event.attempt or 0,
            "saga.epoch": event.epoch,
        }
        title = f"{name} {event.step}"
        span = self._tracer.start_span(title, context=parent, attributes=attributes)
        with self._lock:
            stale = self._attempts.pop((event.saga_id, event.step, part), None)
            self._attempts[(event.saga_id, event.step, part)] = span
        if stale is not None:
            stale.end()

    def _attempt_ended(self, event: SagaEvent, part: str, retry: bool = False) -> None:
        with self._lock:
            span = self._attempts.pop((event.saga_id, event.step, part), None)
        if span is None:  # a retry's failure, recorded after its span ended
            return
        failed = event.error_type is not None or event.kind in ("step_in_doubt", "step_failed")
        if failed:
            _record_error(span, event)
        if retry:
            span.set_attribute("saga.retry_in", float(event.delay or 0.0))
        span.set_attribute("saga.outcome", event.kind)
        span.end()

    def _saga_ended(self, event: SagaEvent) -> None:
        span = self._pop_saga(event.saga_id)
        with self._lock:
            left = [key for key in self._attempts if key[0] == event.saga_id]
            attempts = [self._attempts.pop(key) for key in left]
        for attempt in attempts:  # stopped by a lost lease: never ended otherwise
            attempt.set_status(Status(StatusCode.ERROR, "the saga's lease was lost"))
            attempt.end()
        if span is None:
            return
        span.set_attribute("saga.status", event.status.value)
        if event.kind == "lease_lost":
            span.add_event("lease lost", {"saga.epoch": event.epoch})
            span.set_status(Status(StatusCode.ERROR, "lease lost to another process"))
        elif event.kind == "saga_failed":
            span.set_status(Status(StatusCode.ERROR, _reason(event) or "failed"))
        span.end()

    def _pop_saga(self, saga_id: str) -> Span | None:
        with self._lock:
            return self._sagas.pop(saga_id, None)


def _saga_attributes(saga_id: str, name: str, key: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"saga.id": saga_id, "saga.name": name}
    if key is not None:
        attributes["saga.key"] = key
    return attributes


def _record_error(span: Span, event: SagaEvent) -> None:
    kind = event.error_type or event.kind
    message = event.error_message or _reason(event) or event.kind
    span.add_event("exception", {"exception.type": kind, "exception.message": message})
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))


def _reason(event: SagaEvent) -> str:
    detail = event.detail or {}
    return str(detail.get("reason") or detail.get("error") or "")


def _stored_context(stored: str | None) -> otel_context.Context | None:
    """The context of a saga's run, from the headers stored with it (None: a root span)."""
    if not stored:
        return None
    try:
        carrier = json.loads(stored)
    except ValueError:
        return None
    if not isinstance(carrier, dict):
        return None
    return _PROPAGATOR.extract({str(k): str(v) for k, v in carrier.items()})
