"""``AsyncCoordinator`` used as an asyncio application uses it.

No pytest plugin: each test drives its coroutine with ``asyncio.run``. What
only the async driver does is tested here: coroutine steps and
compensations on the caller's loop, many sagas on one loop, cancelling the
async steps in flight (on a failure, a timeout, a cancel request or a
deadline noticed at lease renewal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    RetryPolicy,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
    StepTimeoutError,
    current_step,
)
from tests.aio import steps
from tests.aio.support import most_in_flight, step_status, wait_for_step
from tests.integration.support import assert_history_replays, fast

ONE_ATTEMPT = RetryPolicy(max_attempts=1)


def run_async(
    db_url: str, main: Callable[[AsyncCoordinator], Awaitable[None]], **options: Any
) -> None:
    """``main(coord)`` on a fresh event loop with an ``AsyncCoordinator``, closed after."""

    async def session() -> None:
        async with AsyncCoordinator(db_url, **options) as coord:
            await main(coord)

    asyncio.run(session())


def test_async_steps_and_compensations_are_awaited_on_the_callers_loop(db_url: str) -> None:
    saga = Saga("aio-native")
    seen: list[tuple[str, Any]] = []

    @saga.step()
    async def reserve(ctx: StepContext) -> dict[str, str]:
        await asyncio.sleep(0)
        assert current_step() is ctx
        seen.append(("reserve", asyncio.current_task() is not None))
        return {"reservation": ctx.data["sku"]}

    @reserve.compensation
    async def release(ctx: StepContext) -> None:
        await asyncio.sleep(0)
        seen.append(("release", ctx.result))

    @saga.step(retry=ONE_ATTEMPT)
    async def charge(ctx: StepContext) -> None:
        seen.append(("charge", current_step().idempotency_key))
        raise ValueError("card declined")

    async def main(coord: AsyncCoordinator) -> None:
        with pytest.raises(SagaFailed) as failed:
            await coord.run(saga, data={"sku": "A1"}, key="order-1")
        assert failed.value.status is SagaStatus.COMPENSATED
        assert failed.value.failed_step == "charge"
        saga_id = failed.value.saga_id
        assert seen == [
            ("reserve", True),
            ("charge", f"{saga_id}:charge"),
            ("release", {"reservation": "A1"}),
        ]
        with pytest.raises(SagaFailed):  # the same key: the recorded outcome, nothing runs
            await coord.run(saga, data={"sku": "A1"}, key="order-1")
        assert len(seen) == 3
        view = await coord.get(saga_id)
        # charge has no compensation: nothing to undo, it stays failed.
        assert [s.status for s in view.steps] == [StepStatus.COMPENSATED, StepStatus.FAILED]
        assert [v.id for v in await coord.list(status="compensated")] == [saga_id]

    run_async(db_url, main)


def test_async_with_runs_coroutine_and_plain_functions_as_steps(db_url: str) -> None:
    async def main(coord: AsyncCoordinator) -> None:
        async with coord.saga("aio-cm", key="t-1") as s:
            first = await s.step(steps.abook, "flight", compensate=steps.aunbook)
            second = await s.step(steps.book, "hotel", compensate=steps.unbook)
        assert (first, second) == ("flight-booked", "hotel-booked")
        assert steps.LOG == [("abook", "flight", "abook", 1), ("book", "hotel", "book", 1)]
        assert (await coord.get(s.id)).status is SagaStatus.COMPLETED

        steps.LOG.clear()
        with pytest.raises(SagaFailed) as failed:  # noqa: PT012 - the block is the saga
            async with coord.saga("aio-cm", key="t-2") as s:
                await s.step(steps.abook, "flight", compensate=steps.aunbook)
                raise RuntimeError("the block itself failed")
        assert failed.value.status is SagaStatus.COMPENSATED
        assert steps.LOG[-1] == ("aunbook", "flight", "flight-booked")

    run_async(db_url, main)


def test_many_sagas_run_at_once_on_one_event_loop(db_url: str) -> None:
    sagas = 8
    arrived: list[str] = []
    everyone_in = asyncio.Event()
    saga = Saga("aio-many")

    @saga.step()
    async def check(ctx: StepContext) -> str:
        arrived.append(ctx.data)
        if len(arrived) == sagas:
            everyone_in.set()
        await asyncio.wait_for(everyone_in.wait(), 20)  # all sagas are in flight together
        return f"checked {ctx.data}"

    @saga.step()
    def confirm(ctx: StepContext) -> str:  # sync: in a worker thread
        return f"confirmed {ctx.results['check']}"

    async def main(coord: AsyncCoordinator) -> None:
        views = await asyncio.gather(
            *(coord.run(saga, data=f"order-{n}", key=f"k{n}") for n in range(sagas))
        )
        assert [v.status for v in views] == [SagaStatus.COMPLETED] * sagas
        assert [v.results["confirm"] for v in views] == [
            f"confirmed checked order-{n}" for n in range(sagas)
        ]
        assert len({v.id for v in views}) == sagas

    run_async(db_url, main)


def test_a_failing_branch_cancels_the_async_branches_in_flight(db_url: str) -> None:
    saga = Saga("aio-fan-cancel", max_concurrency=3)
    undone: list[tuple[str, Any]] = []

    @saga.step(after=())
    async def hold(ctx: StepContext) -> str:
        await steps.ahang("hold")
        return "never"

    @saga.step(after=(), retry=ONE_ATTEMPT)
    async def charge(ctx: StepContext) -> None:
        raise ValueError("card declined")

    @saga.step(after=())
    def notify(ctx: StepContext) -> str:  # a thread: waited for, never cancelled
        wait_for_step(store[0], ctx.saga_id, "charge", StepStatus.FAILED)
        return "notified"

    @saga.step(after=("hold", "charge", "notify"))
    async def ship(ctx: StepContext) -> None:
        steps.note("ship")

    for step in (hold, charge, notify):
        step.compensation(lambda ctx: undone.append((ctx.step, ctx.result)))
    store: list[Any] = []

    async def main(coord: AsyncCoordinator) -> None:
        store.append(coord.sync.store)
        with pytest.raises(SagaFailed) as failed:
            await coord.run(saga)
        assert failed.value.status is SagaStatus.COMPENSATED
        assert failed.value.failed_step == "charge"
        assert ("ahang cancelled", "hold") in steps.LOG
        assert ("ship",) not in steps.LOG
        # charge failed first, hold was cancelled at once, notify ended last.
        assert undone == [("notify", "notified"), ("hold", None), ("charge", None)]
        view = await coord.get(failed.value.saga_id)
        assert view.step("hold").error == "cancelled: step 'charge' failed"
        assert all(s.status is StepStatus.COMPENSATED for s in view.steps)

    run_async(db_url, main)


def test_max_concurrency_bounds_the_async_tasks_in_flight(db_url: str) -> None:
    saga = Saga("aio-bounded", max_concurrency=2)
    in_flight = [0, 0, 0]  # now, most, entered (one thread: the loop's)
    entered = asyncio.Condition()

    async def work(ctx: StepContext) -> str:
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        async with entered:  # steps go in pairs: wait for this one's partner to start
            partner = in_flight[2] // 2 * 2 + 2
            in_flight[2] += 1
            entered.notify_all()
            await asyncio.wait_for(entered.wait_for(lambda: in_flight[2] >= partner), 20)
        in_flight[0] -= 1
        return ctx.step

    for number in range(6):
        saga.step(name=f"s{number}", after=())(work)

    async def main(coord: AsyncCoordinator) -> None:
        view = await coord.run(saga)
        assert view.status is SagaStatus.COMPLETED
        assert in_flight[1] == 2
        assert most_in_flight(await coord.history(view.id)) == 2

    run_async(db_url, main)


def test_an_async_step_past_its_timeout_is_cancelled_then_retried(db_url: str) -> None:
    saga = Saga("aio-timeout")

    @saga.step(timeout=0.1, retry=fast(2))
    async def lookup(ctx: StepContext) -> int:
        if ctx.attempt == 1:
            await steps.ahang("lookup")
        return ctx.attempt

    async def main(coord: AsyncCoordinator) -> None:
        view = await coord.run(saga)
        assert view.results == {"lookup": 2}
        # Unlike a thread, the coroutine itself was stopped.
        assert steps.LOG == [("ahang", "lookup", 1), ("ahang cancelled", "lookup")]
        history = [(e.kind, e.attempt) for e in await coord.history(view.id) if e.step]
        assert history == [
            ("step_started", 1),
            ("attempt_failed", 1),
            ("step_started", 2),
            ("step_succeeded", 2),
        ]

    run_async(db_url, main)


def test_an_async_context_manager_step_past_its_timeout_is_cancelled(db_url: str) -> None:
    async def main(coord: AsyncCoordinator) -> None:
        with pytest.raises(SagaFailed) as failed:  # noqa: PT012 - the block is the saga
            async with coord.saga("aio-cm-timeout", key="k") as s:
                await s.step(steps.abook, "quote", compensate=steps.aunbook)
                await s.step(steps.ahang, "answer", timeout=0.1, retry=ONE_ATTEMPT)
        assert isinstance(failed.value.__cause__, StepTimeoutError)
        assert ("ahang cancelled", "answer") in steps.LOG
        assert steps.LOG[-1] == ("aunbook", "quote", "quote-booked")

    run_async(db_url, main)


@pytest.mark.parametrize("stop", ["cancel", "deadline"])
def test_a_stop_is_noticed_at_lease_renewal_during_a_long_async_step(
    db_url: str, stop: str
) -> None:
    saga = Saga(f"aio-renewal-{stop}")

    @saga.step()
    async def hold(ctx: StepContext) -> str:
        return "held"

    @hold.compensation
    async def release(ctx: StepContext) -> None:
        steps.note("release", ctx.result)

    @saga.step()
    async def wait(ctx: StepContext) -> None:
        await steps.ahang("wait")

    @wait.compensation
    async def unwait(ctx: StepContext) -> None:
        steps.note("unwait", ctx.result)

    async def main(coord: AsyncCoordinator) -> None:
        deadline = 0.3 if stop == "deadline" else None
        running = asyncio.create_task(coord.run(saga, key="k", deadline=deadline))
        while not steps.LOG:
            await asyncio.sleep(0.005)
        if stop == "cancel":  # from another coordinator: the lease is live, only recorded
            with Coordinator(db_url) as operator:
                (view,) = operator.list()
                assert (await asyncio.to_thread(operator.cancel, view.id)).cancel_requested
        with pytest.raises(SagaFailed) as failed:
            await running  # no commit comes until the step ends: the heartbeat notices
        expected = SagaStatus.CANCELLED if stop == "cancel" else SagaStatus.COMPENSATED
        assert failed.value.status is expected
        assert steps.LOG == [
            ("ahang", "wait", 1),
            ("ahang cancelled", "wait"),
            ("unwait", None),
            ("release", "held"),
        ]
        view = await coord.get(failed.value.saga_id)
        assert view.step("wait").error == "stopped: cancel requested or deadline passed"
        assert view.step("wait").status is StepStatus.COMPENSATED

    # Renewed every 0.5 s: the renewal is what notices the stop. Not shorter: the operator's
    # cancel would claim a lease that a busy machine's pause let run out, and unwind the saga
    # itself instead of recording the request.
    run_async(db_url, main, lease_ttl=1.5)


def test_an_async_group_cancels_its_async_calls_in_flight_on_a_failure(db_url: str) -> None:
    async def main(coord: AsyncCoordinator) -> None:
        steps.STORE.append(coord.sync.store)
        with pytest.raises(SagaFailed) as failed:  # noqa: PT012 - the block is the saga
            async with coord.saga("aio-group", key="k") as s:
                await s.step(steps.abook, "quote", compensate=steps.aunbook)
                await s.parallel(
                    s.call(steps.ahang, "slow", compensate=steps.aunbook, step_name="slow"),
                    s.call(
                        steps.arefuse_after,
                        "bad",
                        "slow",
                        compensate=steps.aunbook_after,
                        step_name="bad",
                    ),
                )
        assert failed.value.status is SagaStatus.COMPENSATED
        assert failed.value.failed_step == "bad"
        assert ("ahang cancelled", "slow") in steps.LOG
        undone = [entry[1] for entry in steps.LOG if entry[0] == "aunbook"]
        assert undone == ["slow", "bad", "quote"]  # slow ended (cancelled) after bad failed
        view = await coord.get(s.id)
        assert view.step("slow").error == "cancelled: step 'bad' failed"
        assert step_status(coord.sync.store, s.id, "slow") is StepStatus.COMPENSATED
        assert_history_replays(coord.sync, s.id)

    run_async(db_url, main)
