"""A mixed workload of sagas run while a fault is injected, and the checks once it settled.

The workload has every kind of saga the suite knows: declarative going
forward, declarative unwinding, transactional (its effect a row in the saga
database), context-manager; each planned with the status it must end in.
After the fault, :func:`check_settled` asserts every saga ended as planned
(none ``failed``), the crash tests' ledger invariants for each, and
exactly-once rows for the transactional ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import subprocess
import threading
from collections.abc import Coroutine, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from saga import (
    AsyncCoordinator,
    Coordinator,
    LeaseLostError,
    SagaFailed,
    SagaStatus,
    SagaView,
)
from saga._internal.views import view_of
from tests.crash import ledger
from tests.crash.invariants import check_saga
from tests.faults import figures, sagas
from tests.faults.child import spawn
from tests.faults.dump import dump

CONTEXT = sagas.CONTEXT
KINDS = (sagas.PLAIN.name, sagas.TRANSACTIONAL.name, CONTEXT)
"""The kinds :func:`plan` cycles through by default."""
EVERY_KIND = (*KINDS, sagas.PARALLEL.name, sagas.ASYNC.name)
"""Also parallel steps, and coroutine steps run by an ``AsyncCoordinator`` (:class:`AsyncSide`)."""
_FAILS_AT = {sagas.PLAIN.name: "s3", sagas.ASYNC.name: "s3"}
"""Where a failing saga of each kind fails (s2 where not named)."""
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Planned:
    """One saga to run: which, with what input, and how it must end."""

    saga: str
    key: str
    data: dict[str, Any]
    expected: SagaStatus


def plan(
    book: str, count: int, prefix: str = "w", kinds: Sequence[str] = KINDS, **extra: Any
) -> list[Planned]:
    """``count`` sagas cycling through ``kinds``, every other round of them failing at
    some step."""
    planned = []
    for n in range(count):
        name = kinds[n % len(kinds)]
        fails = (n // len(kinds)) % 2 == 1
        data = sagas.how(book, **extra)
        if fails:
            data["fail"] = _FAILS_AT.get(name, "s2")
        expected = SagaStatus.COMPENSATED if fails else SagaStatus.COMPLETED
        planned.append(Planned(name, f"{prefix}-{n}", data, expected))
    return planned


class AsyncSide:
    """An ``AsyncCoordinator`` on an event loop of its own thread, for the runner threads
    to run the coroutine sagas on (:func:`run`)."""

    def __init__(self, url: str, lease_ttl: float) -> None:
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.coord = self.call(self._open(url, lease_ttl))

    @staticmethod
    async def _open(url: str, lease_ttl: float) -> AsyncCoordinator:
        return AsyncCoordinator(url, lease_ttl=lease_ttl)

    def call(self, work: Coroutine[Any, Any, T], timeout: float = 300.0) -> T:
        if self._closed:  # a runner still at it while the test ends: never scheduled
            work.close()
            raise RuntimeError("the AsyncSide is closed")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def __enter__(self) -> AsyncSide:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(concurrent.futures.TimeoutError):
            self.call(self.coord.close(), timeout=60)
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


def run(coord: Coordinator, planned: Planned, aside: AsyncSide | None = None) -> str:
    """Run one planned saga (a coroutine saga on ``aside``); how it went: ``ended`` or
    ``lease lost`` (left to recovery)."""
    try:
        if planned.saga == CONTEXT:
            status = sagas.run_block(coord, CONTEXT, planned.key, planned.data)
        elif planned.saga == sagas.ASYNC.name:
            assert aside is not None, "coroutine sagas need an AsyncSide"
            ran = aside.coord.run(sagas.ASYNC, data=planned.data, key=planned.key)
            status = aside.call(ran).status
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
    """Threads running planned sagas one after another; errors are kept for the test.
    :meth:`stop` makes them start no more (``started`` says which ones they did)."""

    def __init__(
        self,
        coord: Coordinator,
        plans: Iterable[list[Planned]],
        aside: AsyncSide | None = None,
    ) -> None:
        self.coord = coord
        self.aside = aside
        self.errors: list[str] = []
        self.outcomes: list[str] = []
        self.started: list[Planned] = []
        self.acknowledged: list[Planned] = []
        """The sagas whose run returned to the caller in its planned status."""
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, args=(batch,), daemon=True) for batch in plans
        ]

    def start(self) -> Runners:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def __enter__(self) -> Runners:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Start no more, and give the sagas under way a while to end (a failed test
        leaves no runner behind to use what the test closes next)."""
        self.stop()
        for thread in self._threads:
            thread.join(60)

    @property
    def ended(self) -> int:
        """How many sagas they ran to the end (or handed on), or failed to."""
        return len(self.outcomes) + len(self.errors)

    def _work(self, batch: list[Planned]) -> None:
        for planned in batch:
            if self._stop.is_set():
                return
            self.started.append(planned)
            try:
                outcome = run(self.coord, planned, self.aside)
                self.outcomes.append(outcome)
                if outcome == "ended":
                    self.acknowledged.append(planned)
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
    prefix: str = "seed",
    lease: float | None = None,
) -> None:
    """``count`` declarative (``saga``, by default ``faults-3``) and ``cm`` context-manager
    sagas left running by a process that then dies with SIGKILL (``child seed``); ``how``
    adds misbehaviour to their input (see :mod:`tests.faults.sagas`); their keys begin
    with ``prefix``."""
    log = where / f"{prefix}-{count}-{cm}.log"
    args = ["seed", url, book, str(count), "--cm", str(cm), "--saga", saga or sagas.PLAIN.name]
    args += ["--prefix", prefix]
    if lease is not None:  # longer than the child's default, where workers already run
        args += ["--lease", str(lease)]
    if how:
        args += ["--how", json.dumps(how)]
    with log.open("w") as output:
        process = spawn(args, stdout=output, stderr=subprocess.STDOUT)
        code = process.wait(120)
    assert code == -9, f"the seeding child ended with {code}: {log.read_text()[-2000:]}"
    figures.count("kills")


def seeded_plans(book: str, count: int, cm: int = 0, prefix: str = "seed") -> list[Planned]:
    """What :func:`seed` left, and how recovery must end it: declarative sagas go
    forward; only its own code could continue a context-manager saga, so it is unwound."""
    data = sagas.how(book, abandon="s2")
    forward = [
        Planned(sagas.PLAIN.name, f"{prefix}-{n}", data, SagaStatus.COMPLETED) for n in range(count)
    ]
    unwound = [
        Planned(CONTEXT, f"{prefix}-cm-{n}", data, SagaStatus.COMPENSATED) for n in range(cm)
    ]
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


SIBLINGS = ("s2", "s3")
"""The parallel saga's steps that start in one commit, both after s1."""


def _siblings_as_undone(view: SagaView, records: ledger.Ledger) -> SagaView:
    """The view with its siblings' ``seq`` in the order their compensations ran.

    Both are recorded started in one commit, in declaration order, and then act at
    once: which acted first, and so which is "newest", their ``seq`` does not say (the
    coordinator unwinds the one that ended last first). Either order is right for two
    independent branches; what the invariants still check is that s1, their parent,
    is undone after both, and everything else as for any saga.
    """
    undone = [call.step for call in records.of(view.id, kind="undo")]
    if not all(step in undone for step in SIBLINGS):
        return view
    later_first = sorted(SIBLINGS, key=undone.index, reverse=True)
    seqs = sorted(step.seq for step in view.steps if step.name in SIBLINGS)
    renumbered = dict(zip(later_first, seqs, strict=True))
    steps = tuple(
        dataclasses.replace(step, seq=renumbered.get(step.name, step.seq)) for step in view.steps
    )
    return dataclasses.replace(view, steps=steps)


def _transactional(planned: list[Planned]) -> bool:
    return any(p.saga == sagas.TRANSACTIONAL.name for p in planned)


def check_one(
    view: SagaView, records: ledger.Ledger, item: Planned, effects: dict[str, int]
) -> None:
    """The crash tests' invariants; for transactional sagas, their row exactly once or never."""
    figures.count("invariant checks")
    if item.saga == sagas.PARALLEL.name:
        order = [step.name for step in view.steps]
        assert order[:1] == ["s1"], f"{item.key}: {order}"
        assert set(order) <= set(sagas.names()), f"{item.key}: {order}"
        check_saga(_siblings_as_undone(view, records), records, order)
        return
    if item.saga != sagas.TRANSACTIONAL.name:
        check_saga(view, records, sagas.names())
        return
    rows = effects.get(view.id, 0)
    assert rows == (1 if view.status is SagaStatus.COMPLETED else 0), f"{item.key}: {rows} rows"
    for kind in ("do", "undo"):
        calls = records.of(view.id, "s2", kind)
        assert sum(c.effective for c in calls) <= 1, f"{item.key}: s2 {kind} twice"
