"""``saga`` as an operator runs it with tracing configured: ``python -m
tests.cli.traced_cli SPANS ARGS...``. A global SDK provider exports every span it
ends to the file SPANS (one JSON line each), as ``opentelemetry-instrument`` would
to a collector; then the admin command runs with ARGS."""

from __future__ import annotations

import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from saga.cli import main
from tests.integration.tracing_child import FileExporter

if __name__ == "__main__":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(sys.argv[1])))
    trace.set_tracer_provider(provider)
    main(sys.argv[2:])
