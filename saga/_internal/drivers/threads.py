"""The thread driver: answers a flow's effects with store calls and threads.

A flow runs in the caller's thread. Its branches (the steps of a declarative
saga) run in a thread pool when several are in flight at once; a single step
runs in the caller's thread, so a saga that runs one step at a time never
hands work to another thread. A step with a timeout runs in a thread of its
own, waited for that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from saga._internal import faults
from saga._internal.context import StepContext, entered
from saga._internal.drivers.functions import Action, Functions
from saga._internal.engine import effects as fx
from saga._internal.errors import StepTimeoutError
from saga._internal.lease import Heartbeat
from saga._internal.listening import Listeners
from saga._internal.ports import Commit, SagaRecord, SagaStore
from saga._internal.resource_view import NO_RESOURCES, ResourceView

T = TypeVar("T")

# Branch threads are created as needed and reused; the flow bounds how many run at
# once (a saga's max_concurrency), so this only caps a pool no saga can fill.
_MAX_BRANCH_THREADS = 1024

StepScope = Callable[[StepContext], contextlib.AbstractContextManager[Any]]
"""What the listeners enter around a step's action or compensation."""


def no_scope(_: StepContext) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


class ThreadDriver:
    """Runs flows against a sync store for one coordinator."""

    def __init__(
        self,
        store: SagaStore,
        lease_ttl: float,
        heartbeat: Heartbeat,
        functions: Functions,
        listeners: Listeners | None = None,
        resources: ResourceView = NO_RESOURCES,
    ) -> None:
        self.store = store
        self.functions = functions
        self.resources = resources
        self.draining = threading.Event()  # set by Coordinator.drain(): hand sagas back
        self._tokens = itertools.count(1)  # next() is atomic: branches' threads share it
        self._holds: dict[int, contextlib.AbstractContextManager[None]] = {}
        self.lease_ttl = lease_ttl
        self.heartbeat = heartbeat
        self.listeners = listeners if listeners is not None else Listeners()
        scope = self.listeners.step_scope
        self._answers: dict[type[Any], Callable[[Any, _Branches], Any]] = {
            fx.Write: lambda effect, _: self.write(effect),
            fx.Call: lambda effect, _: call(*self.resolved(effect), effect.timeout, scope),
            fx.Fault: lambda effect, _: faults.point(effect.point, effect.step),
            fx.Load: lambda effect, _: self.store.load(effect.saga_id),
            fx.Create: lambda effect, _: self.create(effect.record, effect.first),
            fx.Hold: lambda effect, branches: branches.track(self.hold(effect.record), effect),
            fx.LetGo: lambda effect, _: self.let_go(effect.token),
            **dict.fromkeys(fx.STORE_EFFECTS, lambda effect, _: self.store_effect(effect)),
            fx.Transact: lambda effect, _: self.transact(effect),
            fx.Tell: lambda effect, _: self.listeners.tell(
                effect.record, effect.events, durable=effect.durable
            ),
            fx.Sleep: lambda effect, _: self.sleep(effect),
            fx.Draining: lambda _, __: self.draining.is_set(),
            fx.WhoAsks: lambda _, __: _who_asks(),
            fx.Launch: lambda effect, branches: branches.launch(effect.branches),
            fx.Wait: lambda _, branches: branches.wait(),
            fx.CancelInFlight: lambda _, __: None,  # a thread cannot be stopped: waited for
        }

    def run(self, flow: fx.Flow[T]) -> T:
        """Carry ``flow`` out and return what it returns (or raise what it raises)."""
        branches = _Branches(self)
        try:
            return self.drive(flow, branches)
        finally:
            branches.close()
            for token in branches.holds:  # left by a flow that ended early
                self.let_go(token)

    def drive(self, flow: fx.Flow[T], branches: _Branches) -> T:
        """Answer ``flow``'s effects until it ends; an effect's error is thrown into the
        flow at its ``yield``, which decides what it means."""
        driving = fx.Driving(flow)
        with contextlib.closing(flow):
            for effect in driving:
                try:
                    driving.answer(self._answer(effect, branches))
                except Exception as raised:  # noqa: BLE001 - handed to the flow
                    driving.fail(raised)
        return driving.result

    def _answer(self, effect: fx.Effect, branches: _Branches) -> Any:
        return self._answers[type(effect)](effect, branches)

    def sleep(self, effect: fx.Sleep) -> None:
        """A retry's wait; an interruptible one ends when the process drains."""
        if effect.interruptible:
            self.draining.wait(effect.seconds)
        else:
            time.sleep(effect.seconds)

    def resolved(
        self, effect: fx.Call | fx.Transact, session: Any = None
    ) -> tuple[Action, StepContext]:
        """The function ``effect`` names, and its context with this coordinator's
        resources (the engine knows none of them) and a transaction's ``session``."""
        context = effect.context
        if self.resources or session is not None:  # else the context's defaults say so
            context = dataclasses.replace(context, session=session, resources=self.resources)
        return self.functions.action(effect.target), context

    def write(self, effect: fx.Write) -> bool:
        """Commit ``effect``'s change; the listeners are told once it committed."""
        with self.listeners.writing(effect.record, effect.change):
            return self.store.commit(effect.change)

    def store_effect(self, effect: fx.StoreEffect) -> Any:
        """``effect``'s one call of the store (a claim names this owner: it is recorded
        first, so that its death can be told)."""
        store = self.store
        match effect:
            case fx.Find(name, key):
                return store.find(name, key)
            case fx.Claim(saga_id, owner, event, guard):
                self.heartbeat.register()
                return store.claim(saga_id, owner, self.lease_ttl, event, guard)
            case fx.ClaimStuck(owner, limit, runnable):
                self.heartbeat.register()
                return store.claim_expired(owner, self.lease_ttl, limit, runnable)
            case fx.Release(change):
                return store.commit(change)
            case fx.NoteFenced(saga_id, epoch, event):
                return store.record_fenced_event(saga_id, epoch, event)
            case fx.ReadHistory(saga_id):
                return store.events(saga_id)
            case fx.RequestCancel(saga_id, event, guard):
                return store.request_cancel(saga_id, event, guard)
            case fx.RequestPause(saga_id, event, guard):
                return store.request_pause(saga_id, event, guard)

    def create(self, record: SagaRecord, first: Commit) -> tuple[SagaRecord, bool]:
        """Create the saga with its first commit (or find the one its key names); the
        listeners are told when this call created it."""
        record = self.listeners.starting(record)
        self.heartbeat.register()  # before any row names this owner: no saga without it
        stored, created = self.store.create(record, first, self.lease_ttl)
        if created:
            self.listeners.committed(record, first)
        else:
            self.listeners.not_created(record)
        return stored, created

    def hold(self, record: SagaRecord, on_stop: Callable[[], None] | None = None) -> int:
        """Keep ``record``'s lease alive until ``let_go`` with the token returned;
        ``on_stop`` is called (on the heartbeat's thread) if the renewal finds a stop
        asked for."""
        holding = self.heartbeat.holding(record.id, record.epoch, on_stop)
        holding.__enter__()
        token = next(self._tokens)
        self._holds[token] = holding
        return token

    def let_go(self, token: int) -> None:
        """Stop keeping alive the lease ``token`` holds (again: nothing)."""
        holding = self._holds.pop(token, None)
        if holding is not None:
            holding.__exit__(None, None, None)

    def transact(self, effect: fx.Transact) -> tuple[Any, bool | None, Commit]:
        """Run a transactional action with the store's session, its outcome committed in
        the same transaction; (its result, must the saga stop, the change committed)."""

        def work(session: Any) -> Any:
            return call(*self.resolved(effect, session), None, self.listeners.step_scope)

        committed: list[Commit] = []

        def change(result: Any) -> Commit:
            committed.append(effect.outcome.change(result))  # the try that committed is last
            return committed[-1]

        result, stop = self.store.transact(work, change)
        self.listeners.committed(effect.outcome.record, committed[-1])
        return result, stop, committed[-1]


class _Branches:
    """The branches of one flow in flight: in a pool, or one deferred to run in the
    caller's thread at the next ``Wait`` when it is the only one."""

    def __init__(self, driver: ThreadDriver) -> None:
        self._driver = driver
        self._pool: ThreadPoolExecutor | None = None
        self._deferred: list[fx.Branch] = []
        # Each branch's future is put here as it ends, so a wait takes what has ended
        # instead of watching every branch in flight (concurrent.futures.wait hooks a
        # waiter onto each at every call: 256 per step of a saga at concurrency 256).
        self._ended: queue.SimpleQueue[Future[fx.Finished]] = queue.SimpleQueue()
        self._in_flight = 0  # only the flow's own thread launches and waits
        self.holds: list[int] = []  # the tokens of this run's holds that end with it

    def track(self, token: int, hold: fx.Hold) -> int:
        if not hold.lasting:
            self.holds.append(token)
        return token

    def launch(self, branches: tuple[fx.Branch, ...]) -> None:
        if not self._in_flight and not self._deferred and len(branches) == 1:
            self._deferred.append(branches[0])
            return
        for branch in [*self._deferred, *branches]:
            self._submit(branch)
        self._deferred = []

    def _submit(self, branch: fx.Branch) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(_MAX_BRANCH_THREADS, thread_name_prefix="saga-step")
        future = self._pool.submit(self._driver.drive, branch.flow, self)
        self._in_flight += 1
        future.add_done_callback(self._ended.put)

    def wait(self) -> fx.Waited:
        if self._deferred:  # nothing else in flight: run it here
            return fx.Waited([self._driver.drive(self._deferred.pop().flow, self)])
        if not self._in_flight:
            return fx.Waited([])
        ended = [self._ended.get()]  # the next to end, and whatever else ended meanwhile
        while not self._ended.empty():
            ended.append(self._ended.get())
        self._in_flight -= len(ended)
        # result() re-raises what ended a branch early (a lost lease, a dead database).
        return fx.Waited.of(future.result() for future in ended)

    def close(self) -> None:
        """Wait for the branches still in flight (a thread cannot be stopped)."""
        for branch in self._deferred:
            branch.flow.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def call(
    action: Action, context: StepContext, timeout: float | None, scope: StepScope = no_scope
) -> Any:
    """Run ``action`` as the current step, inside the listeners' ``scope`` of it; give up
    waiting after ``timeout``."""
    if timeout is None:
        with entered(context), scope(context):
            return _awaited(action(context))
    outcome: dict[str, Any] = {}
    snapshot = contextvars.copy_context()

    def target() -> None:
        with entered(context), scope(context):
            try:
                outcome["result"] = _awaited(action(context))
            except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = error

    thread = threading.Thread(target=snapshot.run, args=(target,), daemon=True)
    thread.name = f"saga-step-{context.step}"
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise StepTimeoutError(context.step, timeout)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _awaited(result: Any) -> Any:
    """An async step or compensation driven to its end when the thread driver runs it
    (for example ``saga recover`` finishing a saga whose steps are coroutines)."""
    if not inspect.isawaitable(result):
        return result

    async def wait_for_it() -> Any:
        return await result

    return asyncio.run(wait_for_it())


def _who_asks() -> dict[str, str]:
    """The operator behind a verb (an operator's question: not loaded to run a saga)."""
    from saga._internal.operator_identity import operator_detail

    return operator_detail()
