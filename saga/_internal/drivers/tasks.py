"""The asyncio driver: answers a flow's effects with awaited store calls and tasks.

Store calls go through the async form of the store (``saga._internal.store.async_store``:
native async statements for PostgreSQL's hot path, worker threads otherwise).
Async actions are awaited on the caller's event loop, sync ones run in a worker
thread, and a transactional step runs in a worker thread inside its store
transaction. Branches are tasks, so unlike threads they can be cancelled: an
async compensatable step is cancelled when the saga fails or is asked to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from saga._internal import faults
from saga._internal.context import StepContext, entered
from saga._internal.drivers.functions import Action
from saga._internal.drivers.threads import StepScope, ThreadDriver, no_scope
from saga._internal.engine import effects as fx
from saga._internal.engine.forward import cancelled, is_async
from saga._internal.errors import StepTimeoutError
from saga._internal.operator_identity import operator_detail
from saga._internal.ports import AsyncSagaStore, Commit, SagaRecord

T = TypeVar("T")


DRAIN_POLL = 0.1
"""Seconds between two looks at the drain flag during an interruptible wait."""


class TaskDriver:
    """Runs flows on an event loop for one ``AsyncCoordinator``."""

    def __init__(self, store: AsyncSagaStore, threads: ThreadDriver) -> None:
        self.store = store
        self.threads = threads  # for what only runs in a thread: transactional steps
        self.functions = threads.functions
        self.listeners = threads.listeners
        scope = self.listeners.step_scope
        self._answers: dict[type[Any], Callable[[Any, _Tasks], Awaitable[Any]]] = {
            fx.Write: lambda effect, _: self.write(effect),
            fx.Call: lambda effect, _: call(*threads.resolved(effect), effect.timeout, scope),
            fx.Fault: _fault,
            fx.Load: lambda effect, _: self.store.load(effect.saga_id),
            fx.Create: lambda effect, _: self.create(effect.record, effect.first),
            fx.Tell: _tell,
            fx.Hold: _hold,
            fx.LetGo: _let_go,
            **dict.fromkeys(
                fx.STORE_EFFECTS,
                lambda effect, _: asyncio.to_thread(self.threads.store_effect, effect),
            ),
            fx.Transact: lambda effect, _: asyncio.to_thread(self.threads.transact, effect),
            fx.Sleep: lambda effect, _: self.sleep(effect),
            fx.Draining: lambda _, __: _answered(threads.draining.is_set()),
            fx.WhoAsks: lambda _, __: _answered(operator_detail()),
            fx.Launch: _launch,
            fx.Wait: lambda _, tasks: tasks.wait(),
            fx.CancelInFlight: _cancel_in_flight,
        }

    async def run(self, flow: fx.Flow[T], shielded: bool = False) -> T:
        """Carry ``flow`` out. ``shielded``: the flow is a step's attempts, whose writes
        complete even when the caller is cancelled (see :meth:`drive`)."""
        tasks = _Tasks(self)
        try:
            return await self.drive(flow, tasks, shielded)
        finally:
            await tasks.abandon()
            for token in tasks.holds:  # left by a flow that ended early
                self.threads.let_go(token)

    async def drive(self, flow: fx.Flow[T], tasks: _Tasks, branch: bool = False) -> T:
        """Answer ``flow``'s effects until it ends (see ``ThreadDriver.drive``). In a
        ``branch`` a write completes even when the task is cancelled meanwhile, and the
        flow takes its result: the branch's record must say what the store holds,
        since a cancelled step is then recorded (failed) from it."""
        driving = fx.Driving(flow)
        with contextlib.closing(flow):
            for effect in driving:
                try:
                    if branch and type(effect) is fx.Write:
                        driving.answer(await self._shielded_write(effect, flow))
                    else:
                        driving.answer(await self._answer(effect, tasks))
                except Exception as raised:  # noqa: BLE001 - handed to the flow
                    driving.fail(raised)
        return driving.result

    def _answer(self, effect: fx.Effect, tasks: _Tasks) -> Awaitable[Any]:
        return self._answers[type(effect)](effect, tasks)

    async def write(self, effect: fx.Write) -> bool:
        """Commit ``effect``'s change; the listeners are told once it committed."""
        with self.listeners.writing(effect.record, effect.change):
            return await self.store.commit(effect.change)

    async def create(self, record: SagaRecord, first: Commit) -> tuple[SagaRecord, bool]:
        """Create the saga with its first commit (see ``ThreadDriver.create``)."""
        record = self.listeners.starting(record)
        if not self.threads.heartbeat.registered:
            await asyncio.to_thread(self.threads.heartbeat.register)
        stored, created = await self.store.create(record, first, self.threads.lease_ttl)
        if created:
            self.listeners.committed(record, first)
        else:
            self.listeners.not_created(record)
        return stored, created

    async def sleep(self, effect: fx.Sleep) -> None:
        """A retry's wait; an interruptible one ends soon after the process drains. The
        drain is a thread's flag (set from a signal handler): looked at every
        ``DRAIN_POLL`` seconds, on the loop, so that a long backoff holds no thread."""
        if not effect.interruptible:
            await asyncio.sleep(effect.seconds)
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + effect.seconds
        while not self.threads.draining.is_set() and (left := end - loop.time()) > 0:
            await asyncio.sleep(min(left, DRAIN_POLL))

    async def _shielded_write(self, effect: fx.Write, flow: fx.Flow[Any]) -> bool | None:
        writing = asyncio.ensure_future(self.write(effect))
        try:
            return await asyncio.shield(writing)
        except asyncio.CancelledError:
            stop = await writing
            with contextlib.suppress(StopIteration):
                flow.send(stop)  # the flow takes what the store now holds, then stops
            raise


class _Tasks:
    """The branches of one flow in flight, as tasks."""

    def __init__(self, driver: TaskDriver) -> None:
        self.driver = driver
        self.running: dict[asyncio.Task[fx.Finished], fx.Branch] = {}
        self.cancelled_at: dict[str, float] = {}
        self.why_cancelled = "cancelled"
        self._watched: object | None = None  # the saga whose stop is listened for
        self._stopped = False  # its stop was asked for, not yet told to the flow
        self._wake: asyncio.Future[None] | None = None  # ends the Wait in progress
        self.holds: list[int] = []  # the tokens of this run's holds that end with it

    def watch(self) -> Callable[[], None]:
        """What the heartbeat calls (on its thread) when it finds a stop asked for: the
        flow hears of it at its next ``Wait``, as ``Waited.stop_requested``. A run may
        carry several sagas on, one after another (recover): only the latest is heard."""
        watched = self._watched = object()
        self._stopped = False
        loop = asyncio.get_running_loop()

        def on_the_loop() -> None:
            if self._watched is not watched:  # a later saga of the run watches now
                return
            self._stopped = True
            if self._wake is not None and not self._wake.done():
                self._wake.set_result(None)

        def stop_requested() -> None:
            loop.call_soon_threadsafe(on_the_loop)

        return stop_requested

    def launch(self, branches: tuple[fx.Branch, ...]) -> None:
        for branch in branches:
            task = asyncio.create_task(self._branch(branch), name=f"saga-step-{branch.name}")
            self.running[task] = branch

    async def _branch(self, branch: fx.Branch) -> fx.Finished:
        try:
            return await self.driver.drive(branch.flow, self, branch=True)
        except asyncio.CancelledError:
            self.cancelled_at[branch.name] = time.monotonic()  # its place in the order
            raise

    async def wait(self) -> fx.Waited:
        if not self._stopped:
            waiting: set[asyncio.Future[Any]] = set(self.running)
            if self._watched is not None:  # a plain future: no task, no extra loop turn
                self._wake = asyncio.get_running_loop().create_future()
                waiting.add(self._wake)
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            self._wake = None
        stop_requested, self._stopped = self._stopped, False
        finished = [self._finished(task) for task in list(self.running) if task.done()]
        return fx.Waited.of(finished, stop_requested)

    def _finished(self, task: asyncio.Future[Any]) -> fx.Finished:
        """How a finished task ended; a cancelled one counts as a failed attempt."""
        branch = self.running.pop(task)  # type: ignore[call-overload]
        if task.cancelled():
            at = self.cancelled_at.get(branch.name, time.monotonic())
            return cancelled(branch, self.why_cancelled, at)
        result: fx.Finished = task.result()  # a lost lease or a dead database propagates
        return result

    def cancel_in_flight(self, why: str) -> None:
        self.why_cancelled = why
        for task, branch in self.running.items():
            if branch.cancellable:
                task.cancel()

    async def abandon(self) -> None:
        """Leaving early (a lost lease, a dead database, the caller cancelled): stop
        waiting for the steps in flight; recovery finishes the saga."""
        self._watched = None
        tasks = list(self.running)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def _hold(effect: fx.Hold, tasks: _Tasks) -> int:
    on_stop = tasks.watch() if effect.watch else None
    token = tasks.driver.threads.hold(effect.record, on_stop)
    if not effect.lasting:
        tasks.holds.append(token)
    return token


async def _let_go(effect: fx.LetGo, tasks: _Tasks) -> None:
    tasks.driver.threads.let_go(effect.token)


async def _tell(effect: fx.Tell, tasks: _Tasks) -> None:
    tasks.driver.listeners.tell(effect.record, effect.events, durable=effect.durable)


async def _answered(value: T) -> T:
    return value


async def _fault(effect: fx.Fault, _: _Tasks) -> None:
    faults.point(effect.point, effect.step)


async def _launch(effect: fx.Launch, tasks: _Tasks) -> None:
    tasks.launch(effect.branches)


async def _cancel_in_flight(effect: fx.CancelInFlight, tasks: _Tasks) -> None:
    tasks.cancel_in_flight(effect.why)


async def call(
    action: Action, context: StepContext, timeout: float | None, scope: StepScope = no_scope
) -> Any:
    """Run ``action`` as the current step, inside the listeners' ``scope`` of it: awaited
    if async, in a thread if not; give up after ``timeout``."""
    with entered(context), scope(context):
        running = action(context) if is_async(action) else asyncio.to_thread(action, context)
        limit = asyncio.timeout(timeout)
        try:
            async with limit:
                result = await running
        except TimeoutError:
            if timeout is not None and limit.expired():
                raise StepTimeoutError(context.step, timeout) from None
            raise
        if inspect.isawaitable(result):  # a sync wrapper that returned a coroutine
            result = await result
        return result
