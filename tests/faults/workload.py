"""A mixed workload of sagas run while a fault is injected, and the checks once it settled.

The workload has every kind of saga the suite knows: declarative going
forward, declarative unwinding, transactional (its effect a row in the saga
database), context-manager; each planned with the status it must end in.
After the fault, :func:`check_settled` asserts every saga ended as planned
(none ``failed``), the crash tests' ledger invariants for each, and
exactly-once rows for the transactional ones.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from saga import Coordinator, LeaseLostError, SagaFailed, SagaStatus, SagaView
from saga.views import view_of
from tests.crash import ledger
from tests.crash.invariants import check_saga
from tests.faults import figures, sagas
from tests.faults.child import spawn
from tests.faults.dump import dump

CONTEXT = sagas.CONTEXT


@dataclasses.dataclass(frozen=True)
class Planned:
    """One saga to run: which, with what input, and how it must end."""

    saga: str
    key: str
    data: dict[str, Any]
    expected: SagaStatus


def plan(book: str, count: int, prefix: str = "w", **extra: Any) -> list[Planned]:
    """``count`` sagas cycling through the kinds, every other one failing at some step."""
    kinds = [sagas.PLAIN.name, sagas.TRANSACTIONAL.name, CONTEXT]
    planned = []
    for n in range(count):
        name = kinds[n % len(kinds)]
        fails = (n // len(kinds)) % 2 == 1
        data = sagas.how(book, **extra)
        if fails:
            data["fail"] = "s2" if name != sagas.PLAIN.name else "s3"
        expected = SagaStatus.COMPENSATED if fails else SagaStatus.COMPLETED
        planned.append(Planned(name, f"{prefix}-{n}", data, expected))
    return planned


def run(coord: Coordinator, planned: Planned) -> str:
    """Run one planned saga; how it went: ``ended`` or ``lease lost`` (left to recovery)."""
    try:
        if planned.saga == CONTEXT:
            status = sagas.run_block(coord, CONTEXT, planned.key, planned.data)
        else:
            status = coord.run(sagas.SAGAS[planned.saga], data=planned.data, key=planned.key).status
    except SagaFailed as failed:
        status = failed.status
        why = [(s.name, s.status.value, s.error) for s in coord.get(failed.saga_id).steps]
    except LeaseLostError:  # another process took it over: it finishes the saga
        return "lease lost"
    else:
        why = []
    assert status is planned.expected, f"{planned.key} ended {status.value}: {why}"
    return "ended"


class Runners:
    """Threads running planned sagas one after another; errors are kept for the test."""

    def __init__(self, coord: Coordinator, plans: Iterable[list[Planned]]) -> None:
        self.coord = coord
        self.errors: list[str] = []
        self.outcomes: list[str] = []
        self._threads = [
            threading.Thread(target=self._work, args=(batch,), daemon=True) for batch in plans
        ]

    def start(self) -> Runners:
        for thread in self._threads:
            thread.start()
        return self

    def _work(self, batch: list[Planned]) -> None:
        for planned in batch:
            try:
                self.outcomes.append(run(self.coord, planned))
            except BaseException as error:
                self.errors.append(f"{planned.key}: {type(error).__name__}: {error}")

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout)
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"saga runners still running after {timeout:g}s: {alive}"


def in_threads(planned: list[Planned], threads: int) -> list[list[Planned]]:
    return [planned[n::threads] for n in range(threads)]


def seed(
    url: str,
    book: str,
    count: int,
    where: Path,
    cm: int = 0,
    saga: str = "",
    how: dict[str, Any] | None = None,
) -> None:
    """``count`` declarative (``saga``, by default ``faults-3``) and ``cm`` context-manager
    sagas left running by a process that then dies with SIGKILL (``child seed``); ``how``
    adds misbehaviour to their input (see :mod:`tests.faults.sagas`)."""
    log = where / f"seed-{count}-{cm}.log"
    args = ["seed", url, book, str(count), "--cm", str(cm), "--saga", saga or sagas.PLAIN.name]
    if how:
        args += ["--how", json.dumps(how)]
    with log.open("w") as output:
        process = spawn(args, stdout=output, stderr=subprocess.STDOUT)
        code = process.wait(120)
    assert code == -9, f"the seeding child ended with {code}: {log.read_text()[-2000:]}"
    figures.count("kills")


def seeded_plans(book: str, count: int, cm: int = 0) -> list[Planned]:
    """What :func:`seed` left, and how recovery must end it: declarative sagas go
    forward; only its own code could continue a context-manager saga, so it is unwound."""
    data = sagas.how(book, abandon="s2")
    forward = [
        Planned(sagas.PLAIN.name, f"seed-{n}", data, SagaStatus.COMPLETED) for n in range(count)
    ]
    unwound = [Planned(CONTEXT, f"seed-cm-{n}", data, SagaStatus.COMPENSATED) for n in range(cm)]
    return forward + unwound


def all_sagas(coord: Coordinator) -> list[SagaView]:
    views: list[SagaView] = []
    before: str | None = None
    while True:
        page = coord.list(limit=500, before=before)
        views += page
        if len(page) < 500:
            return views
        before = page[-1].id


def check_settled(
    coord: Coordinator, url: str, book: str, planned: list[Planned], stored: int | None = None
) -> None:
    """Every planned saga ended as planned, with the ledger and row invariants; and the
    database holds ``stored`` sagas (by default: exactly the planned ones)."""
    count = len(dump(url)["saga_instances"])
    assert count == (len(planned) if stored is None else stored), f"{count} sagas stored"
    effects = sagas.count_effects(url) if _transactional(planned) else {}
    records = ledger.read(book)
    for item in planned:
        found = coord.store.find(item.saga, item.key)
        assert found is not None, f"{item.key} was never stored"
        view = view_of(found)
        assert view.status is item.expected, f"{item.key}: {view.status.value}"
        check_one(view, records, item, effects)
    figures.count("sagas", len(planned))


def _transactional(planned: list[Planned]) -> bool:
    return any(p.saga == sagas.TRANSACTIONAL.name for p in planned)


def check_one(
    view: SagaView, records: ledger.Ledger, item: Planned, effects: dict[str, int]
) -> None:
    """The crash tests' invariants; for transactional sagas, their row exactly once or never."""
    figures.count("invariant checks")
    if item.saga != sagas.TRANSACTIONAL.name:
        check_saga(view, records, sagas.names())
        return
    rows = effects.get(view.id, 0)
    assert rows == (1 if view.status is SagaStatus.COMPLETED else 0), f"{item.key}: {rows} rows"
    for kind in ("do", "undo"):
        calls = records.of(view.id, "s2", kind)
        assert sum(c.effective for c in calls) <= 1, f"{item.key}: s2 {kind} twice"
