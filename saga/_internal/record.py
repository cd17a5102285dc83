"""The records of the storage port: what a store keeps and what it is asked to write.

A saga (:class:`SagaRecord`) with its steps (:class:`StepRecord`, the success
stack) and its history (:class:`EventRecord`); one change to it
(:class:`Commit`: step writes and events, fenced by the saga's epoch); and what
a claim, a renewal or a listing is asked with (:class:`ClaimGuard`,
:class:`Runnable`, :class:`ListQuery`) or answers (:class:`Renewal`). Plain
frozen data, no I/O: the engine builds and reads them, and every store
(:mod:`saga._internal.ports`) writes and reads them back.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import uuid
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from saga._internal.status import MAY_HAVE_ACTED, PIVOT_ACTED, SagaStatus, StepKind, StepStatus

SagaKind = Literal["declarative", "imperative"]
Stamp = Literal["started", "finished"] | None


@dataclasses.dataclass(frozen=True)  # not slotted: see _Copier
class StepRecord:
    """One row of the success stack. JSON fields hold encoded text."""

    name: str
    seq: int
    status: StepStatus
    attempt: int
    kind: StepKind = StepKind.COMPENSATABLE
    transactional: bool = False
    action_ref: str | None = None
    compensation_ref: str | None = None
    args: str | None = None
    input_digest: str | None = None
    result: str | None = None
    output_digest: str | None = None
    error: str | None = None
    undo_attempt: int = 0
    started_at: float | None = None
    finished_at: float | None = None


@dataclasses.dataclass(frozen=True)  # not slotted: see _Copier
class SagaRecord:
    """One saga instance and, when loaded with it, its steps in seq order."""

    id: str
    name: str
    key: str | None
    kind: SagaKind
    status: SagaStatus
    input: str | None
    version: str | None
    owner: str | None
    epoch: int
    lease_expires_at: float | None = None
    created_at: float | None = None
    updated_at: float | None = None
    error: str | None = None
    deadline: float | None = None
    cancel_requested: bool = False
    steps: tuple[StepRecord, ...] = ()
    fingerprint: str | None = None
    """The definition's fingerprint at the start (``version`` is its declared version);
    None for a context-manager saga."""
    trace_context: str | None = None
    """The W3C trace-context headers (JSON) of the span its run started in, if traced."""
    stop: bool = False
    """Not stored: the last commit's answer that the saga must stop at its next step."""
    names: dict[str, int] | None = dataclasses.field(
        default=None, init=False, compare=False, repr=False
    )
    """Not stored: step name -> position in ``steps``, built by ``step()`` on first use.
    Not an init field, so ``dataclasses.replace`` never carries a stale index over."""

    def step(self, name: str) -> StepRecord | None:
        """The recorded step called ``name`` (an index is built on first use)."""
        if self.names is None:  # frozen, but the index is derived: safe to fill in once
            object.__setattr__(self, "names", {s.name: i for i, s in enumerate(self.steps)})
        assert self.names is not None
        position = self.names.get(name)
        return None if position is None else self.steps[position]


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """A history entry to append, in the same transaction as its change."""

    kind: str
    step: str | None = None
    attempt: int | None = None
    detail: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class EventRecord:
    """A stored history entry."""

    id: int
    saga_id: str
    at: float
    kind: str
    step: str | None
    attempt: int | None
    epoch: int | None
    detail: dict[str, Any] | None


@dataclasses.dataclass(frozen=True, slots=True)
class StepWrite:
    """Write ``step`` (insert when ``new``); ``stamp`` sets that time column to now."""

    step: StepRecord
    new: bool = False
    stamp: Stamp = None


class _Copier:
    """``dataclasses.replace`` for one frozen record class, at a quarter of its cost.

    ``replace`` inspects every field's kind and calls ``__init__``, which sets each
    field through ``object.__setattr__``; a 3-step saga copies its records 16 times
    (each step's start and end, the saga with each commit's steps), which made copying
    the largest single cost of saga's own Python on that path. These records keep
    their fields in an instance ``__dict__`` (no ``__slots__``) so that a copy is two
    dict updates in C: about 0.6 µs against 2 µs for a slotted copy that set each slot
    and 5-6 µs for ``replace``. Fields not given to ``__init__`` get their default, as
    ``replace`` gives them.
    """

    def __init__(self, cls: type[Any]) -> None:
        fields = dataclasses.fields(cls)
        self.cls = cls
        self.names = frozenset(f.name for f in fields if f.init)
        self.defaults = {f.name: f.default for f in fields if not f.init}

    def __call__(self, record: Any, changes: dict[str, Any]) -> Any:
        if not self.names.issuperset(changes):
            unknown = sorted(set(changes) - self.names)
            raise TypeError(f"{self.cls.__name__} has no field {unknown[0]!r} to replace")
        copy = object.__new__(self.cls)
        values = copy.__dict__
        values.update(record.__dict__)
        values.update(changes)
        values.update(self.defaults)
        return copy


_Copied = TypeVar("_Copied", "StepRecord", "SagaRecord")
_COPIERS = {cls: _Copier(cls) for cls in (StepRecord, SagaRecord)}


def replaced(record: _Copied, **changes: Any) -> _Copied:
    """``record`` with ``changes``, as ``dataclasses.replace`` makes it (faster: the
    engine copies records on every commit)."""
    copied: _Copied = _COPIERS[type(record)](record, changes)
    return copied


class _Tokens:
    """Commit tokens: a random prefix per process and a counter. Unique as a uuid4 would
    be, at a tenth of the cost (a token is made for every commit, on the hot path)."""

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)  # a forked child gets its own prefix

    def reset(self) -> None:
        self.prefix = uuid.uuid4().hex[:20]
        self.counter = itertools.count()

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.counter):012x}"


_token = _Tokens()


@dataclasses.dataclass(frozen=True, slots=True)
class Commit:
    """Everything one transaction writes for one saga, fenced by ``epoch``.

    ``token`` lets a retry after a lost commit acknowledgement recognise its
    own earlier write. ``release`` drops the lease (the saga is terminal, or handed
    back); it then expires ``release_for`` seconds after the commit (0: at once), so
    that no recoverer claims the saga before then (a compensation waiting out its
    backoff is claimed when its next attempt is due).
    """

    saga_id: str
    epoch: int
    status: SagaStatus | None = None
    error: str | None = None
    steps: tuple[StepWrite, ...] = ()
    events: tuple[Event, ...] = ()
    release: bool = False
    release_for: float = 0.0
    token: str = dataclasses.field(default_factory=_token)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimGuard:
    """What an operator's claim requires of the saga, checked by the store inside the
    transaction that raises the epoch (never on an earlier read): the saga is in one of
    ``statuses``, still at ``epoch`` (nobody claimed it since it was read), and, with
    ``before_pivot``, no pivot step may have acted (``engine.PIVOT_ACTED``). A claim
    whose guard fails changes nothing and raises ``SagaChangedError``."""

    statuses: frozenset[SagaStatus]
    epoch: int | None = None
    before_pivot: bool = False


def guard_broken(record: SagaRecord, guard: ClaimGuard | None) -> str | None:
    """What about ``record`` breaks ``guard``, in words; None when it holds."""
    if guard is None:
        return None
    if record.status not in guard.statuses:
        return f"it is {record.status.value} now"
    if guard.epoch is not None and record.epoch != guard.epoch:
        return f"another process claimed it (epoch {guard.epoch} -> {record.epoch})"
    if guard.before_pivot:
        for step in record.steps:
            if step.kind is StepKind.PIVOT and step.status in PIVOT_ACTED:
                return f"its pivot step {step.name!r} is {step.status.value}"
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Runnable:
    """Which stuck sagas a process can finish, as ``SagaStore.claim_expired`` checks it
    inside the claim: a saga outside it is left untouched (no write, no epoch, no event)
    for a process that can run it.

    A declarative saga needs its definition's (name, version, fingerprint) among
    ``definitions`` (a row from before fingerprints: name and version). A
    context-manager saga needs every compensation still to run (``undone``) to name a
    function this process knows (``functions``) or one in a trusted module or its
    submodules (``modules``), as :class:`saga._internal.refs.Resolver` resolves them."""

    definitions: frozenset[tuple[str, str, str]] = frozenset()
    modules: tuple[str, ...] = ()
    functions: frozenset[str] = frozenset()

    def admits(self, record: SagaRecord) -> bool:
        if record.kind == "declarative":
            version = record.version or "1"
            if record.fingerprint is None:
                return any((n, v) == (record.name, version) for n, v, _ in self.definitions)
            return (record.name, version, record.fingerprint) in self.definitions
        return all(self.resolves(step.compensation_ref) for step in undone(record))

    def resolves(self, ref: str | None) -> bool:
        if ref is None or ref in self.functions:
            return True
        module = ref.partition(":")[0]
        return any(module == m or module.startswith(m + ".") for m in self.modules)


def undone(record: SagaRecord) -> list[StepRecord]:
    """The steps an unwinding of ``record`` would compensate (``engine.undo_stack``'s
    rule, in no particular order)."""
    return [
        step
        for step in record.steps
        if step.status in MAY_HAVE_ACTED
        and step.kind is StepKind.COMPENSATABLE
        and not (step.transactional and step.status in (StepStatus.FAILED, StepStatus.RUNNING))
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class Renewal:
    """What one renewal of many leases found: the sagas that must stop (cancel requested
    or deadline passed) and the sagas whose epoch was superseded (not renewed)."""

    stop: frozenset[str] = frozenset()
    lost: frozenset[str] = frozenset()


IN_FLIGHT = (StepStatus.RUNNING, StepStatus.IN_DOUBT, StepStatus.COMPENSATING)
"""The statuses of a step whose outcome (or whose compensation's) is not known yet."""


def current_step(saga: SagaRecord) -> StepRecord | None:
    """The saga's current step, as ``saga list`` shows it: the newest (highest seq) step
    in flight (:data:`IN_FLIGHT`), else the newest step; None before any step."""
    steps = sorted(saga.steps, key=lambda step: step.seq)
    in_flight = [step for step in steps if step.status in IN_FLIGHT]
    chosen = in_flight or steps
    return chosen[-1] if chosen else None


DEFAULT_LIST_LIMIT = 100
"""How many sagas one page of a listing holds unless told: ``coord.list()``, the async
twin, ``saga list`` and the web console's list all use it (docs/operating.md)."""

CREATION_TICK = 1e-6
"""Seconds a new saga's ``created_at`` is at least later than the newest saga's, in a
store whose clock could give two sagas the same time (SQLite's ticks in milliseconds):
lists are ordered by it, newest first, and must keep the order sagas were made in."""


@dataclasses.dataclass(frozen=True, slots=True)
class ListQuery:
    """Filters for listing sagas, newest first, one bounded page at a time."""

    status: Sequence[SagaStatus] = ()
    name: str | None = None
    key: str | None = None
    stuck: bool = False
    older_than: float | None = None
    before: str | None = None
    limit: int = DEFAULT_LIST_LIMIT
    id_prefix: str | None = None
    """Only sagas whose id starts with this (lowercase hex and dashes)."""
    key_prefix: str | None = None
    """Only sagas whose key starts with exactly this (case and ``%``/``_`` as given)."""
    step: str | None = None
    """Only sagas whose current step (:func:`current_step`) is named this."""
    payloads: bool = True
    """False: leave out what a listing never shows (the saga's input and trace context;
    each step's arguments, result and error), which come back None. A page of ``saga
    list`` or of the web console reads a few bytes per saga, not its results. Errors
    are short and a listing shows the saga's (``SagaView.error``): the saga's error is
    kept, and so is a step's while it is ``compensating`` (a failed saga's headline)."""
