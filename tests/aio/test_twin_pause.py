"""tests/integration/test_pause.py run again against ``AsyncCoordinator`` (behind the
blocking facade), and pause with async steps awaited on the caller's loop."""

from __future__ import annotations

import asyncio

import pytest

from saga import AsyncCoordinator, Saga, SagaHandedBack, SagaStatus, StepContext, StepStatus
from tests.aio.test_native_async import run_async
from tests.integration.support import assert_history_replays, fast
from tests.integration.test_pause import (
    _clear,
    test_a_deadline_passed_while_paused_unwinds_on_resume,
    test_a_paused_saga_can_be_compensated_instead,
    test_a_paused_saga_still_held_by_its_owner_waits_for_it,
    test_a_recoverer_never_claims_a_paused_saga,
    test_a_resumed_step_gets_its_attempts_again_and_pauses_again,
    test_on_exhausted_pause_parks_instead_of_compensating_then_resume_completes,
    test_pause_of_an_idle_saga_hands_it_back_by_the_operators_claim,
    test_pause_refuses_what_cannot_pause,
    test_pause_stops_a_running_saga_at_its_next_step_boundary,
    test_the_fresh_attempts_of_a_resume_outlive_the_resuming_process,
)

__all__ = [
    "_clear",  # the module's autouse fixture
    "test_a_deadline_passed_while_paused_unwinds_on_resume",
    "test_a_paused_saga_can_be_compensated_instead",
    "test_a_paused_saga_still_held_by_its_owner_waits_for_it",
    "test_a_recoverer_never_claims_a_paused_saga",
    "test_a_resumed_step_gets_its_attempts_again_and_pauses_again",
    "test_on_exhausted_pause_parks_instead_of_compensating_then_resume_completes",
    "test_pause_of_an_idle_saga_hands_it_back_by_the_operators_claim",
    "test_pause_refuses_what_cannot_pause",
    "test_pause_stops_a_running_saga_at_its_next_step_boundary",
    "test_the_fresh_attempts_of_a_resume_outlive_the_resuming_process",
]


def _async_outage_saga(name: str, down: dict[str, bool], log: list[str]) -> Saga:
    """reserve -> charge (async; ConnectionError while ``down``, pauses when exhausted)."""
    saga = Saga(name)

    @saga.step()
    async def reserve(ctx: StepContext) -> str:
        log.append("reserve")
        return "r"

    @reserve.compensation
    async def release(ctx: StepContext) -> None:
        log.append("release")

    @saga.step(retry=fast(2, retry_on=(ConnectionError,)), on_exhausted="pause")
    async def charge(ctx: StepContext) -> str:
        log.append(f"charge {ctx.attempt}")
        await asyncio.sleep(0)  # a real await: the step runs on the loop
        if down.get("charge"):
            raise ConnectionError("payments down")
        return "c"

    return saga


def test_async_steps_park_when_exhausted_and_resume_on_the_loop(db_url: str) -> None:
    log: list[str] = []
    down = {"charge": True}
    saga = _async_outage_saga("aio-pause-exhausted", down, log)

    async def main(coord: AsyncCoordinator) -> None:
        with pytest.raises(SagaHandedBack) as handed:
            await coord.run(saga)
        assert handed.value.status is SagaStatus.PAUSED
        saga_id = handed.value.saga_id
        parked = await coord.get(saga_id)
        assert parked.status is SagaStatus.PAUSED
        assert parked.step("charge").status is StepStatus.FAILED
        assert "release" not in log
        down.clear()
        done = await coord.resume(saga_id)
        assert done.status is SagaStatus.COMPLETED
        assert log == ["reserve", "charge 1", "charge 2", "charge 3"]
        assert_history_replays(coord.sync, saga_id)

    run_async(db_url, main, lease_ttl=5.0)


def test_an_async_pause_stops_an_async_saga_at_its_next_step_boundary(db_url: str) -> None:
    log: list[str] = []
    saga = Saga("aio-pause-live")
    started, go_on = asyncio.Event(), asyncio.Event()

    @saga.step()
    async def hold(ctx: StepContext) -> str:
        log.append(ctx.saga_id)
        started.set()
        await go_on.wait()  # not cancelled by the pause: it ends, then the saga stops
        return "held"

    @saga.step()
    async def capture(ctx: StepContext) -> str:
        log.append("capture")
        return "c"

    async def main(coord: AsyncCoordinator) -> None:
        coord.register(saga)
        running = asyncio.create_task(coord.run(saga))
        await started.wait()
        view = await coord.pause(log[0])
        assert (view.status, view.epoch) == (SagaStatus.PAUSED, 1)
        go_on.set()
        with pytest.raises(SagaHandedBack) as handed:
            await running
        assert handed.value.status is SagaStatus.PAUSED
        assert "capture" not in log
        parked = await coord.get(log[0])
        assert parked.owner is None
        assert parked.step("hold").status is StepStatus.SUCCEEDED
        assert (await coord.resume(log[0])).status is SagaStatus.COMPLETED

    run_async(db_url, main, lease_ttl=5.0)
