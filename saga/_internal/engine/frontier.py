"""Which steps of a parallel saga are ready, kept up to date as steps succeed.

:func:`saga._internal.engine.decisions.ready` decides from scratch, walking every step of the
saga: the right thing for a few steps, but a fan-out asks after every batch
of completions, so a saga of ten thousand steps would pay for ten thousand
steps thousands of times. A :class:`Frontier` gives the same answers (the
same steps, in the same order, the same ``Complete`` and ``GiveUp``) at a
cost per step that succeeds and per ready step.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from saga._internal.definition import Saga, Step
from saga._internal.engine.decisions import Complete, GiveUp, RunStep, attempts
from saga._internal.ports import SagaRecord
from saga._internal.status import StepStatus


class Frontier:
    """The steps whose prerequisites all succeeded and that have not succeeded yet."""

    def __init__(
        self, saga: Saga, record: SagaRecord, budgets: Mapping[str, int] | None = None
    ) -> None:
        self._budgets = budgets or {}  # fresh budgets an operator's retry gave (decisions)
        self._order: list[Step] = saga.order()
        self._position = {step.name: i for i, step in enumerate(self._order)}
        self._done = {s.name for s in record.steps if s.status is StepStatus.SUCCEEDED}
        self._dependents: dict[str, list[str]] = {}
        self._waiting: dict[str, int] = {}
        for name, before in saga.dependencies().items():
            prerequisites = set(before)
            for dep in prerequisites:
                self._dependents.setdefault(dep, []).append(name)
            self._waiting[name] = len(prerequisites - self._done)
        self._ready = {
            self._position[name]
            for name, count in self._waiting.items()
            if count == 0 and name not in self._done
        }
        self._total = len(saga.steps)

    @property
    def complete(self) -> bool:
        """Whether every step succeeded."""
        return len(self._done) == self._total

    def succeeded(self, name: str) -> None:
        """Step ``name`` succeeded: it leaves the frontier, and what waited on it may enter."""
        if name in self._done:
            return
        self._done.add(name)
        self._ready.discard(self._position[name])
        for dependent in self._dependents.get(name, ()):
            self._waiting[dependent] -= 1
            if self._waiting[dependent] == 0 and dependent not in self._done:
                self._ready.add(self._position[dependent])

    def ready(
        self, record: SagaRecord, running: Collection[str], limit: int | None = None
    ) -> list[RunStep] | Complete | GiveUp:
        """What :func:`~.decisions.ready` would answer for ``record`` (whose succeeded steps
        are the ones reported to :meth:`succeeded`)."""
        if self.complete:
            return Complete()
        steps = (self._order[position] for position in sorted(self._ready))
        waiting = (step for step in steps if step.name not in running)
        return attempts(waiting, record, limit, self._budgets)
