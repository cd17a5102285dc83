"""Deterministic interleavings of several coordinators on one database.

A race between an owner running a saga and an operator acting on it is a
question about order: which of their statements reached the database first.
:class:`Interleaving` answers it by construction. Each *actor* (an owner, a
recoverer, an operator verb, a lease renewal) is a function run in its own
thread with its OWN coordinator (own store, engine and hot path) on the same
database, and every statement an actor sends is a *boundary* where the
harness may stop it, let other actors run to their end or to a chosen
boundary, and then let it go on::

    with Interleaving(url, sagas=[order]) as run:
        owner_coord, op_coord = run.coordinator(), run.coordinator()
        owner = run.actor("owner", lambda: owner_coord.run(order, key="k"), owner_coord)
        at = owner.run_until(lambda b: b.writes_step("ship", "running"))  # pivot next
        op = run.actor("operator", lambda: op_coord.compensate(at.change.saga_id), op_coord)
        op.run_until(k)                 # paused before its boundary k (a dry run counts them)
        owner.run_to_end()              # the owner passes the pivot meanwhile
        op.run_to_end()                 # then the operator goes on: claims, or is refused
        op.outcome, owner.outcome       # "returned" or the exception's class name

Boundaries. A boundary comes *before* a statement and is seen in two places:

* SQLAlchemy's ``before_cursor_execute`` on the actor's ``coord.store.engine``
  (every read, claim, renewal; on SQLite also each ``BEGIN IMMEDIATE``), and on
  any participant engine given to :meth:`Interleaving.participant` (a step's own
  database, such as an ``EffectFence``'s: an actor without a coordinator, calling
  the fence itself, is paused between the fence's statements the same way);
* a wrapper around the store's hot-path object (``coord.store.hot``, PostgreSQL's
  single statements and SQLite's raw-connection transactions, which SQLAlchemy
  never sees): each ``create`` / ``commit`` is one boundary. ``AsyncCoordinator``'s
  native PostgreSQL path (``adapters/sql/pg_async.py``) is wrapped the same way.

A :class:`Boundary` says whether the actor holds database locks there
(``free`` is False inside a transaction after a write, or after SQLite's
``BEGIN IMMEDIATE``, which takes the single writer lock). Pausing at a locked
boundary is allowed, but another actor needing those locks then waits (on
PostgreSQL until the pause ends, on SQLite until its busy timeout), so sweeps
pause at free boundaries only: exactly the points where another actor can run.

Whose statement is it? The actor's thread sets a context variable, which
``asyncio.to_thread`` and saga's step threads inherit, so an async actor's
worker threads count as the actor. The heartbeat thread of a hooked
coordinator belongs to no actor: its renewals pass freely unless the test
holds them (:meth:`Actor.hold_heartbeat`: no renewal runs, so a lease is
never extended while the test compares rows, and a "dead" owner's lease runs
out). A renewal can itself be an actor: call ``coord.store.renew_many`` from an
actor's function (tests/faults/test_interleave_harness.py does).

Dry runs. ``actor.boundaries`` lists every boundary an actor reached, in
order; running an actor once to its end ("count the boundaries") and reading
that list lets a test enumerate every boundary k and then, on a fresh
database with the same starting state, pause a new actor before boundary k
(:func:`free_until`). Nothing depends on speed: every wait is for a condition,
with a generous timeout that fails the test with every actor's state.
Killing an actor (:meth:`Actor.kill`) raises :class:`ActorKilled` (a
``BaseException``, so no ``except Exception`` in saga catches it) at its
boundary: the statement is not sent, nothing more is written, as when a
process dies there.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sqlalchemy import Engine, event

from saga import AsyncCoordinator, Coordinator, Saga
from saga._internal.ports import Commit, SagaRecord

DEFAULT_TIMEOUT = 60.0
"""Seconds any wait may take before the test fails: generous, since nothing is timed."""

_ACTOR: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("actor", default=None)
_LOCKING = ("BEGIN", "UPDATE", "INSERT", "DELETE", "CREATE", "DROP", "ALTER")


class InterleavingError(AssertionError):
    """The interleaving could not be carried out (a timeout, a misuse): the test fails."""


class ActorKilled(BaseException):  # noqa: N818 - a death, not an error of the code under test
    """Raised at a killed actor's boundary: it stops there, as a dead process would."""


@dataclasses.dataclass(frozen=True)
class Boundary:
    """The point just before one of an actor's statements."""

    index: int
    """Position among the actor's boundaries, from 0."""
    kind: str
    """``sql`` (through the engine), ``hot.create`` or ``hot.commit`` (the hot path)."""
    sql: str
    """The statement's text (for the hot path, what it writes)."""
    free: bool
    """True when the actor holds no database lock here, so another actor can run."""
    change: Commit | None = None
    """The hot path's commit (its steps, events and status), when there is one."""

    def __str__(self) -> str:
        text = " ".join(self.sql.split())
        return f"#{self.index} {self.kind}{'' if self.free else ' (locked)'}: {text[:90]}"

    @property
    def is_claim(self) -> bool:
        """A claim: the statement that takes a saga's lease (``epoch = epoch + 1``)."""
        sql = " ".join(self.sql.split())
        return (
            sql.startswith("UPDATE saga_instances SET") and "epoch=(saga_instances.epoch +" in sql
        )

    def writes_step(self, name: str, status: str) -> bool:
        """A hot-path commit that records step ``name`` with ``status``."""
        steps = self.change.steps if self.change is not None else ()
        return any(w.step.name == name and w.step.status.value == status for w in steps)


Rule = Callable[[Boundary], bool]


class Actor:
    """One function in its own thread, paused and resumed at its statement boundaries."""

    def __init__(
        self, run: Interleaving, name: str, fn: Callable[[], Any], hooks: _Hooks | None
    ) -> None:
        self.run, self.name, self.fn, self.hooks = run, name, fn, hooks
        self.boundaries: list[Boundary] = []
        self.paused_at: Boundary | None = None
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self._rules: list[Rule] = []
        self._go = False
        self._killed = False
        self._left = 0  # pauses it has left
        self.killed_at: Boundary | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        where = f"paused at {self.paused_at}" if self.paused_at else "running"
        if self.done:
            where = f"done: {self.outcome}"
        elif self._thread is None:
            where = "not started"
        last = f", last {self.boundaries[-1]}" if self.boundaries else ""
        return f"<actor {self.name}: {where}{last}>"

    # -- telling it where to stop ---------------------------------------------------------

    def pause_before(self, index: int) -> Actor:
        """Stop before boundary ``index`` (once)."""
        return self.pause_when(lambda b: b.index == index)

    def pause_when(self, rule: Rule) -> Actor:
        """Stop before the first boundary for which ``rule`` holds (once)."""
        with self.run.cond:
            self._rules.append(rule)
        return self

    # -- driving it -----------------------------------------------------------------------

    def start(self) -> Actor:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=f"actor-{self.name}")
            self._thread.daemon = True
            self._thread.start()
        return self

    def resume(self) -> Actor:
        """Let a paused actor go on (to its next pause rule, or its end)."""
        with self.run.cond:
            if self.paused_at is None:
                raise InterleavingError(f"{self!r} is not paused")
            self._go = True
            left = self._left
            self.run.cond.notify_all()
        # Until it has left the boundary, so that a wait for its next pause cannot see this
        # one. Counted, not "paused_at is None": it may pause again before this thread looks.
        self.run.wait_for(lambda: self._left > left, f"{self.name} resumes")
        return self

    def run_until(self, rule: Rule | int) -> Boundary | None:
        """Start or resume it until ``rule`` (a boundary index or predicate) holds;
        the boundary where it stopped, or None if it finished first."""
        self.pause_when(rule if callable(rule) else _at(rule))
        self._go_on()
        return self.wait_paused_or_done()

    def run_to_end(self) -> Actor:
        """Drop its pause rules and let it finish."""
        with self.run.cond:
            self._rules.clear()
        self._go_on()
        self.wait_done()
        return self

    def _go_on(self) -> None:
        if self._thread is None:
            self.start()
        elif self.paused_at is not None:
            self.resume()

    def kill(self) -> None:
        """It dies at its current (or next) boundary: nothing more is sent."""
        with self.run.cond:
            self._killed = True
            self.run.cond.notify_all()

    def hold_heartbeat(self) -> None:
        """No lease renewal of this actor's coordinator runs until released."""
        self._coordinated().heartbeat.hold()

    def release_heartbeat(self) -> None:
        self._coordinated().heartbeat.release()

    def _coordinated(self) -> _Hooks:
        if self.hooks is None:
            raise InterleavingError(f"{self!r} has no coordinator, so no heartbeat")
        return self.hooks

    # -- waiting for it ----------------------------------------------------------------------

    def wait_paused(self) -> Boundary:
        where = self.wait_paused_or_done()
        if where is None:
            raise InterleavingError(f"{self!r} finished instead of pausing", self.error)
        return where

    def wait_paused_or_done(self) -> Boundary | None:
        self.run.wait_for(lambda: self.paused_at is not None or self.done, f"{self.name} pauses")
        return self.paused_at

    def wait_done(self) -> None:
        self.run.wait_for(lambda: self.done, f"{self.name} finishes")

    @property
    def outcome(self) -> str:
        """``returned``, or the class name of what it raised (``running`` before its end)."""
        if not self.done:
            return "running"
        return "returned" if self.error is None else type(self.error).__name__

    # -- inside its thread -----------------------------------------------------------------

    def _main(self) -> None:
        _ACTOR.set(self)
        try:
            self.result = self.fn()
        except BaseException as error:  # noqa: BLE001 - collected for the test to judge
            self.error = error
        if self.killed_at is not None and not isinstance(self.error, ActorKilled):
            # SQLAlchemy, cleaning up the statement that never ran, may raise its own error
            # in place of ours; the actor died all the same.
            died = ActorKilled(f"{self.name} killed at {self.killed_at}")
            died.__context__ = self.error
            self.error = died
        with self.run.cond:
            self.done = True
            self.run.cond.notify_all()

    def arrive(self, kind: str, sql: str, free: bool, change: Commit | None) -> None:
        """Called before each of its statements: record the boundary, pause if told."""
        cond = self.run.cond
        with cond:
            here = Boundary(len(self.boundaries), kind, sql, free, change)
            if self._killed:
                self._die(here)
            self.boundaries.append(here)
            rule = next((r for r in self._rules if r(here)), None)
            if rule is None:
                return
            self._rules.remove(rule)
            self.paused_at, self._go = here, False
            cond.notify_all()
            woke = cond.wait_for(lambda: self._go or self._killed, self.run.timeout)
            self.paused_at = None
            self._left += 1
            cond.notify_all()
            if self._killed or not woke:  # never resumed: stop rather than hang
                self._die(here)

    def _die(self, here: Boundary) -> None:
        self._killed = True
        self.killed_at = self.killed_at or here
        raise ActorKilled(f"{self.name} killed at {here}")


def _at(index: int) -> Rule:
    return lambda b: b.index == index


def free_until(boundaries: Iterable[Boundary], last: Rule) -> list[Boundary]:
    """The free boundaries up to and including the first one where ``last`` holds
    (all of them if it never does): where a sweep pauses an actor, one run each."""
    chosen = []
    for boundary in boundaries:
        if boundary.free:
            chosen.append(boundary)
        if last(boundary):
            break
    return chosen


class _HeartbeatGate:
    """Lets a coordinator's lease renewals through, or holds them while ``held``."""

    def __init__(self, cond: threading.Condition, timeout: float) -> None:
        self.cond, self.timeout = cond, timeout
        self.held = False
        self.waiting = 0

    def hold(self) -> None:
        with self.cond:
            self.held = True

    def release(self) -> None:
        with self.cond:
            self.held = False
            self.cond.notify_all()

    def pass_through(self) -> None:
        with self.cond:
            self.waiting += 1
            self.cond.wait_for(lambda: not self.held, self.timeout * 10)
            self.waiting -= 1


class _Hooks:
    """The statement hooks of one coordinator's store."""

    def __init__(self, run: Interleaving, coord: Coordinator) -> None:
        self.run, self.coord = run, coord
        self.heartbeat = _HeartbeatGate(run.cond, run.timeout)
        _listen(coord.store.engine, self.arrive)  # type: ignore[attr-defined]
        hot = getattr(coord.store, "hot", None)
        if hot is not None:
            gated = _GatedLoadingHotPath if hasattr(hot, "load") else _GatedHotPath
            coord.store.hot = gated(hot, self)  # type: ignore[attr-defined]

    def arrive(self, kind: str, sql: str, free: bool, change: Commit | None = None) -> None:
        actor = _ACTOR.get()
        if actor is not None:
            actor.arrive(kind, sql, free, change)
        elif threading.current_thread() is self.coord.heartbeat._thread:
            self.heartbeat.pass_through()


Arrive = Callable[..., None]


def _listen(engine: Engine, arrive: Arrive) -> list[tuple[str, Callable[..., None]]]:
    """Make each statement sent through ``engine`` a boundary (``arrive``); the listeners,
    for :func:`_unlisten`."""

    def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        arrive("sql", statement, not conn.info.get("saga_interleave_locks", False))

    listeners = [("before_cursor_execute", before), ("after_cursor_execute", _locks_after)]
    # Not "begin": SQLite's BEGIN IMMEDIATE is a statement, and locks.
    listeners += [("commit", _unlocked), ("rollback", _unlocked)]
    for name, fn in listeners:
        event.listen(engine, name, fn)
    return listeners


def _unlisten(engine: Engine, listeners: list[tuple[str, Callable[..., None]]]) -> None:
    for name, fn in listeners:
        event.remove(engine, name, fn)


def _locks_after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
    text = statement.lstrip().upper()
    if text.startswith(_LOCKING) or "FOR UPDATE" in text:
        conn.info["saga_interleave_locks"] = True


def _unlocked(conn: Any, *_: Any) -> None:
    conn.info["saga_interleave_locks"] = False


def _arrive_as_actor(kind: str, sql: str, free: bool, change: Commit | None = None) -> None:
    actor = _ACTOR.get()
    if actor is not None:  # the test's own thread, or a pool's, passes freely
        actor.arrive(kind, sql, free, change)


class _GatedHotPath:
    """The store's hot path, each creation and commit one boundary of the caller."""

    def __init__(self, hot: Any, hooks: _Hooks) -> None:
        self.hot, self.hooks = hot, hooks

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> bool:
        self.hooks.arrive("hot.create", describe(first, "create"), True, first)
        return bool(self.hot.create(saga, first, lease_ttl))

    def commit(self, change: Commit) -> bool | None:
        self.hooks.arrive("hot.commit", describe(change, "commit"), True, change)
        stop: bool | None = self.hot.commit(change)
        return stop

    def close(self) -> None:
        self.hot.close()


class _GatedLoadingHotPath(_GatedHotPath):
    """PostgreSQL's hot path, whose one-statement reads of a saga are boundaries too."""

    def load(self, saga_id: str) -> SagaRecord | None:
        self.hooks.arrive("hot.load", "SELECT the saga with its steps", True, None)
        loaded: SagaRecord | None = self.hot.load(saga_id)
        return loaded

    def find(self, name: str, key: str) -> SagaRecord | None:
        self.hooks.arrive("hot.find", "SELECT the saga of a name and key", True, None)
        found: SagaRecord | None = self.hot.find(name, key)
        return found

    def clash(self, saga: SagaRecord) -> tuple[SagaRecord, bool]:
        self.hooks.arrive("hot.clash", "SELECT the saga a creation clashed with", True, None)
        found: tuple[SagaRecord, bool] = self.hot.clash(saga)
        return found


def describe(change: Commit, verb: str) -> str:
    """A hot-path commit in words: what a reader of a failure message needs."""
    steps = ", ".join(f"{w.step.name}={w.step.status.value}" for w in change.steps)
    events = ", ".join(e.kind for e in change.events)
    status = f" status={change.status.value}" if change.status else ""
    return f"{verb} epoch {change.epoch}{status} steps [{steps}] events [{events}]"


def _gate_async_store(store: Any, hooks: _Hooks) -> None:
    """Wrap a native async store's create/commit (PostgreSQL) as boundaries too."""

    def gated(method: Callable[..., Any], kind: str, change_at: int) -> Callable[..., Any]:
        @functools.wraps(method)
        async def wrapper(*args: Any) -> Any:
            change = args[change_at]
            text = describe(change, kind.split(".")[1])
            await asyncio.to_thread(hooks.arrive, kind, text, True, change)
            return await method(*args)

        return wrapper

    store.create = gated(store.create, "hot.create", 1)
    store.commit = gated(store.commit, "hot.commit", 0)


class Interleaving:
    """Actors on one database, each with its own coordinator; see the module docstring."""

    def __init__(
        self, url: str, *, sagas: Iterable[Saga] = (), timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.url, self.sagas, self.timeout = url, list(sagas), timeout
        self.cond = threading.Condition()
        self.actors: list[Actor] = []
        self._hooks: list[_Hooks] = []
        self._async: list[AsyncCoordinator] = []
        self._participants: list[tuple[Engine, list[tuple[str, Callable[..., None]]]]] = []
        self.observer = Coordinator(url, lease_ttl=60.0)
        """An unhooked coordinator for the test's own reads (never paused)."""
        self.observer.register(*self.sagas)
        self.observer.create_schema()

    def __enter__(self) -> Interleaving:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def coordinator(self, lease_ttl: float = 60.0) -> Coordinator:
        """A new hooked coordinator (own store and engine) with the sagas registered."""
        coord = Coordinator(self.url, lease_ttl=lease_ttl)
        coord.register(*self.sagas)
        self._warm(coord)
        self._hooks.append(_Hooks(self, coord))
        return coord

    def async_coordinator(self, lease_ttl: float = 60.0) -> AsyncCoordinator:
        """A new hooked ``AsyncCoordinator`` (its sync store, hot path and native async
        path all hooked)."""
        coord = AsyncCoordinator(self.url, lease_ttl=lease_ttl)
        coord.register(*self.sagas)
        self._warm(coord.sync)
        hooks = _Hooks(self, coord.sync)
        self._hooks.append(hooks)
        if type(coord.store).__name__ == "PostgresAsyncStore":
            _gate_async_store(coord.store, hooks)
        self._async.append(coord)
        return coord

    def _warm(self, coord: Coordinator) -> None:
        """Schema checked and a connection made before hooking: the statements of a
        first use then never shift the boundaries of a dry run against a real one."""
        coord.store.create_schema()
        coord.store.now()

    def participant(self, engine: Engine) -> Engine:
        """Make every statement an actor sends through ``engine`` (a participant's own
        database) a boundary of that actor; undone at :meth:`close`."""
        self._participants.append((engine, _listen(engine, _arrive_as_actor)))
        return engine

    def actor(
        self, name: str, fn: Callable[[], Any], coord: Coordinator | AsyncCoordinator | None = None
    ) -> Actor:
        """An actor (not started yet) running ``fn`` with ``coord``'s hooks (none: an
        actor that only uses :meth:`participant` engines)."""
        hooks = None
        if coord is not None:
            sync = coord.sync if isinstance(coord, AsyncCoordinator) else coord
            hooks = next(h for h in self._hooks if h.coord is sync)
        actor = Actor(self, name, fn, hooks)
        self.actors.append(actor)
        return actor

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        with self.cond:
            if not self.cond.wait_for(condition, self.timeout):
                raise InterleavingError(f"timed out after {self.timeout:g}s: {what}; {self.actors}")

    def wait_lease_expired(self, saga_id: str) -> None:
        """Until the saga's lease has expired by the database clock (polled, never slept)."""
        deadline = time.monotonic() + self.timeout
        while True:
            record = self.observer.store.load(saga_id)
            assert record is not None, saga_id
            if (record.lease_expires_at or 0.0) < self.observer.store.now():
                return
            if time.monotonic() > deadline:
                raise InterleavingError(f"lease of {saga_id} still live after {self.timeout:g}s")
            time.sleep(0.01)

    def close(self) -> None:
        """Kill unfinished actors, let held renewals go, close every coordinator."""
        for actor in self.actors:
            actor.kill()
        for hooks in self._hooks:
            hooks.heartbeat.release()
        for actor in self.actors:
            if actor._thread is not None:
                actor._thread.join(self.timeout)
        for coord in self._async:
            asyncio.run(coord.store.close())
        for hooks in self._hooks:
            hooks.coord.close()
        for engine, listeners in self._participants:
            _unlisten(engine, listeners)
        self.observer.close()

    def states(self) -> Iterator[str]:
        return (repr(actor) for actor in self.actors)
