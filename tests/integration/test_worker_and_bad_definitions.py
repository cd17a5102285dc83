"""A definition this process made but no backend can store (a NUL byte in a name:
``register`` refuses it) is no saga anyone runs: a worker's claims leave it out, and
the stuck sagas it can run are claimed and finished as before. Before, the name went
into every claim's statement; PostgreSQL refused it, and the worker backed off as if
the database were down, for as long as the process lived."""

from __future__ import annotations

import threading

import pytest

from saga import DefinitionError, Saga, SagaStatus, StepContext, admin
from saga._internal import definition
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease


@pytest.fixture(autouse=True)
def own_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sagas defined here leave this process's catalog with the test."""
    monkeypatch.setattr(definition, "_catalog", dict(definition._catalog))


def _stuck(make_coord: MakeCoordinator) -> tuple[Saga, str]:
    """A saga whose process died in its second step (its lease expired)."""
    saga = Saga("bad-definitions-neighbour")
    saga.step()(_book)
    saga.step()(_pay)
    steps.FAILURES["pay"] = 1
    with pytest.raises(steps.Crash):
        make_coord().run(saga, key="neighbour-1")
    (record,) = make_coord().list(name=saga.name)
    return saga, record.id


def _book(ctx: StepContext) -> str:
    return "booked"


def _pay(ctx: StepContext) -> None:
    steps.crash("pay")


def test_a_definition_no_backend_can_store_leaves_the_worker_claiming(
    make_coord: MakeCoordinator,
) -> None:
    saga, saga_id = _stuck(make_coord)
    with pytest.raises(DefinitionError, match="NUL byte"):
        Saga("bad-definitions\x00nul")  # refused where it is declared
    unstorable = Saga("bad-definitions")
    unstorable.step()(_book)
    unstorable.name += "\x00nul"  # changed after its declaration: refused where registered
    worker = make_coord()
    with pytest.raises(DefinitionError, match="NUL byte"):
        worker.register(unstorable)
    worker.register(saga)
    expire_lease(worker, saga_id)
    lines: list[str] = []
    stop = threading.Event()

    def log(line: str) -> None:
        print(line)  # shown if the test fails, a hang included
        lines.append(line)
        if saga_id in line or "unavailable" in line:  # our saga's line, or the bug's
            stop.set()

    stats = admin.run_worker(worker, stop, interval=0.05, log=log)
    assert not [line for line in lines if "unavailable" in line], lines
    assert (stats.recovered, stats.errors) == (1, 0)
    assert worker.get(saga_id).status is SagaStatus.COMPLETED
