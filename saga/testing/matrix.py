"""``crash_matrix``: kill a saga's process at every durable point, recover, check.

For each path (the saga succeeding, and each chosen step failing) a probe run
lists the fault points it passes (:mod:`saga.testing.plan`). Then, for each
point and mode, a child process forked by the fork server runs the saga from
scratch on a fresh store and is killed with SIGKILL at that point (or frozen,
for ``zombie``); another child recovers it; this process reads the store and
checks saga's invariants (:mod:`saga.testing.invariants`), the status the
saga must end in, and the caller's own ``check``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from saga._internal.definition import Saga
from saga._internal.errors import ConfigurationError
from saga._internal.ports import EventRecord
from saga._internal.status import SagaStatus, StepKind
from saga._internal.views import SagaView
from saga.testing import invariants
from saga.testing.databases import ENV_URL, Store, StorePool
from saga.testing.forkserver import Ended, ForkPool, ForkServer
from saga.testing.plan import Path as RunPath
from saga.testing.plan import cases, specs
from saga.testing.report import Case, Report, Row, what_ran
from saga.testing.targets import Target, target_of

ENTRY = "saga.testing.runner:job"
Check = Callable[..., object]


@dataclasses.dataclass(frozen=True)
class _Spec:
    """One ``crash_matrix`` call's settings."""

    target: Target
    data: Any
    check: Check | None
    setup: Callable[[str], object] | None
    trusted: tuple[str, ...]
    timeout: float
    on_crash: str
    ordered: bool


@dataclasses.dataclass(frozen=True)
class _State:
    """The store after a case: the saga (``None``: nothing recorded) and its history."""

    saga: SagaView | None
    events: tuple[EventRecord, ...]


class CrashMatrix:
    """The ``crash_matrix`` fixture's value: call it with a saga; returns a :class:`Report`."""

    def __init__(
        self, pool: ForkPool, workdir: Path, database: str | None, ledger: str | None
    ) -> None:
        self.pool = pool
        self.workdir = workdir
        self.database = database
        self.ledger = ledger
        self._numbers = itertools.count(1)

    def __call__(
        self,
        saga: Saga | Callable[..., Any],
        data: Any = None,
        *,
        check: Check | None = None,
        modes: Sequence[str] = ("recover", "compensate"),
        fail: Sequence[str] | None = None,
        setup: Callable[[str], object] | None = None,
        trusted_modules: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> Report:
        """Run the matrix of ``saga`` (a ``Saga``, or a module-level function
        ``(coord, data, key)`` that opens a context-manager saga; async ones too).

        ``fail`` lists the steps to make fail, one path each (default: every step that
        may fail, i.e. not a retriable one); ``setup(url)`` prepares each case's fresh
        store; ``check(view)`` or ``check(view, case)`` is your invariant, run after
        every case in which a saga was recorded.
        """
        spec = _spec(saga, data, check, setup, trusted_modules, timeout)
        if "zombie" in modes and self.database is None:
            raise ConfigurationError(
                "crash_matrix: the zombie mode needs PostgreSQL (a frozen process can hold "
                f"a SQLite file's write lock); set ${ENV_URL} or --saga-database-url"
            )
        with self._stores(), ThreadPoolExecutor(self.pool.size) as workers:
            paths = self._paths(spec, fail, workers)
            planned = [(next(self._numbers), c) for c in cases(paths, modes)]
            rows = workers.map(
                lambda nc: self._case(spec, nc[0], nc[1], _path_of(paths, nc[1])), planned
            )
            return Report(spec.target.ref, tuple(rows))

    @contextlib.contextmanager
    def _stores(self) -> Iterator[None]:
        self.stores = StorePool(self.database, self.workdir)
        try:
            yield
        finally:
            self.stores.close()

    def plan(
        self,
        saga: Saga | Callable[..., Any],
        data: Any = None,
        *,
        modes: Sequence[str] = ("recover", "compensate"),
        fail: Sequence[str] | None = None,
        setup: Callable[[str], object] | None = None,
    ) -> list[Case]:
        """The cases a call with these arguments runs, in order, without running them
        (only the probe runs that find the points)."""
        spec = _spec(saga, data, None, setup, (), 60.0)
        with self._stores(), ThreadPoolExecutor(self.pool.size) as workers:
            return cases(self._paths(spec, fail, workers), modes)

    def _paths(
        self, spec: _Spec, fail: Sequence[str] | None, workers: ThreadPoolExecutor
    ) -> list[RunPath]:
        """The probe runs: the saga succeeding, then each chosen step failing."""
        succeeding = self._probe(spec, None)
        failing = _failing_steps(spec.target.load(), succeeding, fail)
        return [succeeding, *workers.map(lambda step: self._probe(spec, step), failing)]

    # -- one run ----------------------------------------------------------------------------

    def _args(self, spec: _Spec, job: str, url: str, failing: str | None, **more: Any) -> Any:
        return {
            "job": job,
            "target": dataclasses.asdict(spec.target),
            "data": spec.data,
            "key": "crash-matrix",
            "url": url,
            "fail": failing,
            "ledger": self.ledger,
            "trusted": list(spec.trusted),
            "timeout": spec.timeout,
            **more,
        }

    def _probe(self, spec: _Spec, failing: str | None) -> RunPath:
        number = next(self._numbers)
        trace = self.workdir / f"probe-{number}.json"
        log = self.workdir / f"probe-{number}.log"
        with self.stores.store(f"probe-{number}") as store:
            url = store.url
            if spec.setup is not None:
                spec.setup(url)
            args = self._args(spec, "run", url, failing, trace=str(trace))
            with self.pool.server([spec.target.module]) as server:
                ended = server.call(ENTRY, args, log, kill_after=spec.timeout)
        if ended.code != 0 or not trace.exists():
            what = "the saga" if failing is None else f"the saga with {failing} failing"
            raise RuntimeError(f"crash_matrix: {what} did not run ({ended}):\n{_tail(log)}")
        probe = json.loads(trace.read_text())
        return RunPath(failing, specs(probe["points"]), probe["status"])

    def _case(self, spec: _Spec, number: int, case: Case, path: RunPath) -> Row:
        log = self.workdir / f"case-{number}.log"
        with self.stores.store(f"case-{number}") as store:
            case = dataclasses.replace(case, url=store.url)
            if spec.setup is not None:
                spec.setup(store.url)
            with self.pool.server([spec.target.module]) as server:
                problems, crashed = self._crash_and_recover(server, spec, case, store, log)
            state = _read(store)
            if crashed is not None or not problems:
                problems += _judge(spec, case, path, crashed, state)
        status = "-" if state.saga is None else state.saga.status.value
        return Row(case, status, what_ran(state.events), tuple(problems))

    def _crash_and_recover(
        self, server: ForkServer, spec: _Spec, case: Case, store: Store, log: Path
    ) -> tuple[list[str], SagaView | None]:
        """Kill (or freeze) the saga at the case's point and recover it; what went wrong,
        and the saga as the dead process left it."""
        if case.mode == "lost_ack":
            return self._lose_answer(server, spec, case, log), None
        zombie = case.mode == "zombie"
        run = self._args(spec, "run", case.url, case.failing, freeze=zombie)
        ended = server.call(ENTRY, run, log, case.point, kill_after=spec.timeout, freeze=zombie)
        reached = ended.stopped is not None if zombie else ended.killed
        if not reached:
            return [f"the process never reached {case.point} ({ended}): {_tail(log, 3)}"], None
        crashed = _read(store).saga
        recover = self._args(
            spec, "recover", case.url, case.failing, compensate=case.mode == "compensate"
        )
        recovered = server.call(ENTRY, recover, log, kill_after=spec.timeout + 10)
        problems = [] if recovered.code == 0 else [f"recovery {recovered}: {_tail(log, 3)}"]
        if zombie and ended.stopped is not None:
            problems += _wake(server, store, ended.stopped)
        return problems, crashed

    def _lose_answer(self, server: ForkServer, spec: _Spec, case: Case, log: Path) -> list[str]:
        """Run the saga with the answer to the first commit after the point lost, then
        recover whatever that left unfinished; what went wrong."""
        answers = log.with_suffix(".answers.json")
        run = self._args(spec, "run", case.url, case.failing, answers=str(answers))
        ended = server.call(ENTRY, run, log, case.point, kill_after=spec.timeout)
        if ended.code != 0 or not answers.exists():
            return [f"the run with a lost answer {ended}: {_tail(log, 3)}"]
        if json.loads(answers.read_text())["lost"] == 0:
            return [f"no commit followed {case.point}, so no answer was lost"]
        recover = self._args(spec, "recover", case.url, case.failing, compensate=False)
        recovered = server.call(ENTRY, recover, log, kill_after=spec.timeout + 10)
        return [] if recovered.code == 0 else [f"recovery {recovered}: {_tail(log, 3)}"]


def _wake(server: ForkServer, store: Store, pid: int) -> list[str]:
    """Continue the frozen owner once recovery finished its saga: it must change nothing."""
    before = _read(store)
    woke: Ended = server.resume(pid)
    after = _read(store)
    if after != before:
        return [f"the zombie ({woke}) changed the saga after recovery finished it"]
    return []


def _spec(
    saga: Saga | Callable[..., Any],
    data: Any,
    check: Check | None,
    setup: Callable[[str], object] | None,
    trusted: Sequence[str],
    timeout: float,
) -> _Spec:
    target = target_of(saga)
    found = target.load()
    on_crash = getattr(found, "on_crash", "resume")
    ordered = getattr(found, "max_concurrency", 1) == 1
    return _Spec(target, data, check, setup, tuple(trusted), timeout, on_crash, ordered)


def _failing_steps(found: Any, ok: RunPath, chosen: Sequence[str] | None) -> list[str]:
    if chosen is not None:
        return list(chosen)
    if isinstance(found, Saga):
        return [s.name for s in found.order() if s.kind is not StepKind.RETRIABLE]
    started = [p.partition(":")[2] for p in ok.points if p.startswith("after_start_commit:")]
    return list(dict.fromkeys(s for s in started if "#" not in s))


def _path_of(paths: Sequence[RunPath], case: Case) -> RunPath:
    return next(p for p in paths if p.failing == case.failing)


def _read(store: Store) -> _State:
    coord = store.coordinator
    sagas = coord.list(limit=2)
    if not sagas:
        return _State(None, ())
    return _State(sagas[0], tuple(coord.history(sagas[0].id)))


def _judge(
    spec: _Spec, case: Case, path: RunPath, crashed: SagaView | None, state: _State
) -> list[str]:
    """Saga's invariants, the status it must end in, and the caller's check."""
    if state.saga is None:
        if crashed is not None:
            return ["the saga disappeared"]
        return []  # killed before anything was recorded: nothing to recover, nothing to check
    problems = invariants.problems(state.saga, state.events, ordered=spec.ordered)
    expected = _expected(spec, case, path, crashed)
    if expected is not None and state.saga.status is not expected:
        problems.append(f"ended {state.saga.status.value}, expected {expected.value}")
    return problems + _user_check(spec.check, state.saga, case)


def _expected(
    spec: _Spec, case: Case, path: RunPath, crashed: SagaView | None
) -> SagaStatus | None:
    """The status the case must end in, where saga's contract fixes it (``None``: any).

    A path's own fault-free run (its probe) says how it ends without a crash: a step may
    fail on its own, because of the data, not only because the matrix made it fail.
    """
    baseline = None if path.status is None else SagaStatus(path.status)
    if crashed is None or case.point.startswith("after_final_commit"):
        return baseline
    # What unwinding ends in: compensated, unless this path's compensation fails for good.
    unwound = SagaStatus.FAILED if baseline is SagaStatus.FAILED else SagaStatus.COMPENSATED
    if crashed.status is not SagaStatus.RUNNING:  # already unwinding: it finishes that
        return unwound
    # A pivot that started may have acted: only forward now (unless it is the step that
    # fails, every time: then it never acts, and the saga unwinds).
    past_pivot = any(
        s.kind is not StepKind.COMPENSATABLE and s.name != case.failing for s in crashed.steps
    )
    declarative = spec.target.style == "declarative"
    if past_pivot:  # only forward now; a context-manager saga's code cannot be resumed
        return baseline if declarative else None
    if declarative and case.mode != "compensate" and spec.on_crash == "resume":
        return baseline  # resumed forward, it ends as the same run without a crash did
    return unwound


def _user_check(check: Check | None, view: SagaView, case: Case) -> list[str]:
    if check is None:
        return []
    try:
        if len(inspect.signature(check).parameters) >= 2:
            check(view, case)
        else:
            check(view)
    except AssertionError as failed:
        message = str(failed).strip().splitlines()  # the first line: pytest's detail follows
        return [f"check: {message[0]}" if message else "check failed"]
    except Exception as error:  # noqa: BLE001 (the check's own bug is reported in the row)
        return [f"check raised {type(error).__name__}: {error}"]
    return []


def _tail(log: Path, lines: int = 30) -> str:
    if not log.exists():
        return "(no output)"
    return (
        " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:]) or "(no output)"
    )
