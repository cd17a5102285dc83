"""EffectFence under a step's action and its compensation racing for one key.

The owner's action (epoch 1: ``forward`` and the insert it allows, one transaction)
and a recoverer's compensation (epoch 2: ``undo`` and the delete it allows) meet on
one effect key in the participant's own database (SQLite file, PostgreSQL, MariaDB).
For every statement boundary of either (counted by a dry run), that one is paused
there (tests/interleave.py, the participant engine hooked), the other is let go:

* paused before its first statement, it holds nothing, and the other runs to its end;
* paused between its statements it holds the key's row: the other must wait for it
  (seen waiting by the server on PostgreSQL and MariaDB) until it goes on and commits.

Whatever the order, the compensation wins: nothing is left reserved, the key is a
tombstone at epoch 2, and either both went (applied, then undone) or neither did
(the tombstone came first and refused the late action).

The same sweep with the compensation on a key that only a collation would take for
the action's (other case, a trailing space, an accent): the two never share a row,
so neither waits for the other (but on SQLite, whose writer lock is the database's)
and the action's effect stays applied (under MariaDB's default collation, before the
key column was binary, the compensation's tombstone refused the action).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from saga.adapters.integrations.fencing import EffectState
from sqlalchemy import Connection, Engine, create_engine, insert, select

from tests import participants, postgres
from tests.interleave import DEFAULT_TIMEOUT, Interleaving, InterleavingError
from tests.participant import sagas

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

KEY = "5f1d3c1e-0000-4000-8000-00000000000a:reserve"
PARTICIPANTS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "mariadb"]


@pytest.fixture(params=PARTICIPANTS)
def participant(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Engine]]:
    """Makes a fresh participant database (the order's tables) at each call."""
    with contextlib.ExitStack() as stack:

        def make() -> Engine:
            if request.param == "sqlite":
                # The waiting writer waits as a row lock would (SQLite's busy handler).
                url = f"sqlite:///{tmp_path}/participant-{uuid.uuid4().hex[:8]}.db"
                engine = create_engine(url, connect_args={"timeout": DEFAULT_TIMEOUT})
            elif request.param == "postgres":
                server = request.getfixturevalue("postgres_server")
                engine = create_engine(stack.enter_context(postgres.isolated_schema(server)))
            else:
                engine = create_engine(stack.enter_context(participants.mariadb_database()))
            stack.callback(engine.dispose)
            sagas.metadata.create_all(engine)
            return engine

        yield make


@pytest.fixture
def store(tmp_path: Path) -> str:
    """The harness's own saga database (the calls here use none)."""
    return f"sqlite:///{tmp_path}/saga.db"


def _backend_id(connection: Connection) -> int | None:
    """The server's id of the connection (no statement sent): PostgreSQL's backend pid,
    MariaDB's thread id; SQLite has none."""
    raw = connection.connection.dbapi_connection
    if connection.dialect.name == "postgresql":
        return int(raw.info.backend_pid)  # type: ignore[union-attr]
    if connection.dialect.name in ("mysql", "mariadb"):
        return int(raw.thread_id())  # type: ignore[union-attr]
    return None


class Race:
    """The two calls on one participant, and what each decided."""

    def __init__(self, engine: Engine, action_key: str = KEY, compensation_key: str = KEY) -> None:
        self.engine = engine
        self.keys = {"action": action_key, "compensation": compensation_key}
        self.ids: dict[str, int | None] = {}
        self.went: dict[str, bool] = {}

    def action(self) -> None:
        with self.engine.begin() as connection:
            self.ids["action"] = _backend_id(connection)
            key = self.keys["action"]
            decision = sagas.fence.forward(connection, key=key, epoch=1)
            if decision:
                connection.execute(insert(sagas.reservations).values(key=key, sku="mug"))
            self.went["action"] = decision.go

    def compensation(self) -> None:
        with self.engine.begin() as connection:
            self.ids["compensation"] = _backend_id(connection)
            key = self.keys["compensation"]
            decision = sagas.fence.undo(connection, key=key, epoch=2)
            if decision:
                table = sagas.reservations
                connection.execute(table.delete().where(table.c.key == key))
            self.went["compensation"] = decision.go


def _dry_run(store: str, engine: Engine, first: str) -> int:
    """How many statement boundaries ``first`` has, run before the other (the one whose
    boundaries the sweep pauses at: once paused, it holds the key's row)."""
    race = Race(engine)
    with Interleaving(store) as run:
        run.participant(engine)
        order = ["action", "compensation"] if first == "action" else ["compensation", "action"]
        actors = [run.actor(name, getattr(race, name)).run_to_end() for name in order]
    assert [a.outcome for a in actors] == ["returned", "returned"], actors
    return len(actors[0].boundaries)


def _is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def _waiting_for_a_lock(engine: Engine, backend_id: int | None) -> bool:
    """Whether the server shows that connection waiting for a lock (only the two calls
    use this database or schema, so the lock is the other call's)."""
    if backend_id is None:
        return False
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            found = connection.exec_driver_sql(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %(pid)s",
                {"pid": backend_id},
            ).scalar()
            return found == "Lock"
        found = connection.exec_driver_sql(
            "SELECT trx_state FROM information_schema.innodb_trx"
            " WHERE trx_mysql_thread_id = %(id)s",
            {"id": backend_id},
        ).scalar()
        return found == "LOCK WAIT"


def _server_says(engine: Engine, backend_id: int | None) -> str:
    """What the server shows of that connection (for a timeout's message)."""
    if backend_id is None or engine.dialect.name not in ("mysql", "mariadb"):
        return f"connection {backend_id}"
    with engine.connect() as connection:
        row = connection.exec_driver_sql(
            "SELECT p.command, p.state, p.info, t.trx_state"
            " FROM information_schema.processlist p LEFT JOIN information_schema.innodb_trx t"
            " ON t.trx_mysql_thread_id = p.id WHERE p.id = %(id)s",
            {"id": backend_id},
        ).first()
    return f"connection {backend_id}: {None if row is None else tuple(row)}"


def _wait_until(
    condition: Callable[[], bool], what: str, explain: Callable[[], str] = lambda: ""
) -> None:
    """Polls a condition of the database (never a sleep standing for one)."""
    deadline = time.monotonic() + DEFAULT_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise InterleavingError(f"timed out: {what} ({explain()})")
        time.sleep(0.01)


@pytest.mark.parametrize("paused", ["action", "compensation"])
def test_action_and_compensation_of_one_key_take_turns_and_the_compensation_wins(
    participant: Callable[[], Engine], store: str, paused: str
) -> None:
    other = "compensation" if paused == "action" else "action"
    width = _dry_run(store, participant(), paused)
    assert width >= 2, "no boundary between the fence's statements"
    held = 0
    for k in range(width):
        engine = participant()
        race = Race(engine)
        with Interleaving(store) as run:
            run.participant(engine)
            holder = run.actor(paused, getattr(race, paused))
            at = holder.run_until(k)
            assert at is not None, f"{paused} ended before its boundary {k}"
            waiter = run.actor(other, getattr(race, other)).start()
            if at.free:  # holds nothing yet: the other goes through
                waiter.wait_done()
            else:  # holds the key's row: the other waits for it
                held += 1
                if not _is_sqlite(engine):  # SQLite's busy handler cannot be seen
                    _wait_until(
                        lambda e=engine, r=race: _waiting_for_a_lock(e, r.ids.get(other)),
                        f"{other} waits for {paused}'s lock at {at}",
                        lambda e=engine, r=race: _server_says(e, r.ids.get(other)),
                    )
                assert not waiter.done, f"{other} went ahead while {paused} held the key"
            holder.run_to_end()
            waiter.wait_done()
            assert (holder.outcome, waiter.outcome) == ("returned", "returned"), run.actors
        _assert_the_compensation_won(engine, race, f"{paused} paused at {at}")
    assert held >= 1, "the sweep never paused a call holding the key"


def _assert_the_compensation_won(engine: Engine, race: Race, where: str) -> None:
    with engine.connect() as connection:
        reserved = connection.execute(select(sagas.reservations.c.key)).scalars().all()
        assert sagas.fence.state(connection, KEY) is EffectState.UNDONE, where
        epoch = connection.execute(select(sagas.fence.table.c.epoch)).scalar()
    assert reserved == [], where
    assert epoch == 2, where
    went = (race.went["action"], race.went["compensation"])
    assert went in ((True, True), (False, False)), (where, went)


NEAR_KEYS = {
    "case": KEY.upper(),
    "pad": KEY + " ",
    "accent": KEY.replace("reserve", "r\u00e9serve"),
}
"""Keys a collation could take for ``KEY`` (MariaDB's default did): other effects."""


@pytest.mark.parametrize("near", list(NEAR_KEYS))
@pytest.mark.parametrize("paused", ["action", "compensation"])
def test_calls_for_keys_a_collation_would_merge_neither_wait_for_nor_touch_each_other(
    participant: Callable[[], Engine], store: str, paused: str, near: str
) -> None:
    """The action on ``KEY`` and the compensation of a near key: on PostgreSQL and
    MariaDB the compensation runs to its end while the action holds its row (they share
    none); on SQLite the database's one writer lock makes it wait. Either way the
    action's effect stays applied and the other key gets only its tombstone."""
    other = "compensation" if paused == "action" else "action"
    width = _dry_run(store, participant(), paused)
    for k in range(width):
        engine = participant()
        race = Race(engine, action_key=KEY, compensation_key=NEAR_KEYS[near])
        with Interleaving(store) as run:
            run.participant(engine)
            holder = run.actor(paused, getattr(race, paused))
            at = holder.run_until(k)
            assert at is not None, f"{paused} ended before its boundary {k}"
            waiter = run.actor(other, getattr(race, other)).start()
            if at.free or not _is_sqlite(engine):
                waiter.wait_done()  # no row of its key is held: it goes through
            holder.run_to_end()
            waiter.wait_done()
            assert (holder.outcome, waiter.outcome) == ("returned", "returned"), run.actors
        where = f"{paused} paused at {at}"
        assert race.went == {"action": True, "compensation": False}, where
        with engine.connect() as connection:
            reserved = connection.execute(select(sagas.reservations.c.key)).scalars().all()
            assert sagas.fence.state(connection, KEY) is EffectState.APPLIED, where
            assert sagas.fence.state(connection, NEAR_KEYS[near]) is EffectState.UNDONE, where
        assert reserved == [KEY], where
