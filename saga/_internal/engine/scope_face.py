"""What ``s`` shows in both context-manager forms; the shells only add a driver.

``SagaScope`` (threads) and ``AsyncSagaScope`` (asyncio) run the flows this face
holds (:class:`~saga._internal.engine.scope_flows.ScopeFlows`): entering, each call, leaving.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from saga._internal.engine.core import Engine
from saga._internal.engine.scope import StepCall, step_call
from saga._internal.signature import taking
from saga._internal.status import SagaStatus

D = TypeVar("D")  # the driver a shell runs the flows with: threads, or asyncio tasks


class ScopeHost(Protocol[D]):
    """What a scope needs of its coordinator: the engine, and the driver of its shell."""

    engine: Engine
    driver: D


class ScopeFace(Generic[D]):
    """What ``s`` shows in both forms (``SagaScope``, ``AsyncSagaScope``): the saga's id,
    name, key, deadline, status and results, and :meth:`call` for ``s.parallel``. The
    state behind it is ``_core``, which only the scope and its flows touch; the shells
    run ``_flows`` (entering, each call, leaving) with their ``driver``."""

    def __init__(
        self, coordinator: ScopeHost[D], name: str, key: str | None, deadline: float | None = None
    ) -> None:
        self._engine = coordinator.engine
        self.driver = coordinator.driver
        self._flows = self._engine.scope(name, key, deadline)
        self._core = self._flows.core

    @property
    def id(self) -> str:
        return self._core.id

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def key(self) -> str | None:
        return self._core.key

    @property
    def deadline(self) -> float | None:
        return self._core.deadline

    @property
    def status(self) -> SagaStatus | None:
        """The saga's status as last recorded (None until its first step starts)."""
        return self._core.status

    @property
    def results(self) -> dict[str, Any]:
        """Results of the steps done so far, by step name."""
        return self._core.results

    @taking(step_call)
    def call(self, described: StepCall) -> StepCall:
        """A step for :meth:`parallel`, with the arguments ``step`` takes; runs nothing."""
        return described
