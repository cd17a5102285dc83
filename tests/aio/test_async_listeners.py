"""A coroutine listener on ``AsyncCoordinator``: awaited on its own loop, off the caller's."""

from __future__ import annotations

import asyncio
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from saga import AsyncCoordinator, Saga, SagaEvent, StepContext
from saga.otel import TracingListener


def test_a_coroutine_listener_is_awaited_off_the_callers_loop(db_url: str) -> None:
    heard: list[tuple[str, bool]] = []
    saga = Saga("aio-listened")

    @saga.step()
    async def reserve(ctx: StepContext) -> str:
        return "r"

    async def listener(event: SagaEvent) -> None:
        await asyncio.sleep(0)
        heard.append((event.kind, threading.current_thread() is threading.main_thread()))

    async def main() -> None:
        async with AsyncCoordinator(db_url, listeners=[listener]) as coord:
            view = await coord.run(saga)
            assert await asyncio.to_thread(coord.listeners.flush, 30)
            assert [kind for kind, _ in heard] == [e.kind for e in await coord.history(view.id)]

    asyncio.run(main())
    assert heard
    assert not any(on_main for _, on_main in heard)


def test_an_inline_listener_cannot_be_a_coroutine(db_url: str) -> None:
    async def listener(event: SagaEvent) -> None:
        pass

    async def main() -> None:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(TypeError, match="inline listener cannot be a coroutine"):
                coord.add_listener(listener, inline=True)

    asyncio.run(main())


def test_an_async_step_runs_inside_its_span(db_url: str) -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    shop = provider.get_tracer("shop")
    saga = Saga("aio-traced")

    @saga.step()
    async def reserve(ctx: StepContext) -> str:
        await asyncio.sleep(0)
        with shop.start_as_current_span("GET /stock"):
            await asyncio.sleep(0)
        return "r"

    async def main() -> None:
        async with AsyncCoordinator(db_url, listeners=[TracingListener(provider)]) as coord:
            await coord.run(saga)

    asyncio.run(main())
    spans = {span.name: span for span in exporter.get_finished_spans()}
    stock, step, run = spans["GET /stock"], spans["step reserve"], spans["saga run aio-traced"]
    assert stock.parent is not None
    assert stock.parent.span_id == step.get_span_context().span_id
    assert step.parent is not None
    assert step.parent.span_id == run.get_span_context().span_id
