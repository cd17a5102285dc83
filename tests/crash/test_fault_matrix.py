"""Kill a saga's process at every fault point, recover in another process, check invariants.

A case is a saga shape (declarative or context-manager; 1, 2, 3 or 5 steps;
with or without a pivot; going forward, or with a step that fails so that
the crash can land while compensating; ``on_crash`` resume or compensate)
and one ``SAGA_FAULTS`` spec (``point:sN``) among those that shape's first
run reaches (:func:`tests.crash.matrix.fault_specs`). A process forked by
the fork server runs the saga on a 0.1 s lease and SIGKILLs itself at that
point; the test asserts it really died (so a fault point the engine never
reaches fails here). Then recovery runs in this process with a fresh
``Coordinator``: ``coord.recover()`` until nothing is unfinished, polling
until the lease expires by the database clock; or, for the "reenter"
variants, the application first runs the same saga again with the same key
(``coord.run``, or re-entering the ``coord.saga`` block), which must end it.
The expected final status and the invariants of :mod:`tests.crash.invariants`
are checked against the store, its history and the effect ledger.

What runs where, and why (the budget is ~3 minutes for all of tests/crash on
2 cores, both backends; a case costs ~0.25 s, most of it the lease expiring):

* SQLite: the full product for the core shapes (declarative with and without
  a pivot, context manager; each forward and failing): every reachable point
  at every step index of 1-, 2-, 3- and 5-step sagas, 333 cases. The variants
  (``on_crash="compensate"``, running again with the same key) as a diagonal.
* PostgreSQL: a diagonal of everything: for each shape and each fault point
  one case, the saga size and step index rotating through the group, so that
  every point, size and position is still covered there (84 cases). What is
  PostgreSQL-specific (SKIP LOCKED claims by concurrent recoverers, the
  server clock) is exercised in test_recovery.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from saga.testing.invariants import problems
from tests.children import ForkServer, log_tail, recover_until_settled, wait_until_claimable
from tests.crash import ledger
from tests.crash.child import recoverer, run_case
from tests.crash.invariants import check_history, check_saga
from tests.crash.matrix import (
    Scenario,
    core_shapes,
    diagonal,
    expected_status,
    scenarios,
    variant_shapes,
)

pytestmark = pytest.mark.crash


def _params() -> Sequence[object]:
    core, variants = scenarios(core_shapes()), scenarios(variant_shapes())
    sqlite = [*core, *diagonal(variants)]
    postgres = diagonal([*core, *variants])
    return [pytest.param("sqlite", s, id=f"sqlite-{s.id}") for s in sqlite] + [
        pytest.param("postgres", s, id=f"postgres-{s.id}", marks=pytest.mark.postgres)
        for s in postgres
    ]


@pytest.mark.parametrize(("backend_url", "scenario"), _params(), indirect=["backend_url"])
def test_crash_then_recovery_keeps_invariants(
    backend_url: str,
    scenario: Scenario,
    ledger_path: str,
    fork_server: ForkServer,
    tmp_path: Path,
) -> None:
    case = dataclasses.replace(scenario.case, url=backend_url, ledger=ledger_path)
    log = tmp_path / "child.log"

    ended = fork_server.run(case, log)

    assert ended.killed, f"the child did not die at {case.faults}: {ended}\n{log_tail(log)}"
    with recoverer(backend_url) as coord:
        if scenario.recovery == "reenter":
            wait_until_claimable(coord)
            rerun = run_case(coord, case)  # the application runs it again, same key
            assert rerun is not None, "re-running it recorded nothing"
            assert rerun.is_terminal, f"re-running it returned while still {rerun.value}"
        recover_until_settled(coord, timeout=30)
        sagas = coord.list(limit=10)
        histories = {saga.id: coord.history(saga.id) for saga in sagas}
    book = ledger.read(ledger_path)
    expected = expected_status(scenario)
    if expected is None:
        assert sagas == [], "a saga was recorded before its first commit"
        assert book.calls == (), "a step ran before the saga was recorded"
        return
    assert len(sagas) == 1, f"{len(sagas)} saga rows for one started saga"
    (saga,) = sagas
    assert book.saga_ids() <= {saga.id}, "effects recorded for a saga that does not exist"
    assert saga.status is expected, f"ended {saga.status.value}, expected {expected.value}"
    steps = [f"s{n}" for n in range(1, case.steps + 1)]
    check_saga(saga, book, steps, lambda name: case.kind_of(int(name[1:])))
    check_history(saga, histories[saga.id])
    assert problems(saga, histories[saga.id]) == []  # what crash_matrix checks, users' sagas too
