"""The asyncio driver's bookkeeping of one run: what it tells the flow at a ``Wait``."""

from __future__ import annotations

import asyncio
from typing import Any

from saga._internal.drivers.tasks import _Tasks
from saga._internal.engine.decisions import Cursor
from saga._internal.engine.effects import Branch, Finished
from saga._internal.ports import StepRecord
from saga._internal.status import StepStatus

WAIT_LIMIT = 30.0  # only bounds a hang: the stop is heard at once when all is well


def _branch(name: str) -> Branch:
    return Branch(name, flow=iter(()), cursor=Cursor(None), cancellable=True)  # type: ignore[arg-type]


async def _sleeping(seconds: float) -> Finished:
    await asyncio.sleep(seconds)
    raise AssertionError("not meant to end")


def test_each_saga_of_a_run_is_heard_when_it_is_asked_to_stop() -> None:
    """A recover run carries several sagas forward one after another, each watched for a
    stop by the lease renewal: the stop of the second reaches the flow like the first's."""

    async def main() -> Any:
        tasks = _Tasks(driver=None)  # type: ignore[arg-type]
        tasks.watch()  # the first saga of the run
        done = Finished(StepRecord("quick", 1, StepStatus.SUCCEEDED, 1), None, None, 0.0)
        quick = asyncio.create_task(asyncio.sleep(0, result=done))
        tasks.running[quick] = _branch("quick")
        await tasks.wait()  # the first saga waited once: a waiter on its stop exists
        tasks.running.clear()
        second = tasks.watch()  # the next saga of the run
        slow = asyncio.create_task(_sleeping(3600))
        tasks.running[slow] = _branch("slow")
        second()  # the renewal finds a cancel request for it
        waited = await asyncio.wait_for(tasks.wait(), WAIT_LIMIT)
        slow.cancel()
        return waited

    waited = asyncio.run(main())
    assert waited.stop_requested
    assert waited.finished == []
