"""A commit whose acknowledgement is lost (the connection drops right after COMMIT).

Each scenario is played once cleanly, to learn its writes (saga creation,
commits, transactional steps, claims) in order; then once per write on a
fresh database, losing that write's acknowledgement: the write commits, and
the store is told the connection dropped. The store's retry must recognise
its own write, so every run must end exactly as the clean one did: the same
writes, the same statuses and attempt counts, the same history (no event
twice), the same effect-ledger calls and the same transactional rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from saga import Coordinator, SagaFailed, SagaStatus, SagaView
from tests import pgbouncer
from tests.children import ForkServer, log_tail, recover_until_settled, wait_until_claimable
from tests.crash import ledger
from tests.crash.child import Case
from tests.crash.invariants import check_saga
from tests.faults import figures, sagas
from tests.faults.conftest import FreshUrl
from tests.faults.lossy import LostAckStore

pytestmark = pytest.mark.faults

Play = Callable[[Coordinator, str], None]
TRUSTED = ["tests.crash.child", sagas.__name__]


def _forward_twice(coord: Coordinator, book: str) -> None:
    data = sagas.how(book)
    first = coord.run(sagas.PLAIN, data=data, key="k")
    again = coord.run(sagas.PLAIN, data=data, key="k")  # the same key: runs nothing
    assert (first.id, first.status) == (again.id, SagaStatus.COMPLETED)


def _unwind(coord: Coordinator, book: str) -> None:
    with pytest.raises(SagaFailed) as failed:
        coord.run(sagas.PLAIN, data=sagas.how(book, fail="s3"), key="k")
    assert failed.value.status is SagaStatus.COMPENSATED


def _context(coord: Coordinator, book: str) -> None:
    assert sagas.run_block(coord, sagas.CONTEXT, "k", sagas.how(book)) is SagaStatus.COMPLETED


def _context_unwind(coord: Coordinator, book: str) -> None:
    with pytest.raises(SagaFailed) as failed:
        sagas.run_block(coord, sagas.CONTEXT, "k", sagas.how(book, fail="s2"))
    assert failed.value.status is SagaStatus.COMPENSATED


def _transactional(coord: Coordinator, book: str) -> None:
    view = coord.run(sagas.TRANSACTIONAL, data=sagas.how(book), key="k")
    assert view.status is SagaStatus.COMPLETED


def _transactional_unwind(coord: Coordinator, book: str) -> None:
    with pytest.raises(SagaFailed) as failed:
        coord.run(sagas.TRANSACTIONAL, data=sagas.how(book, fail="s2"), key="k")
    assert failed.value.status is SagaStatus.COMPENSATED


def _recover(coord: Coordinator, book: str) -> None:
    del book
    wait_until_claimable(coord)
    recover_until_settled(coord, timeout=30)


def _compensate(coord: Coordinator, book: str) -> None:
    del book
    wait_until_claimable(coord)
    (saga,) = coord.list(limit=1)
    assert coord.compensate(saga.id).status is SagaStatus.COMPENSATED


def _cancel(coord: Coordinator, book: str) -> None:
    del book
    wait_until_claimable(coord)
    (saga,) = coord.list(limit=1)
    assert coord.cancel(saga.id).status is SagaStatus.CANCELLED


CRASH_AT_S2 = Case("declarative", 3, faults="after_action:s2")


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    play: Play
    crash: Case | None = None
    """Seeded first: a saga run by a process that dies with SIGKILL at ``crash.faults``."""

    transactional: bool = False


SCENARIOS = [
    Scenario("forward", _forward_twice),
    Scenario("unwind", _unwind),
    Scenario("context", _context),
    Scenario("context-unwind", _context_unwind),
    Scenario("transactional", _transactional, transactional=True),
    Scenario("transactional-unwind", _transactional_unwind, transactional=True),
    Scenario("recover-forward", _recover, CRASH_AT_S2),
    Scenario("recover-compensate", _recover, Case("context", 2, faults="after_action:s2")),
    Scenario(
        "recover-compensating",
        _recover,
        Case("declarative", 3, fail=3, faults="after_undo_commit:s3"),
    ),
    Scenario("operator-compensate", _compensate, CRASH_AT_S2),
    Scenario("operator-cancel", _cancel, CRASH_AT_S2),
]


@dataclasses.dataclass(frozen=True)
class Played:
    writes: list[str]
    lost: list[str]
    shape: list[Any]


def _play(scenario: Scenario, url: str, where: Path, server: ForkServer, lose: set[int]) -> Played:
    where.mkdir()
    book = str(where / "ledger.db")
    ledger.create(book)
    if scenario.transactional:
        sagas.create_effects_table(url)
    if scenario.crash is not None:
        case = dataclasses.replace(scenario.crash, url=url, ledger=book)
        ended = server.run(case, where / "child.log")
        assert ended.killed, f"the seeding child did not die: {log_tail(where / 'child.log')}"
        figures.count("kills")
    store = LostAckStore(url, lose)
    with Coordinator(store=store, lease_ttl=2.0, trusted_modules=TRUSTED) as coord:
        scenario.play(coord, book)
        views = list(reversed(coord.list(limit=100)))
        shape = _shape(coord, views, book, url if scenario.transactional else None)
    for view in views:
        if not scenario.transactional:
            _check(view, book, scenario)
    figures.count("sagas", len(views))
    return Played(store.writes, store.lost, shape)


def _check(view: SagaView, book: str, scenario: Scenario) -> None:
    figures.count("invariant checks")
    count = scenario.crash.steps if scenario.crash else sagas.STEPS
    kind_of = scenario.crash.kind_of if scenario.crash else (lambda _n: "compensatable")
    steps = [f"s{n}" for n in range(1, count + 1)]
    check_saga(view, ledger.read(book), steps, lambda name: kind_of(int(name[1:])))


def _shape(
    coord: Coordinator, views: list[SagaView], book: str, effects_url: str | None
) -> list[Any]:
    """Everything that must not depend on a lost acknowledgement (ids and owners aside)."""
    index = {view.id: n for n, view in enumerate(views)}
    shape: list[Any] = []
    for view in views:
        steps = [(s.name, s.status, s.attempt, s.compensation_attempt) for s in view.steps]
        history = [(e.kind, e.step, e.attempt, e.epoch) for e in coord.history(view.id)]
        shape.append((view.name, view.key, view.status, view.epoch, steps, history))
    calls = [
        (index[c.saga_id], c.step, c.kind, c.attempt, c.epoch, c.effective)
        for c in ledger.read(book).calls
    ]
    shape.append(calls)
    if effects_url is not None:
        rows = sagas.count_effects(effects_url)
        shape.append(sorted((index[saga_id], n) for saga_id, n in rows.items()))
    return shape


ON_POSTGRES = ("forward", "transactional-unwind", "recover-compensating", "operator-cancel")
"""Every kind of write on PostgreSQL's paths (the single-statement hot path, transactional
steps, both claims, cancel requests); every scenario on SQLite. Together within budget."""


def _params() -> list[Any]:
    everything = [pytest.param("sqlite", s, id=f"sqlite-{s.name}") for s in SCENARIOS]
    return (
        everything
        + [
            pytest.param("postgres", s, id=f"postgres-{s.name}", marks=pytest.mark.postgres)
            for s in SCENARIOS
            if s.name in ON_POSTGRES
        ]
        + [
            pytest.param("pgbouncer", s, id=f"pgbouncer-{s.name}", marks=pgbouncer.MARKS)
            for s in SCENARIOS
            if s.name in ON_POSTGRES
        ]
    )


@pytest.mark.parametrize(("backend", "scenario"), _params())
def test_a_lost_commit_acknowledgement_is_recognised_at_every_commit_point(
    backend: str, scenario: Scenario, fresh_url: FreshUrl, tmp_path: Path, fork_server: ForkServer
) -> None:
    clean = _play(scenario, fresh_url(), tmp_path / "clean", fork_server, set())
    assert clean.lost == []
    assert len(clean.writes) >= 3, clean.writes
    for number, kind in enumerate(clean.writes, start=1):
        lossy = _play(scenario, fresh_url(), tmp_path / f"lose-{number}", fork_server, {number})
        where = f"ack of write {number} ({kind}) lost"
        assert lossy.lost == [kind], f"{where}: the fault did not fire as planned"
        assert lossy.writes == clean.writes, f"{where}: other writes were made"
        assert lossy.shape == clean.shape, f"{where}: the outcome differs"
