"""EffectFence on real participant databases (SQLite file, PostgreSQL, MariaDB): what each
call decides, two processes' calls taking turns, and a zombie owner's late call refused
after a recoverer compensated its saga."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from saga.adapters.integrations.fencing import EffectFence, EffectState
from sqlalchemy import Engine, create_engine, insert, select

from saga import SagaStatus
from tests import children, participants
from tests.participant import sagas

PARTICIPANTS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "mariadb"]
KEY = "5f1d3c1e-0000-4000-8000-000000000001:reserve"


@pytest.fixture(params=PARTICIPANTS)
def participant_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A participant's own database, empty, with the order's tables."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/participant.db"
        sagas.create(url)
        yield url
    elif request.param == "postgres":
        url = str(request.getfixturevalue("pg_url"))
        sagas.create(url)
        yield url
    else:
        with participants.mariadb_database() as url:
            sagas.create(url)
            yield url
    sagas.participant(url).dispose()


@pytest.fixture
def engine(participant_url: str) -> Engine:
    return sagas.participant(participant_url)


def _forward(engine: Engine, epoch: int, key: str = KEY) -> tuple[bool, str]:
    with engine.begin() as connection:
        decision = sagas.fence.forward(connection, key=key, epoch=epoch)
        if decision:
            connection.execute(insert(sagas.reservations).values(key=key, sku="mug"))
    return decision.go, decision.reason


def _undo(engine: Engine, epoch: int, key: str = KEY) -> tuple[bool, str]:
    with engine.begin() as connection:
        decision = sagas.fence.undo(connection, key=key, epoch=epoch)
        if decision:
            connection.execute(sagas.reservations.delete().where(sagas.reservations.c.key == key))
    return decision.go, decision.reason


def _reserved(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.execute(select(sagas.reservations.c.key)).scalars())


def _state(engine: Engine) -> EffectState | None:
    with engine.connect() as connection:
        return sagas.fence.state(connection, KEY)


def test_applied_once_undone_once_and_a_late_forward_call_refused(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    assert _forward(engine, 1) == (True, "first call: apply the effect")
    assert _forward(engine, 1) == (False, "applied already: nothing to do")
    assert _forward(engine, 2) == (False, "applied already: nothing to do")  # a recoverer
    assert _reserved(engine) == [KEY]
    assert _undo(engine, 2) == (True, "applied: undo the effect")
    assert _undo(engine, 2) == (False, "undone already: nothing to do")
    assert _reserved(engine) == []
    with caplog.at_level(logging.WARNING, logger="saga.fencing"):
        late = _forward(engine, 2)
    assert late == (False, "refused: a late call under epoch 2; it was compensated already")
    assert _reserved(engine) == []
    assert _state(engine) is EffectState.UNDONE
    assert [r.getMessage() for r in caplog.records] == [f"effect {KEY} {late[1]}"]


def test_a_compensation_that_finds_nothing_leaves_a_tombstone(engine: Engine) -> None:
    reason = "nothing was applied: the tombstone refuses a late forward call"
    assert _undo(engine, 2) == (False, reason)
    assert _state(engine) is EffectState.UNDONE
    assert _forward(engine, 1)[0] is False  # the call that never returned arrives
    assert _forward(engine, 3)[0] is False  # compensated is final, whatever the epoch
    assert _reserved(engine) == []


def test_a_call_under_an_older_epoch_than_one_seen_is_refused(engine: Engine) -> None:
    assert _forward(engine, 2)[0] is True  # the recoverer applied it first
    assert _forward(engine, 1) == (
        False,
        "refused: a late call under epoch 1; epoch 2 was seen for it",
    )
    assert _undo(engine, 1)[0] is False  # nor may an old owner's compensation undo it
    assert _reserved(engine) == [KEY]
    assert _state(engine) is EffectState.APPLIED


def test_the_context_gives_key_and_epoch_and_bad_input_is_refused(engine: Engine) -> None:
    class Context:
        idempotency_key, epoch = KEY, 4

    with engine.begin() as connection:
        assert sagas.fence.forward(connection, Context()).epoch == 4
        with pytest.raises(ValueError, match="key= and epoch="):
            sagas.fence.forward(connection, key=KEY)
        with pytest.raises(ValueError, match="longer than 255"):
            sagas.fence.forward(connection, key="k" * 256, epoch=1)


def test_a_table_of_its_own_is_created_once(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/own.db")
    fence = EffectFence("order_effects")
    fence.create(engine)
    fence.create(engine)  # already there: nothing happens
    with engine.begin() as connection:
        assert fence.forward(connection, key=KEY, epoch=1).go
    with engine.connect() as connection:
        assert fence.state(connection, KEY) is EffectState.APPLIED
    engine.dispose()


@pytest.mark.parametrize(
    "participant_url",
    [pytest.param("postgres", marks=pytest.mark.postgres), "mariadb"],
    indirect=True,
)
def test_two_calls_for_one_key_take_turns(engine: Engine) -> None:
    """The first call holds the key's row until its transaction ends; the second, from
    another connection, waits for it and then finds the effect applied."""
    inside, release = threading.Event(), threading.Event()
    second: list[tuple[bool, str]] = []

    def first() -> None:
        with engine.begin() as connection:
            assert sagas.fence.forward(connection, key=KEY, epoch=1).go
            connection.execute(insert(sagas.reservations).values(key=KEY, sku="mug"))
            inside.set()
            release.wait(60)  # paused between its fence call and its commit

    one = threading.Thread(target=first)
    one.start()
    assert inside.wait(60)
    two = threading.Thread(target=lambda: second.append(_forward(engine, 1)))
    two.start()
    two.join(0.5)
    assert two.is_alive(), "the second call went ahead while the first held the key"
    release.set()
    one.join(60)
    two.join(60)
    assert second == [(False, "applied already: nothing to do")]
    assert _reserved(engine) == [KEY]


@pytest.mark.crash
def test_a_zombie_owner_that_wakes_after_the_compensation_leaves_nothing_applied(
    db_url: str, tmp_path: Path
) -> None:
    """MariaDB holds the stock. The owner freezes inside ``reserve`` before calling it; a
    recoverer re-runs ``reserve``, meets the declined charge and releases the stock; then
    the owner wakes and makes its call: refused, nothing is left reserved."""
    with participants.mariadb_database() as participant:
        sagas.create(participant)
        with (tmp_path / "owner.log").open("w") as log:
            owner = children.spawn(
                "tests.participant.child",
                [db_url, participant, "order-1"],
                stdout=subprocess.PIPE,
                stderr=log,
            )
        try:
            children.wait_until_stopped(owner)
            coord = children.recoverer(db_url, [])
            children.wait_until_claimable(coord)
            report = coord.recover()
            assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
            owner.send_signal(signal.SIGCONT)
            out, _ = owner.communicate(timeout=60)
            coord.close()
        finally:
            if owner.poll() is None:
                owner.kill()
        assert json.loads(out.strip().splitlines()[-1]) == {"error": "LeaseLostError", "epoch": 1}
        assert sagas.history(participant) == [
            (2, "forward", True),  # the recoverer reserves,
            (2, "undo", True),  # the charge is declined: released
            (1, "forward", False),  # the zombie's call, refused
        ]
        assert sagas.reserved(participant) == []
        sagas.participant(participant).dispose()


DISTINCT_KEYS = [
    ("A", "a"),  # case
    ("k", "k "),  # a trailing space (PAD SPACE collations ignore it)
    ("e", "\u00e9"),  # an accent (accent-insensitive collations ignore it)
    ("\u00e9", "e\u0301"),  # é composed and decomposed: other bytes, another effect
]


@pytest.mark.parametrize(("first", "second"), DISTINCT_KEYS, ids=["case", "pad", "accent", "nfd"])
def test_keys_that_differ_in_any_byte_are_distinct_effects(
    engine: Engine, first: str, second: str
) -> None:
    """Under MariaDB's default collation the second key was answered "applied already":
    a distinct effect, never applied."""
    assert _forward(engine, 1, key=first)[0] is True
    assert _forward(engine, 1, key=second) == (True, "first call: apply the effect")
    assert sorted(_reserved(engine)) == sorted([first, second])
    assert _undo(engine, 1, key=second) == (True, "applied: undo the effect")
    assert _reserved(engine) == [first]  # undoing one left the other applied
    with engine.connect() as connection:
        assert sagas.fence.state(connection, first) is EffectState.APPLIED
        assert sagas.fence.state(connection, second) is EffectState.UNDONE
        stored = connection.execute(select(sagas.fence.table.c.key)).scalars().all()
    assert sorted(stored) == sorted([first, second])  # read back as the same strings


def _earlier_release_table(engine: Engine, charset: str) -> None:
    """The fence table as aa041bb created it: the key a VARCHAR under the default
    (case- and accent-insensitive, PAD SPACE) collation of its character set."""
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TABLE saga_effects (`key` VARCHAR(255) NOT NULL PRIMARY KEY,"
            " state VARCHAR(16) NOT NULL, epoch BIGINT NOT NULL, token VARCHAR(32) NOT NULL)"
            f" CHARACTER SET {charset}"
        )
        connection.exec_driver_sql(
            "INSERT INTO saga_effects VALUES ('A', 'applied', 1, 't'), ('k ', 'undone', 2, 'u')"
        )


def test_create_makes_an_earlier_release_mariadb_table_binary_keeping_its_rows() -> None:
    with participants.mariadb_database() as url:
        engine = create_engine(url)
        _earlier_release_table(engine, "utf8mb4")
        fence = EffectFence()
        fence.create(engine)
        fence.create(engine)  # binary already: nothing to do
        with engine.connect() as connection:
            kind = connection.exec_driver_sql(
                "SELECT data_type FROM information_schema.columns WHERE table_schema ="
                " DATABASE() AND table_name = 'saga_effects' AND column_name = 'key'"
            ).scalar()
            assert kind == "varbinary"
            assert fence.state(connection, "A") is EffectState.APPLIED
            assert fence.state(connection, "k ") is EffectState.UNDONE  # its space kept
            assert fence.state(connection, "a") is None
            assert fence.state(connection, "k") is None
        with engine.begin() as connection:
            assert fence.forward(connection, key="a", epoch=1).go
        engine.dispose()


def test_create_refuses_an_earlier_release_table_whose_keys_are_not_utf8() -> None:
    with participants.mariadb_database() as url:
        engine = create_engine(url)
        _earlier_release_table(engine, "latin1")
        with pytest.raises(ValueError, match="latin1 character set; convert it to utf8mb4"):
            EffectFence().create(engine)
        engine.dispose()
