"""One way to ask for a lost commit acknowledgement on either backend.

On PostgreSQL the loss is real: :mod:`tests.faults.ackproxy` forwards the
COMMIT (or the autocommit statement), keeps the server's answer and drops the
connection. SQLite has no network, so :class:`~tests.faults.lossy.SiblingFirstStore`
raises the dropped-connection error after the store's own commit. A
:class:`Target` names the write by what each one sees: the SQL on the wire,
the store's ``Commit`` in the process. Either way, with ``sibling_first`` the
caller hears of the drop only once another commit of the saga has landed.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Protocol

from saga.adapters.sql.postgres import PostgresDialect
from saga.adapters.sql.store import SqlSagaStore

from saga._internal.ports import Commit
from saga._internal.status import StepStatus
from tests.faults import figures
from tests.faults.ackproxy import (
    SAGA_RECORDS,
    AckProxy,
    Loss,
    Predicate,
    Transaction,
    writes_to,
)
from tests.faults.lossy import FAST_STORE_RETRY, SiblingFirstStore, WritePredicate


@dataclasses.dataclass(frozen=True)
class Target:
    """The write whose acknowledgement is lost, as the proxy and the store each see it."""

    what: str
    wire: Predicate
    store: WritePredicate


def _step_outcome(step: str, status: StepStatus) -> WritePredicate:
    def matches(kind: str, change: Commit) -> bool:
        return kind == "transact" and any(
            w.step.name == step and w.step.status is status for w in change.steps
        )

    return matches


def _starts_steps_on_wire(transaction: Transaction) -> bool:
    return transaction.inserts_into("saga_steps") and not transaction.inserts_into("saga_instances")


def _starts_steps_in_store(kind: str, change: Commit) -> bool:
    return kind == "commit" and any(write.new for write in change.steps)


A_COMMIT = Target(
    "the commit of transactional step a",
    writes_to("ack_done"),
    _step_outcome("a", StepStatus.SUCCEEDED),
)
A_UNDO = Target(
    "the commit of step a's transactional compensation",
    writes_to("ack_undone"),
    _step_outcome("a", StepStatus.COMPENSATED),
)
STEP_START = Target(
    "a commit that starts steps (inserts their rows)",
    _starts_steps_on_wire,
    _starts_steps_in_store,
)


class Losses(Protocol):
    direct: str
    """The saga database's URL, around any fault: for reading what was written."""

    caught: threading.Event
    """Set once the target write committed and its caller was not told."""

    def store(self, target: Target, sibling_first: bool = True, hold: bool = False) -> SqlSagaStore:
        """The saga store to use, with ``target``'s acknowledgement to be lost."""
        ...

    def watch(self, target: Target) -> threading.Event:
        """An event set once a write that ``target`` names committed (nothing is lost)."""
        ...

    def check(self) -> None:
        """The acknowledgement was lost once, and every wait ended in time."""
        ...


class ProxyLosses:
    """PostgreSQL: the saga store reaches the server through an :class:`AckProxy`."""

    def __init__(self, proxy: AckProxy, direct: str) -> None:
        self.proxy = proxy
        self.direct = direct
        self.caught = proxy.caught
        self.target: Target | None = None

    def store(self, target: Target, sibling_first: bool = True, hold: bool = False) -> SqlSagaStore:
        self.target = target
        until = SAGA_RECORDS if sibling_first else None
        self.proxy.arm(Loss(target.wire, until=until, hold=hold))
        return SqlSagaStore(self.proxy.url(self.direct), PostgresDialect(), FAST_STORE_RETRY)

    def watch(self, target: Target) -> threading.Event:
        return self.proxy.watch(target.wire)

    def check(self) -> None:
        assert self.target is not None
        what, proxy = self.target.what, self.proxy
        assert proxy.drops == 1, f"{what}: {proxy.drops} connections dropped, not 1"
        assert proxy.timeouts == 0, f"{what}: no sibling commit came within the wait"
        figures.count("lost acks")


class StoreLosses:
    """SQLite: the store itself reports the drop after its commit."""

    def __init__(self, direct: str) -> None:
        self.direct = direct
        self.caught = threading.Event()
        self.lossy: SiblingFirstStore | None = None
        self.target: Target | None = None

    def store(self, target: Target, sibling_first: bool = True, hold: bool = False) -> SqlSagaStore:
        assert not hold, "SQLite has no connections to hold"
        self.target = target
        self.lossy = SiblingFirstStore(self.direct, target.store, sibling_first)
        self.caught = self.lossy.caught
        return self.lossy

    def watch(self, target: Target) -> threading.Event:
        assert self.lossy is not None, "make the store first"
        return self.lossy.watch(target.store)

    def check(self) -> None:
        assert self.lossy is not None
        assert self.target is not None
        what, lossy = self.target.what, self.lossy
        assert len(lossy.lost) == 1, f"{what}: {len(lossy.lost)} acknowledgements lost, not 1"
        assert not lossy.timed_out, f"{what}: no sibling commit came within the wait"
