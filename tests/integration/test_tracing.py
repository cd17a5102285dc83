"""OpenTelemetry traces: a span tree per saga, the step's span current inside it, one
trace across a SIGKILL and the recovery by another process."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from saga import Coordinator, RetryPolicy, Saga, SagaFailed, SagaStatus, StepContext
from saga.otel import TracingListener
from tests.children import spawn
from tests.integration import tracing_child
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _lines(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [tracing_child.span_line(span) for span in exporter.get_finished_spans()]


def test_a_saga_that_retries_fails_and_compensates_is_one_tree_under_its_caller(
    make_coord: MakeCoordinator, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    shop = provider.get_tracer("shop")
    coord = make_coord(listeners=[TracingListener(provider)])
    saga = Saga("traced")

    @saga.step(retry=FAST_RETRY)
    def charge(ctx: StepContext) -> str:
        with shop.start_as_current_span("POST /payments"):  # the application's own span
            if ctx.attempt == 1:
                raise ConnectionError("card network reset")
        return "charged"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        with shop.start_as_current_span("POST /refunds"):
            pass

    @saga.step()
    def ship(ctx: StepContext) -> None:
        raise ValueError("no courier")

    with shop.start_as_current_span("POST /orders") as request, pytest.raises(SagaFailed):
        coord.run(saga, key="o-1")
    spans = _lines(exporter)
    lines = {line["name"]: line for line in spans}
    assert sorted(s["name"] for s in spans) == sorted(
        [
            "POST /payments",
            "step charge",  # attempt 1, failed
            "POST /payments",
            "step charge",  # attempt 2
            "step ship",
            "POST /refunds",
            "compensate charge",
            "saga run traced",
            "POST /orders",
        ]
    )
    trace_ids = {s["trace_id"] for s in spans}
    assert len(trace_ids) == 1  # one trace, the caller's
    run = lines["saga run traced"]
    assert run["parent_id"] == f"{request.get_span_context().span_id:016x}"
    assert run["attributes"]["saga.status"] == SagaStatus.COMPENSATED.value
    assert run["attributes"]["saga.key"] == "o-1"
    by_id = {s["span_id"]: s for s in spans}
    charges = sorted(
        (s for s in spans if s["name"] == "step charge"),
        key=lambda s: s["attributes"]["saga.attempt"],
    )
    assert [c["attributes"]["saga.attempt"] for c in charges] == [1, 2]
    assert [c["status"] for c in charges] == ["ERROR", "UNSET"]
    assert charges[0]["events"] == ["exception"]
    for step in [*charges, lines["step ship"], lines["compensate charge"]]:
        assert step["parent_id"] == run["span_id"]
    assert lines["step ship"]["status"] == "ERROR"
    # Inside a step, the current span is the step's: the application's spans nest under it.
    payments = [s for s in spans if s["name"] == "POST /payments"]
    assert sorted(by_id[p["parent_id"]]["attributes"]["saga.attempt"] for p in payments) == [1, 2]
    assert by_id[lines["POST /refunds"]["parent_id"]]["name"] == "compensate charge"


def test_a_trace_goes_on_in_the_process_that_recovers_after_a_sigkill(
    make_coord: MakeCoordinator,
    exported: tuple[TracerProvider, InMemorySpanExporter],
    db_url: str,
    tmp_path: Path,
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    child = spawn("tests.integration.tracing_child", [db_url, str(spans_file)])
    assert child.wait(120) == -signal.SIGKILL
    before = [json.loads(line) for line in spans_file.read_text().splitlines()]
    provider, exporter = exported
    recoverer = make_coord(listeners=[TracingListener(provider)])
    recoverer.register(tracing_child.CRASHING)
    (stuck,) = recoverer.list(stuck=False, limit=10)
    stored = recoverer.store.load(stuck.id)
    assert stored is not None
    assert stored.trace_context is not None
    traceparent = json.loads(stored.trace_context)["traceparent"]
    _, trace_id, run_span_id, _ = traceparent.split("-")
    # The killed process exported its ended spans: children of its run's span.
    assert {s["name"] for s in before} == {"step charge"}
    assert {(s["trace_id"], s["parent_id"]) for s in before} == {(trace_id, run_span_id)}
    expire_lease(recoverer, stuck.id)
    assert [o.status for o in recoverer.recover().outcomes] == [SagaStatus.COMPLETED]
    after = _lines(exporter)
    recovery = next(s for s in after if s["name"] == f"saga recover {tracing_child.NAME}")
    assert (recovery["trace_id"], recovery["parent_id"]) == (trace_id, run_span_id)
    assert recovery["attributes"]["saga.epoch"] == 2
    assert recovery["attributes"]["saga.status"] == "completed"
    ship = next(s for s in after if s["name"] == "step ship")
    assert (ship["trace_id"], ship["parent_id"]) == (trace_id, recovery["span_id"])
    assert ship["attributes"]["saga.attempt"] == 2


def test_an_operators_saga_recover_joins_the_trace(db_url: str, tmp_path: Path) -> None:
    spans_file, cli_spans = tmp_path / "spans.jsonl", tmp_path / "cli.jsonl"
    child = spawn("tests.integration.tracing_child", [db_url, str(spans_file)])
    assert child.wait(120) == -signal.SIGKILL
    with Coordinator(db_url) as reader:
        (stuck,) = reader.list(limit=10)
        stored = reader.store.load(stuck.id)
        assert stored is not None
        assert stored.trace_context is not None
        _, trace_id, run_span_id, _ = json.loads(stored.trace_context)["traceparent"].split("-")
        expire_lease(reader, stuck.id)
    app = ["--db", db_url, "--app", "tests.integration.tracing_child"]
    operator = spawn("tests.cli.traced_cli", [str(cli_spans), *app, "recover", stuck.id])
    assert operator.wait(120) == 0
    spans = [json.loads(line) for line in cli_spans.read_text().splitlines()]
    recovery = next(s for s in spans if s["name"] == f"saga recover {tracing_child.NAME}")
    assert (recovery["trace_id"], recovery["parent_id"]) == (trace_id, run_span_id)
    assert recovery["attributes"]["saga.claimed_for"] == "operator recover"
    ship = next(s for s in spans if s["name"] == "step ship")
    assert ship["parent_id"] == recovery["span_id"]
