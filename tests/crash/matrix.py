"""The crash matrix: saga shapes, the fault points each reaches, and how each must end."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Literal

from saga import SagaStatus
from tests.crash.child import SIZES, Case

Recovery = Literal["recover", "reenter"]


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A case, the point where its process dies, and how it is then recovered."""

    case: Case
    recovery: Recovery = "recover"

    @property
    def point(self) -> str:
        return self.case.faults.partition(":")[0]

    @property
    def at(self) -> int | None:
        """The step number the fault point names, if any."""
        target = self.case.faults.partition(":")[2]
        return int(target[1:]) if target else None

    @property
    def id(self) -> str:
        c = self.case
        shape = "cm" if c.style == "context" else "decl"
        parts = [shape, f"n{c.steps}"]
        parts += ["pivot"] if c.pivot else []
        parts += [f"fail{c.fail}"] if c.fail else []
        parts += ["oc"] if c.on_crash == "compensate" else []
        parts += ["reenter"] if self.recovery == "reenter" else []
        return "-".join(parts) + "-" + c.faults


def fault_specs(case: Case) -> list[str]:
    """Every ``SAGA_FAULTS`` spec that ``case``'s first run reaches, in execution order."""
    last = case.fail if case.fail is not None else case.steps
    specs = []
    for k in range(1, last + 1):
        specs += [f"before_start_commit:s{k}", f"after_start_commit:s{k}"]
        if k != case.fail:
            specs.append(f"after_action:s{k}")
            if case.style == "context":
                specs.append(f"after_success_commit:s{k}")
    if case.fail is not None:
        specs.append("before_unwind")
        for k in range(case.fail, 0, -1):
            if case.kind_of(k) == "compensatable":
                specs += [f"before_undo:s{k}", f"after_undo:s{k}", f"after_undo_commit:s{k}"]
    return [*specs, "before_final_commit", "after_final_commit"]


def core_shapes() -> Iterator[tuple[Case, Recovery]]:
    """Shapes run at every reachable point and step on SQLite."""
    for n in SIZES:
        pivot = Case("declarative", n, pivot=True)
        yield Case("declarative", n), "recover"
        yield Case("declarative", n, fail=n), "recover"
        yield pivot, "recover"
        yield dataclasses.replace(pivot, fail=pivot.pivot_step), "recover"
        yield Case("context", n), "recover"
        yield Case("context", n, fail=n), "recover"


def variant_shapes() -> Iterator[tuple[Case, Recovery]]:
    """``on_crash="compensate"``, and the application running the saga again with the
    same key (``coord.run``, or re-entering the ``coord.saga`` block): diagonal only."""
    for n in SIZES:
        yield Case("declarative", n, on_crash="compensate"), "recover"
        yield Case("declarative", n, pivot=True, on_crash="compensate"), "recover"
        yield Case("declarative", n), "reenter"
        yield Case("declarative", n, fail=n), "reenter"
        yield Case("context", n), "reenter"
        yield Case("context", n, fail=n), "reenter"


def scenarios(shapes: Iterator[tuple[Case, Recovery]]) -> list[Scenario]:
    """Each shape at every fault point its first run reaches."""
    return [
        Scenario(dataclasses.replace(case, faults=spec), recovery)
        for case, recovery in shapes
        for spec in fault_specs(case)
    ]


def diagonal(everything: list[Scenario]) -> list[Scenario]:
    """One scenario per (shape without its size, fault point), size and step rotating."""

    def group(s: Scenario) -> tuple[object, ...]:
        c = s.case
        return (c.style, c.pivot, c.fail is not None, c.on_crash, s.recovery, s.point)

    chosen = []
    groups = itertools.groupby(sorted(everything, key=lambda s: repr(group(s))), key=group)
    for index, (_, members) in enumerate(groups):
        candidates = list(members)
        chosen.append(candidates[index % len(candidates)])
    return chosen


def expected_status(scenario: Scenario) -> SagaStatus | None:
    """How the saga must end (``None``: its process died before anything was recorded)."""
    case, point, at = scenario.case, scenario.point, scenario.at
    if point == "before_start_commit" and at == 1 and scenario.recovery == "recover":
        return None
    if case.fail is not None:
        return SagaStatus.COMPENSATED
    if point == "after_final_commit" or scenario.recovery == "reenter":
        return SagaStatus.COMPLETED
    if case.style == "context":  # recover() compensates what its own code did not finish
        return SagaStatus.COMPENSATED
    if case.on_crash == "resume":
        return SagaStatus.COMPLETED
    # on_crash="compensate": unwound, unless the pivot may have acted (then only forward).
    started = case.steps if at is None else at - (point == "before_start_commit")
    pivot = case.pivot_step
    past_pivot = pivot is not None and pivot <= started
    return SagaStatus.COMPLETED if past_pivot else SagaStatus.COMPENSATED
