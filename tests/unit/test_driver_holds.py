"""A lease a flow holds is a token: let go by ``LetGo``, or with the driver's run that
made it when the flow ends without letting go; a ``lasting`` hold (a context-manager
block's) outlives its run until ``LetGo``. Both drivers, on the in-memory store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import pytest

from saga import AsyncCoordinator, Coordinator
from saga._internal.engine.effects import Effect, Hold, LetGo
from saga._internal.record import SagaRecord
from saga._internal.status import SagaStatus

Flow = Generator[Effect, Any, Any]


def _record(owner: str) -> SagaRecord:
    return SagaRecord(
        id="held-saga",
        name="held",
        key=None,
        kind="declarative",
        status=SagaStatus.RUNNING,
        input=None,
        version=None,
        owner=owner,
        epoch=1,
    )


def _ends_holding(record: SagaRecord) -> Flow:
    yield Hold(record)
    raise RuntimeError("the flow ended without letting go")


def _holds_across_runs(record: SagaRecord) -> Flow:
    return (yield Hold(record, lasting=True))


def _lets_go(token: int) -> Flow:
    yield LetGo(token)


def _check(run: Callable[[Flow], Any], coord: Coordinator) -> None:
    record = _record(coord.owner)
    with pytest.raises(RuntimeError, match="without letting go"):
        run(_ends_holding(record))
    assert not coord.heartbeat.holds(record.id)  # let go with the run
    token = run(_holds_across_runs(record))
    assert coord.heartbeat.holds(record.id)  # lasting: still held after its run
    run(_lets_go(token))
    assert not coord.heartbeat.holds(record.id)


def test_the_thread_driver_lets_go_of_a_run_s_holds() -> None:
    with Coordinator("memory://", log_events=False) as coord:
        _check(coord.driver.run, coord)


def test_the_asyncio_driver_lets_go_of_a_run_s_holds() -> None:
    async def main() -> None:
        async with AsyncCoordinator("memory://", log_events=False) as coord:
            loop = asyncio.get_running_loop()

            def run(flow: Flow) -> Any:  # the async driver, from a worker thread
                return asyncio.run_coroutine_threadsafe(coord.driver.run(flow), loop).result()

            await asyncio.to_thread(_check, run, coord.sync)

    asyncio.run(main())
