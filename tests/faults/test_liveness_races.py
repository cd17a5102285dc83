"""The owner's liveness record against a claimer, statement by statement (tests/interleave.py).

An owner is paused just before the commit that starts ``charge``, its lease 60 s
long. Its liveness record is then made to say "dead" while the owner lives on (on
PostgreSQL its liveness session is terminated, as an operator or an idle timeout would
end it; on SQLite the record is pointed at a process that has exited). If the owner
cannot record itself again (a frozen process: on PostgreSQL its watcher is stopped), a
claimer re-running the key takes the saga (on PostgreSQL after the grace, which it
waits out once), and the owner, let go, is fenced (``LeaseLostError``) and writes
nothing. If it does (on PostgreSQL its watcher records a new session the moment the old
one ends), the claimer is refused (``SagaBusyError``) and the owner finishes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from saga.adapters.sql import liveness, tables
from sqlalchemy import Connection, Engine, select, text, update

from saga import Coordinator, SagaStatus
from tests.cli.test_worker_and_demo import _wait_for
from tests.crash.takeover_child import order
from tests.interleave import Interleaving

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def _exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _freeze_watch(owner: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner can no longer record itself again, as if its process were frozen."""
    monkeypatch.setattr(owner.store.liveness, "keep", lambda: None)  # type: ignore[attr-defined]


def _say_dead(observer: Coordinator, owner: str) -> int | None:
    """Make ``owner``'s record say it died, though it lives on; on PostgreSQL, the pid of
    the liveness session that was terminated."""
    engine = observer.store.engine  # type: ignore[attr-defined]
    o = tables.owners.c
    with engine.begin() as connection:
        if engine.dialect.name != "postgresql":
            _point_at(connection, owner, _exited_pid())
            return None
        pid = connection.execute(select(o.backend_pid).where(o.owner == owner)).scalar_one()
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    _wait_for(lambda: _backend_gone(engine, pid))  # a terminated backend takes a moment
    return int(pid)


def _backend_gone(engine: Engine, pid: int) -> bool:
    with engine.connect() as connection:
        query = text("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = :pid")
        return bool(connection.execute(query, {"pid": pid}).scalar())


def _recorded_pid(observer: Coordinator, owner: str) -> int | None:
    engine = observer.store.engine  # type: ignore[attr-defined]
    o = tables.owners.c
    with engine.connect() as connection:
        query = select(o.backend_pid).where(o.owner == owner)
        return connection.execute(query).scalar_one_or_none()  # type: ignore[no-any-return]


def _point_at(connection: Connection, owner: str, pid: int) -> None:
    """SQLite: the owner's record names process ``pid``."""
    moved = update(tables.owners).where(tables.owners.c.owner == owner).values(pid=pid)
    assert connection.execute(moved).rowcount == 1


@pytest.mark.parametrize("renewed", [False, True], ids=["record-lost", "record-renewed"])
def test_a_claimer_and_the_owners_liveness_record(
    db_url: str, renewed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Interleaving(db_url, sagas=[order]) as run:
        owner_coord, claimer_coord = run.coordinator(), run.coordinator()
        data = {"item": "k"}
        owner = run.actor("owner", lambda: owner_coord.run(order, data, key="k"), owner_coord)
        owner.run_until(lambda b: b.writes_step("charge", "running"))
        if not renewed:
            _freeze_watch(owner_coord, monkeypatch)
        terminated = _say_dead(run.observer, owner_coord.owner)
        if renewed and terminated is not None:
            # PostgreSQL: the owner's watcher saw its session end and recorded another.
            _wait_for(lambda: _recorded_pid(run.observer, owner_coord.owner) != terminated)
        elif renewed:  # SQLite (no session to lose): the record names this live process
            with run.observer.store.engine.begin() as connection:  # type: ignore[attr-defined]
                _point_at(connection, owner_coord.owner, os.getpid())
        claimer = run.actor(
            "claimer", lambda: claimer_coord.run(order, data, key="k"), claimer_coord
        )
        claimer.run_to_end()
        owner.run_to_end()
        view = run.observer.get(key="k")
        if renewed:
            assert (claimer.outcome, owner.outcome) == ("SagaBusyError", "returned")
            assert (view.status, view.epoch) == (SagaStatus.COMPLETED, 1)
        else:
            assert (claimer.outcome, owner.outcome) == ("returned", "LeaseLostError")
            assert (view.status, view.epoch) == (SagaStatus.COMPLETED, 2)
            history = run.observer.history(view.id)
            assert all(e.epoch == 2 for e in history if e.step == "charge")


def _age_suspicion(observer: Coordinator, owner: str, seconds: float) -> float | None:
    """Date the owner's record ``seconds`` back, its suspicion (if any) with it: its grace
    has passed, on purpose. Returns the suspicion's new date."""
    o = tables.owners.c
    back = {"suspected_at": o.suspected_at - seconds, "registered_at": o.registered_at - seconds}
    with observer.store.engine.begin() as connection:  # type: ignore[attr-defined]
        aged = update(tables.owners).where(o.owner == owner).values(back)
        assert connection.execute(aged).rowcount == 1
        query = select(o.suspected_at).where(o.owner == owner)
        return connection.execute(query).scalar_one()  # type: ignore[no-any-return]


@pytest.mark.postgres
@pytest.mark.parametrize("recorded_again", [False, True], ids=["still-gone", "recorded-again"])
def test_a_suspicion_older_than_the_owners_new_session_does_not_count(
    pg_url: str, recorded_again: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claimer suspects the owner (its session gone); the grace then passes (dated
    back on purpose). Had the owner recorded a new session between the two, the claim,
    which checks the record inside its own statement, is refused; else it takes the saga
    at once (the grace has passed: no wait)."""
    with Interleaving(pg_url, sagas=[order]) as run:
        owner_coord, claimer_coord = run.coordinator(), run.coordinator()
        data = {"item": "k"}
        owner = run.actor("owner", lambda: owner_coord.run(order, data, key="k"), owner_coord)
        owner.run_until(lambda b: b.writes_step("charge", "running"))
        _freeze_watch(owner_coord, monkeypatch)
        _say_dead(run.observer, owner_coord.owner)
        store = run.observer.store
        saga_id = run.observer.get(key="k").id
        left = store.transaction(  # type: ignore[attr-defined]
            lambda c: liveness.suspected(c, store.dialect, saga_id)  # type: ignore[attr-defined]
        )
        assert left is not None  # suspected, the grace just begun
        if recorded_again:
            monkeypatch.undo()
            owner_coord.store.keep_owners()  # type: ignore[attr-defined]
        suspicion = _age_suspicion(run.observer, owner_coord.owner, 10 * liveness.GRACE)
        assert (suspicion is None) is recorded_again  # a new session clears the suspicion
        claimer = run.actor(
            "claimer", lambda: claimer_coord.run(order, data, key="k"), claimer_coord
        )
        claimer.run_to_end()
        owner.run_to_end()
        expected = (
            ("SagaBusyError", "returned") if recorded_again else ("returned", "LeaseLostError")
        )
        assert (claimer.outcome, owner.outcome) == expected
        assert run.observer.get(key="k").status is SagaStatus.COMPLETED


def test_an_owner_is_recorded_before_its_first_saga_names_it(db_url: str) -> None:
    """Killed between its saga's creation and its first renewal, a process must already
    be known: its record is written before the creation, not when it first holds a saga."""
    with Interleaving(db_url, sagas=[order]) as run:
        coord = run.coordinator()
        owner = run.actor("owner", lambda: coord.run(order, {"item": "k"}, key="k"), coord)
        assert owner.run_until(lambda b: b.kind == "hot.create") is not None
        engine = run.observer.store.engine  # type: ignore[attr-defined]
        o = tables.owners.c
        with engine.connect() as connection:
            recorded = connection.execute(select(o.owner).where(o.owner == coord.owner)).all()
        assert len(recorded) == 1
        owner.run_to_end()
        assert owner.outcome == "returned"
