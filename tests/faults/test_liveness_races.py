"""The owner's liveness record against a claimer, statement by statement (tests/interleave.py).

An owner is paused just before the commit that starts ``charge``, its lease 60 s
long. Its liveness record is then made to say "dead" while the owner lives on (on
PostgreSQL its liveness session is terminated, as a cut connection would end it; on
SQLite the record is pointed at a process that has exited): a claimer re-running the
key takes the saga at once, and the owner, let go, is fenced (``LeaseLostError``) and
writes nothing. Had the owner renewed its record first (on PostgreSQL its heartbeat
does, every renewal), the claimer is refused (``SagaBusyError``) and the owner finishes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from saga.adapters.sql import tables
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


def _say_dead(observer: Coordinator, owner: str) -> None:
    """Make ``owner``'s record say it died, though it lives on."""
    engine = observer.store.engine  # type: ignore[attr-defined]
    o = tables.owners.c
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            pid = connection.execute(select(o.backend_pid).where(o.owner == owner)).scalar_one()
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        else:
            _point_at(connection, owner, _exited_pid())
    if engine.dialect.name == "postgresql":  # a terminated backend takes a moment to go
        _wait_for(lambda: _backend_gone(engine, pid))


def _backend_gone(engine: Engine, pid: int) -> bool:
    with engine.connect() as connection:
        query = text("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = :pid")
        return bool(connection.execute(query, {"pid": pid}).scalar())


def _point_at(connection: Connection, owner: str, pid: int) -> None:
    """SQLite: the owner's record names process ``pid``."""
    moved = update(tables.owners).where(tables.owners.c.owner == owner).values(pid=pid)
    assert connection.execute(moved).rowcount == 1


@pytest.mark.parametrize("renewed", [False, True], ids=["record-lost", "record-renewed"])
def test_a_claimer_and_the_owners_liveness_record(db_url: str, renewed: bool) -> None:
    with Interleaving(db_url, sagas=[order]) as run:
        owner_coord, claimer_coord = run.coordinator(), run.coordinator()
        data = {"item": "k"}
        owner = run.actor("owner", lambda: owner_coord.run(order, data, key="k"), owner_coord)
        owner.run_until(lambda b: b.writes_step("charge", "running"))
        _say_dead(run.observer, owner_coord.owner)
        if renewed:
            # PostgreSQL: the heartbeat's check opens a new session and records it;
            # SQLite (no session to lose): the record names this live process again.
            owner_coord.store.keep_owners()  # type: ignore[attr-defined]
            if db_url.startswith("sqlite"):
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
