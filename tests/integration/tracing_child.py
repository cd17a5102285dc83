"""A traced process that dies by SIGKILL inside a saga: ``python -m
tests.integration.tracing_child URL SPANS``. Every span it ends is appended to the
file SPANS as one JSON line at once, so what it exported survives its death."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from saga import Coordinator, RetryPolicy, Saga, StepContext
from saga.otel import TracingListener

NAME = "traced-crash"


def span_line(span: ReadableSpan) -> dict[str, Any]:
    """What the tests compare of a span, across processes."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [event.name for event in span.events],
    }


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(span_line(span)) + "\n")
        return SpanExportResult.SUCCESS


def definition() -> Saga:
    """charge fails once (retried), then ship kills the process on its first attempt."""
    saga = Saga(NAME)

    @saga.step(retry=RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0))
    def charge(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("card network reset")
        return "charged"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        pass

    @saga.step()
    def ship(ctx: StepContext) -> str:
        if ctx.epoch == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return "shipped"

    return saga


CRASHING = definition()  # module level: ``--app tests.integration.tracing_child`` finds it


def main(url: str, spans: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(spans)))
    coord = Coordinator(url, lease_ttl=600, listeners=[TracingListener(provider)])
    with provider.get_tracer("shop").start_as_current_span("POST /orders"):
        coord.run(CRASHING, key="order-9")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
