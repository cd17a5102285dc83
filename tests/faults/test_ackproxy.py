"""The lost-acknowledgement proxy itself (tests/faults/ackproxy.py), with plain psycopg.

What the saga tests rely on: the proxy sees every transaction with its SQL,
a lost acknowledgement leaves the write committed and the client with a
dropped connection, and the client's retry is ordered after a sibling's
commit (by keeping the client waiting, or by holding its reconnection).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from tests.faults.ackproxy import AckProxy, Loss, proxy_for, writes_to
from tests.postgres import libpq_url

pytestmark = [pytest.mark.faults, pytest.mark.postgres]
WAIT = 30.0


@pytest.fixture
def proxy(pg_url: str) -> Iterator[AckProxy]:
    with psycopg.connect(libpq_url(pg_url), autocommit=True) as connection:
        connection.execute("CREATE TABLE probe (n int)")
        connection.execute("CREATE TABLE other (n int)")
    with proxy_for(pg_url) as running:
        yield running


@pytest.fixture
def through(proxy: AckProxy, pg_url: str) -> str:
    """The libpq URL of the test's schema through the proxy."""
    return libpq_url(proxy.url(pg_url))


def _count(url: str, table: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def test_the_proxy_records_each_transaction_with_its_sql_and_outcome(
    proxy: AckProxy, through: str
) -> None:
    with psycopg.connect(through) as connection:
        connection.execute("INSERT INTO probe VALUES (1)")
        connection.commit()
        connection.execute("INSERT INTO probe VALUES (2)")
        connection.rollback()
        for n in range(8):  # prepared after a few runs: Bind without Parse
            connection.execute("SELECT count(*) FROM probe WHERE n > %s", (n,))
        connection.commit()
    inserts = [t for t in proxy.transactions if t.wrote]
    assert [(t.tables_written, t.committed) for t in inserts] == [
        (frozenset({"probe"}), True),
        (frozenset({"probe"}), False),
    ]
    (reads,) = [t for t in proxy.transactions if any("count(*)" in s for s in t.sql)]
    assert sum("count(*)" in s for s in reads.sql) == 8
    assert not reads.wrote
    assert proxy.drops == 0


def test_a_lost_commit_acknowledgement_leaves_the_write_committed(
    proxy: AckProxy, through: str, pg_url: str
) -> None:
    proxy.arm(Loss(writes_to("probe")))
    with psycopg.connect(through) as connection:
        connection.execute("INSERT INTO probe VALUES (1)")
        with pytest.raises(psycopg.OperationalError):
            connection.commit()
    assert _count(libpq_url(pg_url), "probe") == 1
    assert (proxy.drops, proxy.caught.is_set()) == (1, True)
    assert [t.lost for t in proxy.transactions if t.wrote] == [True]


def test_a_lost_autocommit_statement_acknowledgement_leaves_the_write_committed(
    proxy: AckProxy, through: str, pg_url: str
) -> None:
    proxy.arm(Loss(writes_to("probe"), nth=2))
    with psycopg.connect(through, autocommit=True) as connection:
        connection.execute("INSERT INTO probe VALUES (1)")
        with pytest.raises(psycopg.OperationalError):
            connection.execute("INSERT INTO probe VALUES (2)")
    assert _count(libpq_url(pg_url), "probe") == 2
    assert proxy.drops == 1


def _insert_in_thread(url: str, direct: str, order: list[str]) -> threading.Thread:
    """Insert into ``probe`` through ``url``; note how it ended and whether ``other``
    (read on ``direct``, around the proxy) had its row by then."""

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as connection:
            try:
                connection.execute("INSERT INTO probe VALUES (1)")
                ended = "probe acknowledged"
            except psycopg.OperationalError:
                ended = "probe dropped"
        order.append(f"{ended}, other has {_count(direct, 'other')}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_dropped_client_waits_until_another_connection_commits(
    proxy: AckProxy, through: str, pg_url: str
) -> None:
    proxy.arm(Loss(writes_to("probe"), until=writes_to("other")))
    order: list[str] = []
    victim = _insert_in_thread(through, libpq_url(pg_url), order)
    assert proxy.caught.wait(WAIT), "the probe insert never reached the proxy"
    with psycopg.connect(through, autocommit=True) as sibling:
        assert order == [], "the client saw its answer before the sibling committed"
        sibling.execute("INSERT INTO other VALUES (1)")
    victim.join(WAIT)
    assert order == ["probe dropped, other has 1"]
    assert (proxy.drops, proxy.timeouts) == (1, 0)


def test_a_held_reconnection_waits_until_another_connection_commits(
    proxy: AckProxy, through: str, pg_url: str
) -> None:
    proxy.arm(Loss(writes_to("probe"), until=writes_to("other"), hold=True))
    order: list[str] = []
    with psycopg.connect(through, autocommit=True) as sibling:  # connected before the drop
        _insert_in_thread(through, libpq_url(pg_url), order).join(WAIT)
        assert order == ["probe dropped, other has 0"]
        reconnecting = _insert_in_thread(through, libpq_url(pg_url), order)
        reconnecting.join(0.2)  # held: it cannot get through before the sibling commits
        assert len(order) == 1
        sibling.execute("INSERT INTO other VALUES (1)")
    reconnecting.join(WAIT)
    assert order[1:] == ["probe acknowledged, other has 1"]
    assert (proxy.drops, proxy.held, proxy.timeouts) == (1, 1, 0)


def test_a_sibling_that_never_commits_ends_the_wait_at_the_timeout(
    proxy: AckProxy, through: str, pg_url: str
) -> None:
    proxy.arm(Loss(writes_to("probe"), until=writes_to("other"), timeout=0.2))
    order: list[str] = []
    _insert_in_thread(through, libpq_url(pg_url), order).join(WAIT)
    assert order == ["probe dropped, other has 0"]
    assert (proxy.drops, proxy.timeouts) == (1, 1)
