"""A coroutine listener on ``AsyncCoordinator``: awaited on its own loop, off the caller's."""

from __future__ import annotations

import asyncio
import threading

import pytest

from saga import AsyncCoordinator, Saga, SagaEvent, StepContext


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
