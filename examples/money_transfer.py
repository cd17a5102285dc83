"""Money transfer between two banks with two separate databases, and a crash mid-way.

Bank A's database is also the saga store, so the debit is a transactional
step: the balance update and the step's success record commit together,
exactly once. Bank B is another database that saga cannot join: the credit
is at least once, made safe by bank B itself, whose effect fence
(``EffectFence``) records each credit, applied or undone, in the same
transaction as the balance change: a retried credit changes nothing, and a
credit that arrives after its transfer was unwound (a frozen process waking
late) is refused. A transfer to a frozen account fails and is unwound (the
debit refunded, exactly once again).

The whole story, in one command (SQLite files by default)::

    python examples/money_transfer.py demo

or by hand::

    python examples/money_transfer.py run --transfers 2000 &     # transfers money
    kill -9 %1                                                   # SIGKILL, mid-transfer
    saga --db sqlite:///bank_a.db --app examples.money_transfer recover
    python examples/money_transfer.py check                      # money is conserved

``--db URL`` (or ``$SAGA_DATABASE_URL``) is bank A and the saga store,
``--bank-b URL`` bank B. Defaults: ``bank_a.db`` and ``bank_b.db`` here;
with a PostgreSQL ``--db``, bank B defaults to the database
``<name>_bank_b`` on the same server (created if missing). Wait for the dead
process's lease (``LEASE_TTL``, 1 s) to expire before ``saga recover``; the
``recover`` subcommand (``coord.recover()``) does the same without the CLI.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from saga.adapters.integrations.fencing import EffectFence
from saga.adapters.integrations.sqlalchemy import store_engine
from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.engine import make_url

from saga import Coordinator, Saga, SagaFailed, SagaStatus, StepContext

LEASE_TTL = 1.0  # short, for the demo: a dead process's transfers are claimable in 1 s
ACCOUNTS = 4
OPENING_BALANCE = 1_000
FROZEN = "B-4"  # bank B refuses credits to this account
TOTAL = 2 * ACCOUNTS * OPENING_BALANCE
ROOT = Path(__file__).resolve().parent.parent

# -- both banks have the same two tables, each in its own database ------------------------

bank = MetaData()
accounts = Table(
    "bank_accounts",
    bank,
    Column("id", String(10), primary_key=True),
    Column("balance", Integer, nullable=False),
    Column("frozen", Boolean, nullable=False, default=False),
)
movements = Table(  # one row per applied transfer leg, keyed by the step's idempotency key
    "bank_movements",
    bank,
    Column("key", String(120), primary_key=True),
    Column("account", String(10), nullable=False),
    Column("amount", Integer, nullable=False),
)
fence = EffectFence(
    "bank_effects", metadata=bank
)  # bank B's record of each credit: applied or undone


class InsufficientFundsError(Exception):
    pass


class AccountFrozenError(Exception):
    pass


# -- the saga -----------------------------------------------------------------------------------

transfer = Saga("money-transfer")


@transfer.step(transactional=True)
def debit(ctx: StepContext) -> dict[str, Any]:
    """Bank A (the saga store's database): balance and success record commit together."""
    source, amount = ctx.data["from"], ctx.data["amount"]
    taken = ctx.session.execute(
        update(accounts)
        .where(accounts.c.id == source, accounts.c.balance >= amount)
        .values(balance=accounts.c.balance - amount)
    ).rowcount
    if taken != 1:
        raise InsufficientFundsError(f"{source} cannot pay {amount}")
    move = {"key": ctx.idempotency_key, "account": source, "amount": -amount}
    ctx.session.execute(insert(movements).values(move))
    return {"debited": amount}


@debit.compensation
def refund(ctx: StepContext) -> None:
    source, amount = ctx.data["from"], ctx.data["amount"]
    ctx.session.execute(
        update(accounts).where(accounts.c.id == source).values(balance=accounts.c.balance + amount)
    )
    move = {"key": f"{ctx.idempotency_key}:refund", "account": source, "amount": amount}
    ctx.session.execute(insert(movements).values(move))


@transfer.step()
def credit(ctx: StepContext) -> dict[str, Any]:
    """Bank B (another database): at least once, applied once, and never after its undo."""
    target, amount = ctx.data["to"], ctx.data["amount"]
    time.sleep(ctx.data.get("latency", 0))  # the network: where a crash most likely lands
    with bank_b(ctx.data["bank_b"]).begin() as connection:
        frozen = connection.execute(
            select(accounts.c.frozen).where(accounts.c.id == target)
        ).scalar_one()
        if frozen:
            raise AccountFrozenError(f"{target} is frozen")
        # Applied already (a retry after a crash), or a zombie's late call after the
        # transfer was unwound: bank B changes nothing.
        if not fence.forward(connection, ctx):
            return {"credited": amount, "again": True}
        move = {"key": ctx.idempotency_key, "account": target, "amount": amount}
        connection.execute(insert(movements).values(move))
        connection.execute(
            update(accounts)
            .where(accounts.c.id == target)
            .values(balance=accounts.c.balance + amount)
        )
    return {"credited": amount}


@credit.compensation
def uncredit(ctx: StepContext) -> None:
    # The credit may have been applied even though it never returned: bank B's fence
    # knows. Undone or not, it leaves a tombstone that refuses the credit if it comes late.
    target, amount = ctx.data["to"], ctx.data["amount"]
    with bank_b(ctx.data["bank_b"]).begin() as connection:
        if fence.undo(connection, ctx):
            connection.execute(delete(movements).where(movements.c.key == ctx.idempotency_key))
            connection.execute(
                update(accounts)
                .where(accounts.c.id == target)
                .values(balance=accounts.c.balance - amount)
            )


_engines: dict[str, Engine] = {}


def bank_b(url: str) -> Engine:
    """Bank B's engine, made on first use in whichever process runs the step."""
    if url not in _engines:
        _engines[url] = create_engine(url)
    return _engines[url]


# -- the two databases ----------------------------------------------------------------------


def bank_a_url(db: str | None) -> str:
    url = db or os.environ.get("SAGA_DATABASE_URL") or "sqlite:///bank_a.db"
    return _absolute(url)


def bank_b_url(bank_a: str, given: str | None) -> str:
    """Bank B: as given; else ``bank_b.db`` beside bank A's file, or ``<db>_bank_b``."""
    if given:
        return _absolute(given)
    url = make_url(bank_a)
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///{Path(url.database or 'bank_a.db').with_name('bank_b.db')}"
    name = f"{url.database}_bank_b"
    _create_database(url, name)
    return url.set(database=name).render_as_string(hide_password=False)


def _absolute(url: str) -> str:
    """SQLite paths made absolute, so any process (``saga recover``) finds the same file."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return url
    return parsed.set(database=str(Path(parsed.database).resolve())).render_as_string(False)


def _create_database(server: Any, name: str) -> None:
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        known = connection.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
        ).first()
        if known is None:
            quoted = name.replace('"', '""')
            connection.execute(text(f'CREATE DATABASE "{quoted}"'))
    engine.dispose()


def stored(url: str) -> str:
    """What the saga input keeps: the URL without its password (use PGPASSWORD/.pgpass)."""
    return make_url(url).set(password=None).render_as_string(hide_password=False)


def open_banks(coord: Coordinator, b_url: str, reset: bool = False) -> None:
    for engine, prefix in ((store_engine(coord), "A"), (bank_b(b_url), "B")):
        if reset:
            bank.drop_all(engine)
        bank.create_all(engine)
        with engine.begin() as connection:
            if connection.execute(select(func.count()).select_from(accounts)).scalar_one():
                continue
            for number in range(1, ACCOUNTS + 1):
                account = f"{prefix}-{number}"
                row = {"id": account, "balance": OPENING_BALANCE, "frozen": account == FROZEN}
                connection.execute(insert(accounts).values(row))


def balances(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        rows = connection.execute(select(accounts.c.id, accounts.c.balance).order_by(accounts.c.id))
        return {row.id: row.balance for row in rows}


# -- commands ------------------------------------------------------------------------------


def run(coord: Coordinator, b_url: str, transfers: int, latency: float) -> None:
    open_banks(coord, b_url)
    batch = uuid.uuid4().hex[:6]
    for number in range(1, transfers + 1):
        data = {
            "from": f"A-{random.randint(1, ACCOUNTS)}",
            "to": f"B-{random.randint(1, ACCOUNTS)}",
            "amount": random.randint(1, 50),
            "bank_b": stored(b_url),
            "latency": latency,
        }
        try:
            coord.run(transfer, data=data, key=f"{batch}-{number}")
            outcome = "done"
        except SagaFailed as failure:
            outcome = f"{failure.status.value} ({failure.__cause__})"
        print(
            f"transfer {number}: {data['amount']:3} {data['from']} -> {data['to']}: {outcome}",
            flush=True,
        )


def check(coord: Coordinator, b_url: str) -> bool:
    a, b = balances(store_engine(coord)), balances(bank_b(b_url))
    unfinished = coord.list(status=[SagaStatus.RUNNING, SagaStatus.COMPENSATING], limit=1000)
    counts = {
        s.value: len(coord.list(status=s, name=transfer.name, limit=100_000))
        for s in (SagaStatus.COMPLETED, SagaStatus.COMPENSATED, SagaStatus.FAILED)
    }
    total = sum(a.values()) + sum(b.values())
    print(f"bank A {a}\nbank B {b}")
    print(f"transfers: {counts}, unfinished: {len(unfinished)}")
    if total == TOTAL and not unfinished:
        print(f"money conserved: {total} == {TOTAL}")
        return True
    print(
        f"money NOT conserved: {total} != {TOTAL} ({TOTAL - total} in flight in "
        f"{len(unfinished)} unfinished transfers: run saga recover)"
    )
    return False


def recover(coord: Coordinator) -> None:
    wait_for_leases(coord)
    report = coord.recover()
    for outcome in report.outcomes:
        ended = outcome.status.value if outcome.status else outcome.error
        print(f"recovered {outcome.saga_id}: {ended}")


def wait_for_leases(coord: Coordinator, timeout: float = 60.0) -> None:
    """Until every unfinished saga's lease has expired (the database's clock decides)."""
    active = [SagaStatus.RUNNING, SagaStatus.COMPENSATING]
    deadline = time.monotonic() + timeout
    while len(coord.list(status=active, limit=1000)) != len(coord.list(stuck=True, limit=1000)):
        if time.monotonic() > deadline:
            raise TimeoutError("leases still live")
        time.sleep(0.2)


def demo(coord: Coordinator, a_url: str, b_url: str) -> bool:
    """Transfer, SIGKILL the process mid-way, recover with ``saga recover``, check."""
    if coord.list(status=[SagaStatus.RUNNING, SagaStatus.COMPENSATING], limit=1):
        print("unfinished transfers from an earlier run: finish them first (saga recover)")
        return False
    open_banks(coord, b_url, reset=True)
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--db",
            a_url,
            "--bank-b",
            b_url,
            "run",
            "--transfers",
            "100000",
            "--latency",
            "0.01",
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while len(coord.list(status=SagaStatus.COMPLETED, name=transfer.name, limit=20)) < 20:
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            print(f"the transferring process stopped on its own (exit {child.wait()})")
            return False
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    print(f"killed the transferring process (pid {child.pid}) with SIGKILL; before recovery:")
    check(coord, b_url)
    for saga in coord.list(status=[SagaStatus.RUNNING, SagaStatus.COMPENSATING]):
        steps = ", ".join(f"{s.name} {s.status.value}" for s in saga.steps)
        print(f"  stuck: {saga.id} {saga.status.value}: {steps}")
    wait_for_leases(coord)
    print("\n$ saga --db ... --app examples.money_transfer recover")
    if not saga_recover(a_url):
        print("(the saga command is missing or failed: recovering with coord.recover())")
        recover(coord)
    print("\nafter recovery:")
    return check(coord, b_url)


def saga_recover(a_url: str) -> bool:
    """Run the operator's command, as one would at 3 a.m.; False when it is not installed."""
    command = shutil.which("saga", path=str(Path(sys.executable).parent)) or shutil.which("saga")
    if command is None:
        return False
    done = subprocess.run(
        [command, "--db", a_url, "--app", "examples.money_transfer", "recover"],
        cwd=ROOT,
        check=False,
    )
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        help="bank A and the saga store (default: $SAGA_DATABASE_URL, else sqlite:///bank_a.db)",
    )
    parser.add_argument("--bank-b", help="bank B (default: beside bank A)")
    commands = parser.add_subparsers(dest="command")
    go = commands.add_parser("run", help="make transfers until done (or killed)")
    go.add_argument("--transfers", type=int, default=50)
    go.add_argument("--latency", type=float, default=0.0, help="seconds each credit takes")
    commands.add_parser("check", help="is money conserved? (exit 1 if not)")
    commands.add_parser("recover", help="finish interrupted transfers (coord.recover())")
    commands.add_parser("demo", help="run, SIGKILL mid-way, saga recover, check")
    args = parser.parse_args(argv)
    a_url = bank_a_url(args.db)
    b_url = bank_b_url(a_url, args.bank_b)
    with Coordinator(a_url, lease_ttl=LEASE_TTL) as coord:
        command = args.command or "demo"
        if command == "run":
            run(coord, b_url, args.transfers, args.latency)
            return 0 if check(coord, b_url) else 1
        if command == "recover":
            recover(coord)
            return 0 if check(coord, b_url) else 1
        if command == "check":
            return 0 if check(coord, b_url) else 1
        return 0 if demo(coord, a_url, b_url) else 1


if __name__ == "__main__":
    sys.exit(main())
