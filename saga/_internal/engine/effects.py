"""What a flow asks its driver to do, and what the driver answers.

A flow is a generator: it yields an effect, the driver carries it out and
sends the answer back (or throws the error the effect raised into the flow, at
the ``yield``). Flows hold every decision; the two drivers
(:mod:`saga._internal.drivers.threads`, :mod:`saga._internal.drivers.tasks`) only answer effects,
each in its own way: a store call or an awaited one, a thread or a task.

=================  ==========================================================
effect             the driver's answer
=================  ==========================================================
``Write``          commits the fenced change; answers the store's "must this
                   saga stop?" (a cancel request or a passed deadline)
``Load``           the saga as stored, or None
``Create``         creates a saga with its first commit; answers (the saga as
                   stored, whether this call created it)
``Hold``           keeps the saga's lease alive from now on; answers a
                   token (an int) for ``LetGo``; a hold not ``lasting``
                   also ends with the driver's run of the flow
``LetGo``          stops keeping alive the lease the token names
``Find``           the saga a name and key started, or None
``Claim``          takes the saga (epoch + 1, its guard checked inside the
                   claim); answers the saga as claimed
``ClaimStuck``     takes up to ``limit`` sagas whose lease ran out (only
                   those ``runnable`` admits); answers their ids
``Release``        commits a hand-back of a claimed saga, untouched;
                   answers the store's "must this saga stop?"
``NoteFenced``     records an event at the claim's epoch; answers whether
                   it was recorded (not once another process claimed it)
``ReadHistory``    the saga's events, oldest first
``RequestCancel``  asks the saga's owner to stop (its guard checked inside
                   the write); answers None
``RequestPause``   turns a running saga paused, alike; answers None
``Call``           runs the function its ``target`` names (data: see
                   :mod:`~.targets`) as the current step (with a timeout,
                   when it has one); answers its result
``Transact``       runs its target inside a store transaction that also
                   commits the change its ``outcome`` (a ``Recorded``: which
                   step, which record) makes of the action's result;
                   answers (result, must stop, the change committed)
``Tell``           tells the coordinator's listeners of events (``Write``,
                   ``Create`` and ``Transact`` tell theirs once committed);
                   answers None
``Sleep``          waits that many seconds (a retry's backoff); an
                   ``interruptible`` one ends early once the process drains
``WhoAsks``        who is acting, for an operator's event (the OS user and
                   host, and what an ``operator_source`` block adds)
``Draining``       whether this process is stopping (``Coordinator.drain()``):
                   a flow then hands its saga back at the next boundary
``Fault``          a named crash point (``saga._internal.faults``); answers None
``Launch``         starts branch flows, to run concurrently; answers None
``Wait``           waits until at least one branch ended; answers ``Waited``
``CancelInFlight`` cancels the branches that may be cancelled (asyncio tasks
                   of async compensatable actions; a thread cannot be
                   stopped); answers None
=================  ==========================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar, get_args

from saga._internal.codec import Encoded, encode_result
from saga._internal.context import StepContext
from saga._internal.engine import records
from saga._internal.engine.decisions import Cursor
from saga._internal.engine.targets import Target
from saga._internal.errors import SagaHandedBack
from saga._internal.policy import RetryPolicy
from saga._internal.ports import (
    ClaimGuard,
    Commit,
    Event,
    Runnable,
    SagaRecord,
    StepRecord,
    StepWrite,
)
from saga._internal.status import SagaStatus

T = TypeVar("T")


class CodeRefs(Protocol):
    """How the engine names a function for another process and finds a stored one
    again (``saga._internal.refs.Resolver``): handed in, so that the engine imports no code."""

    compensation_retry: RetryPolicy  # for a compensation stored by reference
    compensation_wait_in_place: float

    def resolve(self, ref: str) -> Callable[..., Any]:
        """The function ``ref`` names, or ``UnsafeReferenceError`` (the engine only
        checks: the driver resolves the reference again to call it)."""

    def reference(self, fn: object, role: str) -> str: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    change: Commit
    record: SagaRecord | None = None  # the saga as it stood: who the listeners are told of


@dataclasses.dataclass(frozen=True, slots=True)
class Load:
    saga_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    target: Target
    context: StepContext
    timeout: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Create:
    record: SagaRecord
    first: Commit


@dataclasses.dataclass(frozen=True, slots=True)
class Hold:
    record: SagaRecord
    watch: bool = False  # the asyncio driver also listens for a stop asked meanwhile
    lasting: bool = False  # held across runs (a context-manager saga's block) until LetGo


@dataclasses.dataclass(frozen=True, slots=True)
class LetGo:
    token: int


@dataclasses.dataclass(frozen=True, slots=True)
class Find:
    """The saga ``name`` started under ``key``, or None."""

    name: str
    key: str


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """Take ``saga_id`` for ``owner`` (an operator's verb, a rerun, a recovery), for
    the driver's lease."""

    saga_id: str
    owner: str
    event: Event
    guard: ClaimGuard | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimStuck:
    """Take up to ``limit`` sagas whose lease ran out, oldest lease first, for the
    driver's lease."""

    owner: str
    limit: int
    runnable: Runnable | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Release:
    """Hand a claimed saga back untouched (``change`` releases its lease)."""

    change: Commit


@dataclasses.dataclass(frozen=True, slots=True)
class NoteFenced:
    """Record ``event`` for ``saga_id`` only while its epoch is still ``epoch``."""

    saga_id: str
    epoch: int
    event: Event


@dataclasses.dataclass(frozen=True, slots=True)
class ReadHistory:
    saga_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class RequestCancel:
    """Ask the owner of ``saga_id`` to stop and unwind (``guard`` checked in the write)."""

    saga_id: str
    event: Event
    guard: ClaimGuard | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RequestPause:
    """Turn ``saga_id`` paused (``guard`` checked in the write); its owner, if alive,
    hands it back at its next step boundary."""

    saga_id: str
    event: Event
    guard: ClaimGuard | None = None


StoreEffect = (
    Find | Claim | ClaimStuck | Release | NoteFenced | ReadHistory | RequestCancel | RequestPause
)
"""The effects a driver answers with one call of its sync store."""
STORE_EFFECTS: tuple[type[StoreEffect], ...] = get_args(StoreEffect)


@dataclasses.dataclass(frozen=True, slots=True)
class Recorded:
    """What a transactional action's result is recorded as, in the transaction that ran
    it: step ``step`` of ``record`` succeeded with it (its encoding bounded by
    ``payload_limit``), or, ``undone``, was compensated. Data, not a closure: the driver
    asks :meth:`change` for the commit once the result exists (again on a retry of the
    transaction), and answers the change it committed."""

    record: SagaRecord
    step: str
    undone: bool = False
    payload_limit: int = 0

    def change(self, result: Any) -> Commit:
        """The commit recording ``result`` (a pure function of this and ``result``)."""
        if self.undone:
            write_, event = records.undone(self.record, self.step, result)
        else:
            described = f"result of step {self.step!r}"
            encoded = encode_result(result, described, self.payload_limit)
            write_, event = records.succeeded(self.record, self.step, encoded)
        return records.commit(self.record, [write_], [event])


@dataclasses.dataclass(frozen=True, slots=True)
class Transact:
    target: Target
    context: StepContext
    outcome: Recorded


@dataclasses.dataclass(frozen=True, slots=True)
class Tell:
    """Events for the coordinator's listeners that no ``Write`` carried: a claim the
    store recorded, or a decision this process made (``durable=False``)."""

    record: SagaRecord
    events: tuple[Event, ...]
    durable: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float
    interruptible: bool = False  # a compensation's backoff: not worth keeping a stop waiting


@dataclasses.dataclass(frozen=True, slots=True)
class Draining:
    """Asks whether the process is stopping; answers a bool."""


@dataclasses.dataclass(frozen=True, slots=True)
class WhoAsks:
    """Asks who is acting, for an operator's event; answers a mapping (``by``, ``host``,
    and what an ``operator_source`` block adds)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Fault:
    point: str
    step: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Finished:
    """How one branch ended: its step's latest record, and its encoded result (None for
    a transactional step, whose success committed with its writes) or its error (a
    text when there was no exception: it was cancelled)."""

    step: StepRecord
    encoded: Encoded | None
    error: BaseException | str | None
    ended: float  # on the monotonic clock: the order in which branches ended
    result: Any = None  # the result itself, for ``s.parallel`` to return

    @property
    def name(self) -> str:
        return self.step.name


@dataclasses.dataclass(slots=True)
class Branch:
    """A step to run beside others: its flow, the cursor that flow advances (what the
    store holds for the step, read when the branch is cancelled), and whether a driver
    may cancel it."""

    name: str
    flow: Flow[Finished]
    cursor: Cursor
    cancellable: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Launch:
    branches: tuple[Branch, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Waited:
    """What ended (in the order it ended), and whether a stop was asked for meanwhile
    (the asyncio driver's lease renewal saw a cancel request or a passed deadline)."""

    finished: list[Finished]
    stop_requested: bool = False

    @classmethod
    def of(cls, finished: Iterable[Finished], stop_requested: bool = False) -> Waited:
        """``finished`` put in the order the branches ended."""
        return cls(sorted(finished, key=lambda one: one.ended), stop_requested)


@dataclasses.dataclass(frozen=True, slots=True)
class CancelInFlight:
    why: str


Effect = (
    Write
    | Load
    | Create
    | Hold
    | LetGo
    | Find
    | Claim
    | ClaimStuck
    | Release
    | NoteFenced
    | ReadHistory
    | RequestCancel
    | RequestPause
    | Call
    | Transact
    | Tell
    | Sleep
    | Draining
    | WhoAsks
    | Fault
    | Launch
    | Wait
    | CancelInFlight
)

Flow = Generator[Effect, Any, T]
"""A flow that ends with a ``T``."""

WAIT = Wait()
DRAINING = Draining()
WHO_ASKS = WhoAsks()


class Driving(Generic[T]):
    """A flow as a driver carries it out, in both drivers: iterating gives its effects
    one by one; the driver answers each with :meth:`answer`, or with :meth:`fail` if
    carrying it out raised (thrown into the flow at its ``yield``, which decides what
    it means); ``result`` is what the flow returned, once the iteration ended. What the
    flow raises comes out of the iteration."""

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self._reply: Any = None
        self._error: Exception | None = None
        self.result: T

    def __iter__(self) -> Iterator[Effect]:
        flow = self._flow
        while True:
            reply, error, self._reply, self._error = self._reply, self._error, None, None
            try:
                effect = flow.send(reply) if error is None else flow.throw(error)
            except StopIteration as done:
                self.result = done.value
                return
            yield effect

    def answer(self, reply: Any) -> None:
        self._reply = reply

    def fail(self, error: Exception) -> None:
        self._error = error


def holding(record: SagaRecord, flow: Flow[T], watch: bool = False) -> Flow[T]:
    """``flow`` with ``record``'s lease kept alive while it runs. A flow the driver
    abandons (closed at a ``yield``) yields nothing more: the driver lets go of the
    holds of a run that ended."""
    token = yield Hold(record, watch)
    try:
        result = yield from flow
    except GeneratorExit:
        raise
    except BaseException:
        yield LetGo(token)
        raise
    yield LetGo(token)
    return result


def write(
    record: SagaRecord,
    writes: Sequence[StepWrite] = (),
    events: Sequence[Event] = (),
    status: SagaStatus | None = None,
    error: str | None = None,
) -> Flow[SagaRecord]:
    """Commit changes to ``record`` (fenced) and return the record as it now stands."""
    change = records.commit(record, writes, events, status, error)
    stop = yield Write(change, record)
    return records.apply(record, change, stop)


STOPPING = "this process is stopping"
"""Why a saga is handed back by a process that drains."""


def hand_back(
    record: SagaRecord,
    writes: Sequence[StepWrite] = (),
    events: Sequence[Event] = (),
    wait: float = 0.0,
    why: str = STOPPING,
) -> Flow[SagaHandedBack]:
    """Commit ``writes`` with the lease given up (fenced, like any commit), so that any
    process may take the saga at once, or after ``wait`` seconds (a compensation's next
    attempt that is due only then); return what to raise. The saga's status stays."""
    released = Event("lease_released", detail={"why": why})
    change = dataclasses.replace(
        records.commit(record, writes, [*events, released]), release=True, release_for=wait
    )
    yield Write(change, record)
    return SagaHandedBack(record.id, record.status, None if why == STOPPING else why)
