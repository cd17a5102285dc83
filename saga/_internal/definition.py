"""Declarative sagas: ``Saga``, its steps, and their validation."""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import inspect
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, Literal, TypedDict, Unpack, overload

from saga._internal.codec import check_name
from saga._internal.errors import DefinitionError, PayloadError
from saga._internal.policy import (
    DEFAULT_COMPENSATION_RETRY,
    DEFAULT_RETRIABLE_RETRY,
    DEFAULT_STEP_RETRY,
    RetryPolicy,
    check_step_settings,
)
from saga._internal.status import StepKind
from saga._internal.typed import result_type_of

StepFn = Callable[..., Any]
OnCrash = Literal["resume", "compensate"]
OnExhausted = Literal["fail", "pause"]
"""What a step does when its retries run out (``on_exhausted``)."""

_catalog: dict[tuple[str, int], Saga] = {}
_Plan = tuple[dict[str, tuple[str, ...]], list["Step"], str, dict[str, "Step"]]


def defined_saga(name: str, version: int | None = None) -> Saga | None:
    """The most recently defined ``Saga`` with this name and version in this process
    (without ``version``: its newest version)."""
    if version is not None:
        return _catalog.get((name, version))
    versions = defined_versions(name)
    return versions[-1] if versions else None


def defined_sagas() -> list[Saga]:
    """Every version of every ``Saga`` defined in this process."""
    return list(_catalog.values())


def defined_versions(name: str) -> list[Saga]:
    """Every version of the saga named ``name`` defined in this process, oldest first."""
    return sorted((s for (n, _), s in _catalog.items() if n == name), key=lambda s: s.version)


def _defining_module() -> str | None:
    """The module of the code calling ``Saga(...)`` (two frames up: past ``__init__``)."""
    frame = inspect.currentframe()
    caller = None if frame is None or frame.f_back is None else frame.f_back.f_back
    name = None if caller is None else caller.f_globals.get("__name__")
    del frame, caller  # a frame held in a local would keep every local of its stack alive
    return name if isinstance(name, str) and name != "__main__" else None


class StepOptions(TypedDict, total=False):
    """The options of ``@saga.step(...)``, written once for both of its spellings."""

    name: str | None
    """The step's name; by default the function's."""
    retry: RetryPolicy | None
    """Its retry policy; by default ``DEFAULT_STEP_RETRY`` (``retriable``: until it succeeds)."""
    timeout: float | None
    """Seconds one attempt may take; by default no limit."""
    after: tuple[str, ...] | list[str] | None
    """The steps it runs after; by default the one declared before it (``()``: none)."""
    pivot: bool
    """The point of no return: no compensation, and once it succeeded only forward."""
    retriable: bool
    """After a pivot: retried until it succeeds, never compensated."""
    transactional: bool
    """``ctx.session`` is in the transaction that records the step's success."""
    result_type: Any
    """What the result is read back as; by default the return annotation's class."""
    idempotent: bool
    """Running it again acts once only (its participant dedupes by ``ctx.idempotency_key``):
    ``saga retry --from`` may run it again after it succeeded."""
    on_exhausted: OnExhausted | None
    """When its retries run out: ``"fail"`` (the step fails and the saga unwinds, as
    always) or ``"pause"`` (the saga is parked ``paused`` for an operator to resume);
    by default the saga's ``on_exhausted``."""


@dataclasses.dataclass(eq=False)
class Step:
    """One step of a declarative saga: an action and, optionally, its compensation."""

    name: str
    fn: StepFn
    retry: RetryPolicy
    timeout: float | None
    after: tuple[str, ...] | None
    kind: StepKind
    transactional: bool
    undo: StepFn | None = None
    undo_retry: RetryPolicy = DEFAULT_COMPENSATION_RETRY
    declared_result_type: Any = None
    declared_compensation_result_type: Any = None
    reconciler: StepFn | None = None
    on_exhausted: OnExhausted | None = None
    idempotent: bool = False

    @property
    def result_type(self) -> Any:
        """What the step's result is read back as (``result_type=``, else the return
        annotation of ``fn`` when it names a dataclass or a model; else plain JSON)."""
        return result_type_of(self.fn, self.declared_result_type)

    @property
    def compensation_result_type(self) -> Any:
        """What the compensation's return value is read back as, alike: its
        ``result_type=``, else the return annotation of the compensation."""
        return result_type_of(self.undo, self.declared_compensation_result_type)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @overload
    def compensation(self, fn: StepFn, /) -> StepFn: ...
    @overload
    def compensation(
        self, fn: None = None, /, *, retry: RetryPolicy | None = None, result_type: Any = None
    ) -> Callable[[StepFn], StepFn]: ...
    def compensation(
        self,
        fn: StepFn | None = None,
        /,
        *,
        retry: RetryPolicy | None = None,
        result_type: Any = None,
    ) -> StepFn | Callable[[StepFn], StepFn]:
        """Declare the function that undoes this step (``@step.compensation``);
        ``result_type`` types what it returns when read back (else its annotation)."""

        def attach(undo: StepFn) -> StepFn:
            _require_function(undo, f"step {self.name!r}", "@step.compensation")
            check_step_settings(f"step {self.name!r}, its compensation", retry)
            if self.undo is not None:
                raise DefinitionError(f"step {self.name!r} already has a compensation")
            self.undo = undo
            if retry is not None:
                self.undo_retry = retry
            self.declared_compensation_result_type = result_type
            return undo

        return attach(fn) if fn is not None else attach

    def reconcile(self, fn: StepFn, /) -> StepFn:
        """Declare how to learn whether an attempt of this step that never reported back
        happened (``@charge.reconcile``): called with the step's context (its
        ``idempotency_key``, ``attempt``, ``data``), sync or async, it returns
        ``Reconciled.done(result)``, ``Reconciled.not_done()`` or ``Reconciled.unknown()``
        (None, or an error, counts as unknown). Recovery asks before it re-runs or
        compensates such an attempt; see docs/recovery.md."""
        if self.reconciler is not None:
            raise DefinitionError(f"step {self.name!r} already has a reconcile function")
        self.reconciler = fn
        return fn


def _refuse_bad_name(saga: object, what: str, name: object) -> None:
    """A name no backend could store, or a blank one, refused as the saga's DefinitionError."""
    try:
        check_name(name, what)
    except PayloadError as error:
        raise DefinitionError(f"saga {saga!r}: {error}") from None


def _step_name(saga: str, given: str | None, action: StepFn) -> str:
    """A declared step's name: ``name=``, else its function's; refused when unfit."""
    name = action.__name__ if given is None else given
    _refuse_bad_name(saga, "step name", name)
    return name


class Saga:
    """A named, registered saga whose steps any process can resume.

    ``on_crash`` says what recovery does with a saga found ``running`` after
    its process died: ``"resume"`` (go forward, the default) or
    ``"compensate"``. ``max_concurrency`` bounds parallel steps;
    ``deadline`` bounds the whole saga's duration. ``version`` (a whole number from 1)
    tells versions of one saga apart: several can be registered at once, new runs take
    the newest, and an instance always continues with the version it started with
    (see docs/upgrading.md). ``on_exhausted`` is what its steps do when their retries
    run out, unless a step says otherwise: ``"fail"`` (the default: unwind) or
    ``"pause"`` (park the saga ``paused``; ``coord.resume`` runs the step again).
    """

    def __init__(
        self,
        name: str,
        *,
        version: int = 1,
        on_crash: OnCrash = "resume",
        max_concurrency: int = 1,
        deadline: timedelta | None = None,
        on_exhausted: OnExhausted = "fail",
    ) -> None:
        _refuse_bad_name(name, "saga name", name)
        if on_crash not in ("resume", "compensate"):
            raise DefinitionError(f"saga {name!r}: on_crash must be 'resume' or 'compensate'")
        _check_exhausted(name, on_exhausted)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise DefinitionError(f"saga {name!r}: version must be a whole number from 1")
        self.name = name
        self.version = version
        self.on_crash: OnCrash = on_crash
        self.max_concurrency = max_concurrency
        self.deadline = deadline
        self.on_exhausted: OnExhausted = on_exhausted
        self.steps: list[Step] = []
        self.module = _defining_module()
        """The module whose code defined it (None for a script): recorded when an instance
        starts, so that a process without the definition can say which ``--app`` to pass."""
        self._plan: _Plan | None = None
        _catalog[(name, version)] = self

    def __repr__(self) -> str:
        return f"Saga({self.name!r}, version={self.version}, steps={[s.name for s in self.steps]})"

    @overload
    def step(self, fn: StepFn, /) -> Step: ...
    @overload
    def step(
        self, fn: None = None, /, **options: Unpack[StepOptions]
    ) -> Callable[[StepFn], Step]: ...
    def step(
        self, fn: StepFn | None = None, /, **options: Unpack[StepOptions]
    ) -> Step | Callable[[StepFn], Step]:
        """Declare a step; it runs after the step declared before it unless ``after=``.
        Its result is read back (``ctx.results``, ``view.results``, ``ctx.result``) as
        ``result_type``, by default the function's return annotation when it names a
        dataclass or a pydantic model (see ``saga._internal.typed``). The options are
        :class:`StepOptions`'s."""
        _refuse_unknown(options)
        retriable = options.get("retriable", False)
        kind = self._kind(options.get("pivot", False), retriable)
        retry = options.get("retry") or (
            DEFAULT_RETRIABLE_RETRY if retriable else DEFAULT_STEP_RETRY
        )
        after = options.get("after")
        on_exhausted = options.get("on_exhausted")
        if on_exhausted is not None:
            _check_exhausted(self.name, on_exhausted)

        def declare(action: StepFn) -> Step:
            _require_function(action, f"saga {self.name!r}", "@saga.step", named=True)
            name = _step_name(self.name, options.get("name"), action)
            check_step_settings(f"saga {self.name!r}, step {name!r}", retry, options.get("timeout"))
            step = Step(
                name=name,
                fn=action,
                retry=retry,
                timeout=options.get("timeout"),
                after=None if after is None else tuple(after),
                kind=kind,
                transactional=options.get("transactional", False),
                declared_result_type=options.get("result_type"),
                on_exhausted=on_exhausted,
                idempotent=options.get("idempotent", False),
            )
            self.steps.append(step)
            self._plan = None
            return step

        return declare(fn) if fn is not None else declare

    def _kind(self, pivot: bool, retriable: bool) -> StepKind:
        """The kind a step's flags declare (at most one of them may be set)."""
        if pivot and retriable:
            raise DefinitionError(f"saga {self.name!r}: a step cannot be both pivot and retriable")
        if pivot:
            return StepKind.PIVOT
        return StepKind.RETRIABLE if retriable else StepKind.COMPENSATABLE

    def dependencies(self) -> dict[str, tuple[str, ...]]:
        """Each step's prerequisites, with the implicit 'the step before' made explicit."""
        return self._planned()[0]

    def _planned(self) -> _Plan:
        # Computed once per shape: the engine asks for it at every step.
        if self._plan is None:
            deps = self._dependencies()
            order = self._order(deps) if not _find_cycle(deps) else list(self.steps)
            names = {step.name: step for step in reversed(self.steps)}  # first one wins
            self._plan = (deps, order, self._fingerprint(deps), names)
        return self._plan

    def _dependencies(self) -> dict[str, tuple[str, ...]]:
        deps: dict[str, tuple[str, ...]] = {}
        previous: str | None = None
        for step in self.steps:
            if step.after is None:
                deps[step.name] = () if previous is None else (previous,)
            else:
                deps[step.name] = step.after
            previous = step.name
        return deps

    def validate(self) -> None:
        """Refuse duplicates, unknown dependencies, cycles, misused step kinds and names
        no backend can store (a NUL byte, too long)."""
        seen: set[str] = set()
        for what, name in [("saga name", self.name)] + [("step name", s.name) for s in self.steps]:
            _refuse_bad_name(self.name, what, name)
        for step in self.steps:
            if step.name in seen:
                raise DefinitionError(f"saga {self.name!r}: two steps are named {step.name!r}")
            seen.add(step.name)
        deps = self.dependencies()
        for step_name, prerequisites in deps.items():
            for dep in prerequisites:
                if dep not in seen:
                    raise DefinitionError(
                        f"saga {self.name!r}: step {step_name!r} runs after unknown step {dep!r}"
                    )
        cycle = _find_cycle(deps)
        if cycle:
            raise DefinitionError(f"saga {self.name!r}: steps form a cycle: {' -> '.join(cycle)}")
        for step in self.steps:
            if step.undo is not None and step.kind is not StepKind.COMPENSATABLE:
                raise DefinitionError(
                    f"saga {self.name!r}: step {step.name!r} is {step.kind.value} and so "
                    "cannot have a compensation"
                )
        if self.max_concurrency < 1:
            raise DefinitionError(f"saga {self.name!r}: max_concurrency must be at least 1")

    def order(self) -> list[Step]:
        """Steps in a valid execution order, declaration order among ready steps."""
        return self._planned()[1]

    def _order(self, deps: dict[str, tuple[str, ...]]) -> list[Step]:
        # Kahn's algorithm; among ready steps the one declared first goes first.
        position = {step.name: i for i, step in enumerate(self.steps)}
        waiting = {name: len(set(before)) for name, before in deps.items()}
        dependents: dict[str, list[str]] = {}
        for name, before in deps.items():
            for dep in set(before):
                dependents.setdefault(dep, []).append(name)
        ready = [position[name] for name, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        ordered: list[Step] = []
        while ready:
            step = self.steps[heapq.heappop(ready)]
            ordered.append(step)
            for follower in dependents.get(step.name, ()):
                waiting[follower] -= 1
                if waiting[follower] == 0:
                    heapq.heappush(ready, position[follower])
        if len(ordered) < len(self.steps):  # unknown dependency: validate() reports it
            return list(self.steps)
        return ordered

    @property
    def fingerprint(self) -> str:
        """A digest of the saga's shape: step names, order, kinds and dependencies. An
        instance is refused by a definition whose fingerprint is not the one it started
        with."""
        return self._planned()[2]

    def _fingerprint(self, deps: dict[str, tuple[str, ...]]) -> str:
        shape = [[s.name, s.kind.value, list(deps[s.name])] for s in self.steps]
        return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:16]

    def by_name(self, step_name: str) -> Step | None:
        return self._planned()[3].get(step_name)

    def pauses_when_exhausted(self, step_name: str) -> bool:
        """Whether step ``step_name``, its retries run out, parks the saga ``paused``."""
        step = self.by_name(step_name)
        chosen = step.on_exhausted if step is not None else None
        return (chosen or self.on_exhausted) == "pause"


def _check_exhausted(name: str, on_exhausted: object) -> None:
    if on_exhausted not in ("fail", "pause"):
        raise DefinitionError(f"saga {name!r}: on_exhausted must be 'fail' or 'pause'")


def _find_cycle(deps: dict[str, tuple[str, ...]]) -> list[str]:
    """A cycle as a path of step names (first name repeated at the end), or [].

    Iterative depth-first search, so a saga of 10,000 chained steps does not
    exhaust Python's recursion limit.
    """
    finished: set[str] = set()
    for root in deps:
        if root in finished:
            continue
        path: list[str] = [root]
        on_path = {root}
        pending: list[Iterator[str]] = [iter(deps.get(root, ()))]
        while pending:
            dep = next(pending[-1], None)
            if dep is None:  # every prerequisite of path[-1] explored
                node = path.pop()
                on_path.discard(node)
                finished.add(node)
                pending.pop()
                continue
            if dep in on_path:
                return [*path[path.index(dep) :], dep]
            if dep not in finished:
                path.append(dep)
                on_path.add(dep)
                pending.append(iter(deps.get(dep, ())))
    return []


def _refuse_unknown(options: StepOptions) -> None:
    unknown = sorted(options.keys() - StepOptions.__optional_keys__)
    if unknown:  # what Python says of a keyword a signature does not name
        raise TypeError(f"step() got an unexpected keyword argument {unknown[0]!r}")


def _require_function(given: object, whose: str, decorator: str, named: bool = False) -> None:
    """A decorator given anything but a function says so in one line: a name passed
    where the function goes (``@saga.step("reserve")``) is the likely slip."""
    if callable(given):
        return
    naming = named and isinstance(given, str)
    hint = f"; to name it, write {decorator}(name={given!r})" if naming else ""
    raise DefinitionError(f"{whose}: {decorator} takes a function, not {given!r}{hint}")
