"""The soak's money transfers: a bank in its own database, and the sagas that move money.

The bank lives apart from the saga store (its own PostgreSQL schema, reached
with plain psycopg): saga cannot make its writes exactly once, only the
idempotency key can. Each account has three columns, ``balance`` (spendable),
``held`` (debited, on its way out) and ``incoming`` (credited, not yet
spendable). A transfer is four steps, each one bank transaction that moves
money without creating or destroying any, so the bank's total never changes,
whatever is killed when:

=========  ============================================  ==========================
step       effect                                        kind
=========  ============================================  ==========================
debit      src.balance -= amount, src.held += amount     compensatable (refused if
                                                          the balance is short)
fee        src.balance -= fee, fees.balance += fee       compensatable (same)
credit     src.held -= amount, dst.incoming += amount    compensatable
settle     dst.incoming -= amount, dst.balance += amount pivot: never undone
=========  ============================================  ==========================

An effect is a row of ``effects`` keyed by ``ctx.idempotency_key``: an
action inserts it (a second attempt finds it and changes nothing), a
compensation turns it ``undone`` and reverses its moves (or leaves a
tombstone when there was nothing to undo, so a late action cannot apply
afterwards). Every call, effective or not, is a row of ``calls`` written in
the same transaction, with its attempt, epoch and process id: the crash
tests' invariants (:mod:`tests.crash.invariants`) read them as their effect
ledger (:func:`ledger`).

How a saga misbehaves travels in its input (see :mod:`tests.soak.plan`):
``fail`` (a business failure, before or after acting), ``flaky`` (a timeout
after acting, or before acting at the pivot, retried), ``crash`` (the step
SIGKILLs its own process after acting, on every attempt: a crash loop that
``max_attempts`` ends), ``nap`` / ``slow`` / ``pace`` (how long steps take).

Workers import this module with ``saga --app tests.soak.bank``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from saga import RetryPolicy, Saga, StepContext
from tests.crash.ledger import Call, Ledger
from tests.postgres import libpq_url

FEES = "fees"
"""The bank's own account: fees go there; it is never a transfer's source or destination."""

COLUMNS = ("balance", "held", "incoming")
STEPS = ["debit", "fee", "credit", "settle"]
PIVOT = "settle"

STEP_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05, jitter=0.1)
"""Three attempts (what tests.crash.invariants allows), retrying timeouts and lost connections."""
UNDO_RETRY = RetryPolicy(
    max_attempts=5, initial_delay=0.01, max_delay=0.05, jitter=0.1, retry_on=(Exception,)
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (
    id TEXT PRIMARY KEY,
    balance BIGINT NOT NULL,
    held BIGINT NOT NULL DEFAULT 0,
    incoming BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS effects (
    key TEXT PRIMARY KEY,
    saga_id TEXT NOT NULL,
    step TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('applied', 'undone')),
    moves TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    id BIGSERIAL PRIMARY KEY,
    saga_id TEXT NOT NULL,
    step TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('do', 'undo')),
    attempt INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    effective BOOLEAN NOT NULL
);
"""


class InsufficientFunds(Exception):  # noqa: N818 - a business outcome, not an error
    """The source cannot pay: a business failure, never retried; the saga unwinds."""


class Declined(Exception):  # noqa: N818 - a business outcome, not an error
    """A planned business failure of a step."""


class Flaky(TimeoutError):
    """A planned transient failure (a timeout): retried by the step's policy."""


class BankUnavailable(ConnectionError):
    """The bank's database could not be reached or dropped the connection: retried."""


Move = tuple[str, str, int]
"""(account, column, delta)"""


def moves(step: str, data: dict[str, Any]) -> list[Move]:
    """What ``step`` of the transfer described by ``data`` changes, in lock order."""
    src, dst, amount, fee = data["src"], data["dst"], data["amount"], data["fee"]
    table: dict[str, list[Move]] = {
        "debit": [(src, "balance", -amount), (src, "held", amount)],
        "fee": [(src, "balance", -fee), (FEES, "balance", fee)],
        "credit": [(src, "held", -amount), (dst, "incoming", amount)],
        "settle": [(dst, "incoming", -amount), (dst, "balance", amount)],
    }
    return sorted(table[step])  # one order for every transaction: no deadlocks


# -- the bank's database ------------------------------------------------------------------------

POOL_SIZE = 8
"""Bank connections per process: a driver runs a couple of hundred threads, and
PostgreSQL serves about a hundred clients in all."""


class _Pool:
    """A few autocommit connections to one bank, shared by a process's threads."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(POOL_SIZE)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one transaction; one that failed is closed, not returned."""
        with self._slots:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                connection = psycopg.connect(
                    libpq_url(self.url), autocommit=True, connect_timeout=10
                )
            try:
                yield connection
            except psycopg.OperationalError:
                connection.close()
                raise
            finally:  # a business failure rolled back: the connection is fine
                if not (connection.closed or connection.broken):
                    self._idle.put(connection)

    def close(self) -> None:
        """Close the idle connections (those in use are not this caller's to close)."""
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


_pools: dict[str, _Pool] = {}
_pools_lock = threading.Lock()


def close_pools() -> None:
    """Close every bank connection this process keeps: a test that applied effects in
    the test process itself leaves none open for the interpreter's exit to find."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


def _pool(url: str) -> _Pool:
    with _pools_lock:
        if url not in _pools:
            _pools[url] = _Pool(url)
        return _pools[url]


def _transaction(url: str, work: Any) -> Any:
    """Run ``work(connection)`` in one transaction; a lost connection is ``BankUnavailable``."""
    try:
        with _pool(url).connection() as connection, connection.transaction():
            return work(connection)
    except psycopg.OperationalError as error:
        raise BankUnavailable(f"bank: {error}") from error


def create(url: str, accounts: list[str], opening: int) -> None:
    """The bank's tables, ``accounts`` opened with ``opening`` each, and the fee account."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute(_SCHEMA)
        for account in [*accounts, FEES]:
            connection.execute(
                "INSERT INTO accounts (id, balance) VALUES (%s, %s)",
                (account, 0 if account == FEES else opening),
            )


def _call(db: psycopg.Connection[Any], ctx: StepContext, kind: str, effective: bool) -> None:
    db.execute(
        "INSERT INTO calls (saga_id, step, kind, attempt, epoch, pid, effective)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (ctx.saga_id, ctx.step, kind, ctx.attempt, ctx.epoch, os.getpid(), effective),
    )


def _move(db: psycopg.Connection[Any], account: str, column: str, delta: int, guard: bool) -> bool:
    assert column in COLUMNS
    statement = sql.SQL("UPDATE accounts SET {col} = {col} + %s WHERE id = %s").format(
        col=sql.Identifier(column)
    )
    if guard:
        statement += sql.SQL(" AND {col} + %s >= 0").format(col=sql.Identifier(column))
        return db.execute(statement, (delta, account, delta)).rowcount == 1
    return db.execute(statement, (delta, account)).rowcount == 1


class _Short(Exception):  # noqa: N818 - internal signal to roll back
    pass


def apply(ctx: StepContext) -> bool:
    """Apply this step's effect once per idempotency key; whether this call applied it.

    A short balance rolls the transaction back, records the call as not
    effective and raises :class:`InsufficientFunds`.
    """
    data, planned = ctx.data, moves(ctx.step, ctx.data)

    def work(db: psycopg.Connection[Any]) -> bool:
        inserted = db.execute(
            "INSERT INTO effects (key, saga_id, step, state, moves) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (key) DO NOTHING",
            (ctx.idempotency_key, ctx.saga_id, ctx.step, "applied", json.dumps(planned)),
        ).rowcount
        if inserted:
            for account, column, delta in planned:
                guard = column == "balance" and delta < 0
                if not _move(db, account, column, delta, guard):
                    raise _Short(f"{account} cannot pay {-delta}")
        _call(db, ctx, "do", bool(inserted))
        return bool(inserted)

    try:
        return bool(_transaction(data["bank"], work))
    except _Short as short:
        attempted(ctx)
        raise InsufficientFunds(str(short)) from None


def attempted(ctx: StepContext) -> None:
    """Record an action call that changed nothing (it failed before acting)."""
    _transaction(ctx.data["bank"], lambda db: _call(db, ctx, "do", False))


def reverse(ctx: StepContext) -> bool:
    """Undo this step's effect if it is applied; whether this call undid it."""

    def work(db: psycopg.Connection[Any]) -> bool:
        # The tombstone first: its insert waits for an action's transaction still in
        # flight on the same key (an owner stalled past its lease), so the update below
        # sees that action's row once it committed. Updating first would find nothing,
        # the tombstone's insert would then yield to the action's row, and the effect
        # would stay applied under a compensated saga.
        tombstone = db.execute(
            "INSERT INTO effects (key, saga_id, step, state, moves)"
            " VALUES (%s, %s, %s, 'undone', '[]') ON CONFLICT (key) DO NOTHING",
            (ctx.idempotency_key, ctx.saga_id, ctx.step),
        ).rowcount
        row = None
        if not tombstone:
            row = db.execute(
                "UPDATE effects SET state = 'undone' WHERE key = %s AND state = 'applied'"
                " RETURNING moves",
                (ctx.idempotency_key,),
            ).fetchone()
        for account, column, delta in json.loads(row[0]) if row else []:
            _move(db, account, column, -delta, guard=False)
        _call(db, ctx, "undo", row is not None)
        return row is not None

    return bool(_transaction(ctx.data["bank"], work))


# -- reading the bank, for the checks -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Books:
    """The bank as it stands: accounts (balance, held, incoming) and the effects applied."""

    accounts: dict[str, tuple[int, int, int]]
    applied: dict[str, list[Move]]  # idempotency key -> the moves it applied

    @property
    def total(self) -> int:
        return sum(sum(columns) for columns in self.accounts.values())

    def negatives(self) -> list[str]:
        return [
            f"{account}.{column} = {value}"
            for account, columns in sorted(self.accounts.items())
            for column, value in zip(COLUMNS, columns, strict=True)
            if value < 0
        ]


def books(url: str) -> Books:
    """Accounts and applied effects, read in one snapshot."""
    with psycopg.connect(libpq_url(url), autocommit=True) as db, db.transaction():
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rows = db.execute("SELECT id, balance, held, incoming FROM accounts").fetchall()
        effects = db.execute("SELECT key, moves FROM effects WHERE state = 'applied'").fetchall()
    return Books(
        {account: (balance, held, incoming) for account, balance, held, incoming in rows},
        {key: [(a, c, int(d)) for a, c, d in json.loads(text)] for key, text in effects},
    )


def connect(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the bank, for a reader that keeps it (the monitor)."""
    return psycopg.connect(libpq_url(url), autocommit=True)


def total(connection: psycopg.Connection[Any]) -> tuple[int, list[str]]:
    """The bank's total and its negative columns, in one statement (cheap enough to sample)."""
    row = connection.execute(
        "SELECT coalesce(sum(balance + held + incoming), 0),"
        " coalesce(string_agg(id, ',') FILTER"
        " (WHERE balance < 0 OR held < 0 OR incoming < 0), '') FROM accounts"
    ).fetchone()
    assert row is not None
    return int(row[0]), [name for name in str(row[1]).split(",") if name]


def ledger(url: str) -> Ledger:
    """The bank's calls and applied effects as the crash tests' effect ledger."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT id, saga_id, step, kind, attempt, epoch, pid, effective FROM calls ORDER BY id"
        ).fetchall()
        applied = connection.execute(
            "SELECT saga_id, step FROM effects WHERE state = 'applied'"
        ).fetchall()
    return Ledger(
        tuple(Call(*row) for row in rows),
        frozenset((saga_id, step) for saga_id, step in applied),
    )


# -- the sagas ------------------------------------------------------------------------------------


PACED = False
"""Whether forward steps also take their planned ``pace``: the driver sets it, so that
a couple of hundred transfers are in flight at once; workers leave it unset and
finish what they recover quickly."""


def _misbehave_before(ctx: StepContext) -> None:
    data = ctx.data
    slow = data.get("slow_for", 0.0) if data.get("slow") == ctx.step else 0.0
    pace = data.get("pace", 0.0) if PACED else 0.0
    time.sleep(data.get("nap", 0.0) + slow + pace)
    fails_before = data.get("fail") == ctx.step and not data.get("fail_after")
    flaky_before = data.get("flaky") == ctx.step and ctx.step == PIVOT and ctx.attempt == 1
    if fails_before or flaky_before:
        attempted(ctx)
        raise Declined(ctx.step) if fails_before else Flaky(f"{ctx.step}: no answer")


def _misbehave_after(ctx: StepContext) -> None:
    data = ctx.data
    if data.get("crash") == ctx.step:  # every attempt: a crash loop
        os.kill(os.getpid(), signal.SIGKILL)
    if data.get("fail") == ctx.step:
        raise Declined(f"{ctx.step} declined after acting")
    if data.get("flaky") == ctx.step and ctx.attempt == 1:
        raise Flaky(f"{ctx.step}: the answer was lost")


def action(ctx: StepContext) -> dict[str, Any]:
    """Every step's action: misbehave as planned, apply the effect once."""
    _misbehave_before(ctx)
    applied = apply(ctx)
    _misbehave_after(ctx)
    return {"key": ctx.idempotency_key, "applied_now": applied}


def compensation(ctx: StepContext) -> None:
    """Every compensatable step's compensation: reverse the effect if it is applied."""
    time.sleep(ctx.data.get("nap", 0.0))
    reverse(ctx)


def _declare(name: str, on_crash: Any) -> Saga:
    saga = Saga(name, on_crash=on_crash)
    for step_name in STEPS:
        pivot = step_name == PIVOT
        step = saga.step(name=step_name, retry=STEP_RETRY, pivot=pivot)(action)
        if not pivot:
            step.compensation(retry=UNDO_RETRY)(compensation)
    return saga


TRANSFER = _declare("soak-transfer", "resume")
"""A crashed transfer goes forward (the default)."""
TRANSFER_UNWINDING = _declare("soak-transfer-oc", "compensate")
"""A crashed transfer is compensated, unless its pivot may have acted."""
SAGAS = {saga.name: saga for saga in (TRANSFER, TRANSFER_UNWINDING)}


def kind_of(step: str) -> str:
    return "pivot" if step == PIVOT else "compensatable"


def accounts(count: int) -> list[str]:
    return [f"acct-{n:02d}" for n in range(count)]
