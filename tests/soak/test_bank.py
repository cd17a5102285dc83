"""The soak's bank keeps the promise the soak checks (no effect left applied under a
compensated saga) when a compensation meets an action still in flight on its key: an
owner that stalled past its lease while a recoverer compensates."""

from __future__ import annotations

import threading

import psycopg
import pytest

from saga import StepContext
from tests.postgres import libpq_url
from tests.soak import bank

pytestmark = pytest.mark.postgres

KEY_STEP = "fee"


def _context(url: str, epoch: int) -> StepContext:
    saga_id = "00000000-0000-4000-8000-00000000fee1"
    data = {"bank": url, "src": "acct-00", "dst": "acct-01", "amount": 5, "fee": 1}
    return StepContext(saga_id, "soak", KEY_STEP, 1, epoch, data=data)


def _state(url: str, key: str) -> str | None:
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        row = connection.execute("SELECT state FROM effects WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def test_a_compensation_waits_for_an_action_in_flight_and_undoes_it(pg_url: str) -> None:
    bank.create(pg_url, bank.accounts(2), 100)
    undo = _context(pg_url, epoch=3)
    undone: list[bool] = []
    with psycopg.connect(libpq_url(pg_url)) as stalled:  # the old owner, mid-transaction
        stalled.execute(
            "INSERT INTO effects (key, saga_id, step, state, moves)"
            " VALUES (%s, %s, %s, 'applied', '[]')",
            (undo.idempotency_key, undo.saga_id, KEY_STEP),
        )
        recoverer = threading.Thread(target=lambda: undone.append(bank.reverse(undo)))
        recoverer.start()
        recoverer.join(0.5)
        assert recoverer.is_alive(), "the compensation did not wait for the action in flight"
        stalled.commit()  # the action lands after all
    recoverer.join(60)
    assert undone == [True]
    assert _state(pg_url, undo.idempotency_key) == "undone"


def test_an_action_after_the_tombstone_changes_nothing(pg_url: str) -> None:
    bank.create(pg_url, bank.accounts(2), 100)
    assert bank.reverse(_context(pg_url, epoch=3)) is False  # nothing applied: a tombstone
    late = _context(pg_url, epoch=2)
    assert bank.apply(late) is False
    assert _state(pg_url, late.idempotency_key) == "undone"
