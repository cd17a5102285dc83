"""The synchronous coordinator: the entry point of the public API."""

from __future__ import annotations

import builtins
import dataclasses
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from saga._internal import versions
from saga._internal.codec import DEFAULT_PAYLOAD_LIMIT, encode
from saga._internal.definition import Saga
from saga._internal.drivers.functions import Functions
from saga._internal.drivers.threads import ThreadDriver
from saga._internal.engine import rules
from saga._internal.engine.core import Engine
from saga._internal.engine.effects import Flow
from saga._internal.errors import (
    AmbiguousSagaError,
    ConfigurationError,
    UnknownSagaError,
)
from saga._internal.event_log import LogListener
from saga._internal.lease import Heartbeat
from saga._internal.listening import Listener, Listeners
from saga._internal.policy import (
    DEFAULT_COMPENSATION_RETRY,
    INLINE_COMPENSATION_WAIT,
    STORE_RETRY,
    RetryPolicy,
)
from saga._internal.ports import (
    DEFAULT_LIST_LIMIT,
    ClaimGuard,
    Event,
    EventRecord,
    ListQuery,
    Runnable,
    SagaRecord,
    SagaStore,
)
from saga._internal.refs import Resolver
from saga._internal.resources import Resources
from saga._internal.settings import lease_ttl_setting
from saga._internal.signature import taking
from saga._internal.status import SagaStatus, statuses_of
from saga._internal.store import open_store, use_session_factory
from saga._internal.views import SagaView, needs_events, view_of

if TYPE_CHECKING:
    from saga._internal.recovery import RecoveryOutcome, RecoveryReport
    from saga._internal.scope import SagaScope

T = TypeVar("T")


def new_owner_id() -> str:
    """host:pid:random, unique per coordinator."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclasses.dataclass(frozen=True)
class RunCall:
    """The arguments of ``run``, in both coordinators, written once (see
    :mod:`saga._internal.signature`): the saga (a definition, or the name of one
    registered or defined here), its input ``data``, its ``key`` and ``deadline``."""

    saga: Saga | str
    data: Any = None
    _: dataclasses.KW_ONLY
    key: str | None = None
    deadline: timedelta | float | None = None

    def flow(self, definitions: versions.Definitions, engine: Engine) -> Flow[SagaRecord]:
        """What running it does, for a coordinator's driver to carry out."""
        definition = definitions.definition(self.saga)
        return engine.run(definition, self.data, self.key, self.deadline)


class Coordinator:
    """Runs sagas durably against one database.

    ``url`` defaults to ``$SAGA_DATABASE_URL``, else ``sqlite:///saga.db``; an empty one is
    refused (``ConfigurationError``), not taken for the default.
    ``lease_ttl`` is how long (seconds) a silent process keeps its sagas
    before a recoverer may take them: from 0.1 to 86400 (a day), else
    ``ConfigurationError``; by default ``$SAGA_LEASE_TTL``, else 30.
    ``trusted_modules`` names modules whose functions stored references may
    resolve to (what ``--app`` does).
    ``session_factory`` (the application's ``sessionmaker``) makes the
    ``ctx.session`` of transactional steps; it must point at the store's own
    database (``ConfigurationError`` otherwise). ``listeners`` are told every
    lifecycle event once it is recorded (see ``saga.Listener``; also
    ``add_listener``); with ``log_events`` (the default) one of them logs every
    event on the ``saga.engine`` logger (see ``saga.logs``). With
    ``create_tables=False`` a missing SQLite file or a database without saga's
    tables is refused (``DatabaseNotFoundError``) instead of created on first use.
    ``resources`` (names to clients, pools, settings) are given to every step as
    ``ctx.resources``; more with ``coord.resources.add(...)`` (see ``saga.Resources``).
    ``compensation_retry`` is the retry policy of context-manager compensations,
    which have no ``retry=`` of their own (a declarative step's
    ``@step.compensation(retry=...)`` still wins); by default
    ``saga.DEFAULT_COMPENSATION_RETRY``. ``compensation_wait_in_place``
    (seconds, by default 3) is the longest wait
    for a compensation's next attempt spent in the caller's thread: a longer one hands
    the saga back (``SagaHandedBack``) for a worker to retry when the attempt is due.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        lease_ttl: float | None = None,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        trusted_modules: Iterable[str] = (),
        store: SagaStore | None = None,
        store_retry: RetryPolicy = STORE_RETRY,
        session_factory: Callable[..., Any] | None = None,
        listeners: Iterable[Listener] = (),
        log_events: bool = True,
        create_tables: bool = True,
        resources: Mapping[str, Any] | None = None,
        compensation_retry: RetryPolicy = DEFAULT_COMPENSATION_RETRY,
        compensation_wait_in_place: float = INLINE_COMPENSATION_WAIT,
    ) -> None:
        lease_ttl = lease_ttl_setting(lease_ttl)  # checked before anything is opened
        self.resources = resources if isinstance(resources, Resources) else Resources(resources)
        self.listeners = Listeners([LogListener()] if log_events else [])
        for listener in listeners:
            self.listeners.add(listener)
        self.store: SagaStore = (
            store if store is not None else open_store(url, store_retry, create_tables)
        )
        if session_factory is not None:
            use_session_factory(self.store, session_factory)
        self.lease_ttl = lease_ttl
        self.owner = new_owner_id()
        self.resolver = Resolver(trusted_modules, compensation_retry, compensation_wait_in_place)
        self.heartbeat = Heartbeat(self.store, lease_ttl, self.owner)
        self.definitions = versions.Definitions(self.resolver)
        functions = Functions(self.definitions.registry, self.resolver)
        self.driver = ThreadDriver(
            self.store, lease_ttl, self.heartbeat, functions, self.listeners, self.resources
        )
        self.engine = Engine(self.owner, payload_limit, self.resolver, self.definitions)

    def __repr__(self) -> str:
        return f"Coordinator({self.store.url!r})"

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the heartbeat, deliver what the listeners still have queued (for a few
        seconds at most), close the resources handed over to it and release the database
        connections."""
        self.heartbeat.stop()
        self.heartbeat.release()
        self.listeners.close()
        self.resources.close()
        self.store.close()

    def drain(self) -> None:
        """Hand back, at their next step boundary, the sagas this coordinator is running:
        for a clean shutdown (``saga worker`` does it on SIGTERM). A step in progress
        ends first; then, instead of starting the next step (or compensation, or the
        next try of a compensation after its wait), the saga's lease is given up in a
        fenced commit and the call raises ``SagaHandedBack``: another process may take
        the saga at once, without waiting for a lease to run out. A saga whose last
        step ended is finished, not handed back. Start no new sagas afterwards."""
        self.driver.draining.set()

    @property
    def draining(self) -> bool:
        """Whether ``drain()`` was called: this coordinator is handing its sagas back."""
        return self.driver.draining.is_set()

    def add_listener(
        self, listener: Listener, *, inline: bool | None = None, queue_size: int | None = None
    ) -> None:
        """Tell ``listener`` every lifecycle event from now on (see ``saga.Listener``):
        on a thread of its own, or with ``inline`` in the saga's thread."""
        self.listeners.add(listener, inline=inline, queue_size=queue_size)

    def create_schema(self) -> None:
        """Create the tables now (they are also created on first use)."""
        self.store.create_schema()

    # -- declarative sagas -----------------------------------------------------------------

    def register(self, *sagas: Saga) -> None:
        """Validate and register definitions so this coordinator can run and resume them.

        Versions of one name are kept side by side: new runs take the newest, and each
        instance continues with the version it started with."""
        self.definitions.register(*sagas)

    @taking(RunCall)
    def run(self, call: RunCall) -> SagaView:
        """Run a declarative saga to its end and return its view.

        With ``key``, a second call returns the first saga's recorded outcome
        (raising ``SagaFailed`` again if it failed) and runs nothing twice.
        """
        return view_of(self.driver.run(call.flow(self.definitions, self.engine)))

    def started_with(self, record: SagaRecord) -> Saga:
        """The definition ``record`` started with: its version, with its fingerprint.
        ``DefinitionError`` naming both when this process has no such definition."""
        return self.definitions.started_with(record)

    # -- context-manager sagas ------------------------------------------------------------

    def saga(
        self, name: str, *, key: str | None = None, deadline: timedelta | float | None = None
    ) -> SagaScope:
        """A context-manager saga around plain functions: ``with coord.saga(...) as s``."""
        if key is not None:  # a NUL byte or an oversized key is refused on every backend
            encode(key, "key", self.engine.payload_limit)
        from saga._internal.scope import SagaScope  # the block's machinery, on first use

        return SagaScope(self, name, key, rules.seconds(deadline))

    # -- reading ----------------------------------------------------------------------------

    def get(
        self, saga_id: str | None = None, *, key: str | None = None, name: str | None = None
    ) -> SagaView:
        """The saga with this id, or the one ``key`` names (with ``name``, the saga
        definition's, when several definitions use the same key). ``UnknownSagaError``
        if there is none; ``AmbiguousSagaError`` if a key alone names several."""
        if saga_id is not None:
            if key is not None or name is not None:
                raise ConfigurationError("pass a saga id, or a key (and a name), not both")
            return self._view(self._load(saga_id))
        if key is None:
            raise ConfigurationError("pass a saga id or a key")
        return self._view(self._by_key(key, name))

    def _by_key(self, key: str, name: str | None) -> SagaRecord:
        if name is not None:
            record = self.store.find(name, key)
            if record is None:
                raise UnknownSagaError(f"no saga {name!r} with key {key!r}")
            return record
        found = self.store.list(ListQuery(key=key, limit=10))
        if not found:
            raise UnknownSagaError(f"no saga with key {key!r}")
        if len(found) > 1:
            names = ", ".join(sorted(f"{r.name!r} ({r.id})" for r in found))
            raise AmbiguousSagaError(f"key {key!r} names {len(found)} sagas: {names}; pass a name")
        return found[0]

    def list(
        self,
        status: SagaStatus | str | Iterable[SagaStatus | str] | None = None,
        name: str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
        *,
        stuck: bool = False,
        before: str | None = None,
        older_than: float | None = None,
        key: str | None = None,
        id_prefix: str | None = None,
    ) -> list[SagaView]:
        """Sagas, newest first, at most ``limit`` of them (``id_prefix``: whose id starts
        so, as an operator types the first characters of one)."""
        query = ListQuery(
            status=statuses_of(status),
            name=name,
            key=key,
            id_prefix=None if id_prefix is None else id_prefix.strip().lower(),
            stuck=stuck,
            before=before,
            older_than=older_than,
            limit=limit,
        )
        return [self._view(record) for record in self.store.list(query)]

    def _view(self, record: SagaRecord) -> SagaView:
        """``record`` as a view, with what its compensations returned (kept in their
        events, read only for a saga with a compensated step)."""
        return view_of(record, self.store.events(record.id) if needs_events(record) else ())

    def history(self, saga_id: str) -> builtins.list[EventRecord]:  # list: the method above
        """The saga's events, oldest first."""
        self._load(saga_id)
        return self.store.events(saga_id)

    def _load(self, saga_id: str) -> SagaRecord:
        record = self.store.load(saga_id)
        if record is None:
            raise UnknownSagaError(f"no saga with id {saga_id!r}")
        return record

    # -- recovery and operator actions ----------------------------------------------------

    def recover(self, *, compensate: bool = False, limit: int | None = None) -> RecoveryReport:
        """Claim every saga whose lease expired and finish it; one failure never stops the rest."""
        return self.driver.run(self.engine.recover(compensate, limit))

    def recover_saga(self, saga_id: str, *, compensate: bool = False) -> RecoveryOutcome:
        """Claim this one saga (``SagaBusyError`` while its lease is live) and finish it
        as ``recover`` would; the claim is recorded naming the operator. Only a running
        or compensating saga is taken (checked in the claim): a ``failed`` one waits for
        ``retry-compensation`` or ``mark-compensated``."""
        return self.driver.run(self.engine.recover_saga(saga_id, compensate))

    def compensate(self, saga_id: str, *, action: str = "compensate") -> SagaView:
        """Unwind a stuck or failed saga now (refused past a pivot or once finished).

        ``action`` names the operator action in the saga's history.
        """
        return self._view(self.driver.run(self.engine.compensate(saga_id, action)))

    def resume(self, saga_id: str) -> SagaView:
        """Carry a stuck or paused declarative saga forward now. A step a paused saga runs
        again gets its retry policy's attempts again (their numbers keep counting); if it
        pauses again, ``SagaHandedBack`` (status ``PAUSED``) says why."""
        return self._view(self.driver.run(self.engine.resume(saga_id)))

    def retry(self, saga_id: str, from_step: str | None = None) -> SagaView:
        """Run forward again a saga that failed past its pivot, once the cause is fixed.

        The failed step runs again with its whole retry budget (its attempt numbers
        go on: ``ctx.attempt``), then the rest, under the definition registered now,
        which must have the fingerprint the saga started with. Refused for a saga that
        is not ``failed``, or failed while compensating (``retry-compensation``).

        ``from_step``: run that step again, and every step after it, once you checked
        what it did; each of them that succeeded must be declared ``idempotent=True``
        (its participant dedupes by ``ctx.idempotency_key``) and none may be a pivot."""
        return self._view(self.driver.run(self.engine.retry(saga_id, from_step)))

    def skip(self, saga_id: str, *, step: str, result: Any = None, reason: str) -> SagaView:
        """Record that you did step ``step`` of a saga failed past its pivot by hand, with
        ``result`` as if the step had returned it (its compensation, if one ever runs,
        gets it), and ``reason``; then carry the saga forward as ``retry`` does.

        Only a step whose failure stopped the saga (``failed`` or ``in_doubt``)."""
        return self._view(self.driver.run(self.engine.skip(saga_id, step, result, reason)))

    def pause(self, saga_id: str) -> SagaView:
        """Hold a running declarative saga at its next step boundary, nothing compensated.

        It turns ``paused`` at once (refused, ``SagaChangedError``, if it moved on since it
        was read); its owner, if alive, hands the lease back at its next step boundary
        (the ``run`` there raises ``SagaHandedBack`` with status ``PAUSED``), and a saga
        no live process holds is handed back here. No worker claims a paused saga;
        ``resume`` goes on, ``compensate`` unwinds it. Its deadline still counts: resumed
        after it, the saga stops at its first step boundary and unwinds.
        """
        return self._view(self.driver.run(self.engine.pause(saga_id)))

    def cancel(self, saga_id: str) -> SagaView:
        """Ask a running saga to stop at its next step boundary and unwind.

        The request is recorded first, whatever follows: a live owner honours it at
        its next step boundary; a stuck saga is unwound here if this process knows its
        definition, else by the recovery of a process that does.
        """
        return self._view(self.driver.run(self.engine.cancel(saga_id)))

    def claim_guarded(
        self,
        saga_id: str,
        event: Event,
        guard: ClaimGuard,
        refuse: Callable[[SagaRecord], object],
    ) -> SagaRecord:
        """Claim the saga for an operator's verb, on the condition the verb was decided
        under (``guard``, checked inside the claim). If the saga moved on since it was
        read, the verb's own refusal of its new state says why, else ``SagaChangedError``."""
        return self.driver.run(self.engine.claim_guarded(saga_id, event, guard, refuse))

    def runnable(self) -> Runnable:
        """Which stuck sagas this process can finish (see ``saga._internal.ports.Runnable``): every
        definition registered or defined here, the trusted modules and known functions.
        Recovery claims no other: a saga it cannot run stays untouched for one that can."""
        return self.definitions.runnable()
