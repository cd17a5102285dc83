"""A saga whose charge a payment ledger can be asked about, run by a process the crash
tests kill (``python -m tests.crash.reconcile_app URL LEDGER PIVOT``).

The ledger is a SQLite file of charges by idempotency key, outside the saga's
database: what a provider's "look up by key" answers. ``charge`` is a pivot when the
third argument is ``pivot`` (one attempt: a second one would be given up in doubt).
"""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing

from saga import Coordinator, Reconciled, RetryPolicy, Saga, StepContext


def charged(ledger: str, key: str) -> int | None:
    with closing(sqlite3.connect(ledger)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, amount INT)")
        row = db.execute("SELECT amount FROM charges WHERE key = ?", (key,)).fetchone()
    return None if row is None else int(row[0])


def charge(ctx: StepContext) -> dict[str, int]:
    with closing(sqlite3.connect(ctx.data["ledger"])) as db, db:
        db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, amount INT)")
        db.execute("INSERT INTO charges VALUES (?, 42)", (ctx.idempotency_key,))
    return {"charged": 42}


def look_up(ctx: StepContext) -> Reconciled:
    amount = charged(ctx.data["ledger"], ctx.idempotency_key)
    return Reconciled.not_done() if amount is None else Reconciled.done({"charged": amount})


def order(pivot: bool) -> Saga:
    saga = Saga("reconcile-pivot-order" if pivot else "reconcile-order")
    saga.step(name="reserve")(lambda ctx: "reserved").compensation()(lambda ctx: None)
    if pivot:
        step = saga.step(name="charge", pivot=True, retry=RetryPolicy(max_attempts=1))(charge)
    else:
        step = saga.step(name="charge")(charge)
        step.compensation()(lambda ctx: None)
    step.reconcile(look_up)
    saga.step(name="ship")(lambda ctx: "shipped")
    return saga


ORDER, PIVOT_ORDER = order(False), order(True)


if __name__ == "__main__":
    url, ledger, kind = sys.argv[1:4]
    with Coordinator(url, lease_ttl=600) as coord:
        coord.run(PIVOT_ORDER if kind == "pivot" else ORDER, data={"ledger": ledger})
