"""``saga recover``: claim stuck sagas and finish them, forward or compensating.

A plan is made for every saga first (so ``--dry-run`` only reports it), then
each is carried out through the coordinator's own recovery.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Any

from saga._internal.coordinator import Coordinator
from saga._internal.engine import Route, recovery_route
from saga._internal.errors import ConfigurationError, OperationRefusedError, UnsafeReferenceError
from saga._internal.recovery import LOST
from saga._internal.status import SagaStatus, StepStatus
from saga._internal.views import SagaView
from saga.admin.facts import human_duration, json_value, lease_left
from saga.admin.inputs import SagaRef, definition_of, get_saga, no_definition, saga_id_of
from saga.admin.waiting import waiting


class Plan(enum.StrEnum):
    """What recovery does (or would do) with one saga."""

    RESUME = "resume"
    COMPENSATE = "compensate"
    CONTINUE = "continue-compensating"
    SKIP = "skip"


HANDED_BACK_REASON = (
    "handed back: its compensation failed again and waits for its next attempt "
    "(`saga show` says when); a worker retries it then"
)


class Result(enum.StrEnum):
    """How recovery of one saga ended."""

    RESUMED = "resumed"
    COMPENSATED = "compensated"
    FAILED = "failed"
    SKIPPED = "skipped"
    PLANNED = "planned"  # --dry-run: nothing was done
    LOST = "lost"  # another process claimed it mid-recovery, and finishes it


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryItem:
    """One saga in a recovery run: the plan, and (unless dry) how it ended."""

    saga_id: str
    name: str
    plan: Plan
    result: Result
    status: SagaStatus | None = None
    reason: str | None = None
    waiting: bool = False
    """Skipped because its compensation failed again and waits for its next attempt,
    which a worker makes: normal during a participant's outage, not a failure."""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.saga_id,
            "name": self.name,
            "plan": self.plan.value,
            "result": self.result.value,
            "status": json_value(self.status),
            "reason": self.reason,
            "waiting": self.waiting,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class RecoverySummary:
    dry_run: bool
    items: tuple[RecoveryItem, ...]

    def count(self, result: Result) -> int:
        return sum(1 for item in self.items if item.result is result)

    @property
    def recovered(self) -> int:
        """How many sagas this run finished (resumed or compensated): not the ones it
        skipped, failed on, or lost to another process; none under ``dry_run``."""
        return self.count(Result.RESUMED) + self.count(Result.COMPENSATED)

    @property
    def ok(self) -> bool:
        """Every saga listed was recovered (under ``dry_run``: none would be skipped).

        A saga skipped (not stuck, no definition, taken meanwhile) is not recovered,
        any more than one that failed; an empty run, with nothing stuck, is ok, and so
        is one whose compensation waits for its next attempt (``waiting``): a worker
        goes on with it, nobody has to act.
        """
        skipped = sum(1 for i in self.items if i.result is Result.SKIPPED and not i.waiting)
        return self.count(Result.FAILED) == 0 and skipped == 0

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "sagas": [item.as_json() for item in self.items],
            "summary": {
                result.value: self.count(result)
                for result in Result
                # rare (this process stalled past a lease): listed only when it happened
                if result is not Result.LOST or self.count(result)
            },
            "ok": self.ok,
            # added beside the counts, which keep their shape: finished of listed
            "recovered": self.recovered,
            "total": len(self.items),
        }


LOST_REASON = (
    f"{LOST}: this one stalled past its lease and that process claimed the saga; "
    "it finishes the saga, and nothing more was written here"
)

Progress = Callable[[RecoveryItem, int, int], None]
"""Called after each saga with (item, done, total)."""


def recover(
    coord: Coordinator,
    saga_ids: Sequence[SagaRef] = (),
    *,
    compensate: bool = False,
    dry_run: bool = False,
    limit: int | None = None,
    progress: Progress | None = None,
) -> RecoverySummary:
    """Claim and finish stuck sagas: the ones given, or every stuck one (oldest first).

    Each saga is claimed through its expired lease, so a live process's saga
    is skipped, and a saga another recoverer takes meanwhile is skipped too.
    With ``dry_run`` it only says what it would do.
    """
    if limit is not None and limit < 1:
        raise ConfigurationError(f"--limit must be at least 1, not {limit}")
    ids = list(dict.fromkeys(saga_id_of(coord, i) for i in saga_ids)) or stuck_ids(coord, limit)
    now = coord.store.now()
    plans = [_plan(coord, get_saga(coord, saga_id), compensate, now) for saga_id in ids[:limit]]
    items: list[RecoveryItem] = []
    for item in plans:
        items.append(item if dry_run or item.plan is Plan.SKIP else _carry_out(coord, item))
        if progress is not None:
            progress(items[-1], len(items), len(plans))
    return RecoverySummary(dry_run, tuple(items))


def stuck_ids(coord: Coordinator, limit: int | None = None, page: int = 200) -> list[str]:
    """Ids of every stuck saga (or the ``limit`` oldest), oldest first."""
    ids: list[str] = []
    before: str | None = None
    while True:
        views = coord.list(None, None, page, stuck=True, before=before)
        ids.extend(view.id for view in views)
        if len(views) < page:
            break
        before = views[-1].id
    ids.reverse()
    return ids if limit is None else ids[:limit]


def _plan(coord: Coordinator, view: SagaView, compensate: bool, now: float) -> RecoveryItem:
    def skip(reason: str) -> RecoveryItem:
        return RecoveryItem(view.id, view.name, Plan.SKIP, Result.SKIPPED, view.status, reason)

    if view.status is SagaStatus.FAILED:
        return skip("failed: needs `saga retry-compensation` or `saga mark-compensated`")
    if view.status.is_terminal:
        return skip(f"already {view.status.value}")
    left = lease_left(view, now)
    if view.owner is not None and left is not None and left > 0:
        return skip(f"not stuck: {view.owner} holds it (lease live {human_duration(left)} more)")
    plan, problem = _decide(coord, view, compensate)
    if problem is not None:
        return skip(problem)
    return RecoveryItem(view.id, view.name, plan, Result.PLANNED, view.status)


_PLANS: dict[Route, Plan] = {
    "forward": Plan.RESUME,
    "turn": Plan.COMPENSATE,
    "unwind": Plan.CONTINUE,
}


def _decide(coord: Coordinator, view: SagaView, compensate: bool) -> tuple[Plan, str | None]:
    """The coordinator's recovery rule (the same function, not a copy of it: a dry run
    predicts what the real run does); and what would stop it, if anything."""
    definition = definition_of(view)
    if view.kind == "declarative" and definition is None:
        return Plan.SKIP, no_definition(coord, view)
    plan = _PLANS[recovery_route(view, definition, compensate)]
    if plan is not Plan.RESUME and definition is None:
        return plan, _untrusted(coord, view)
    return plan, None


def _untrusted(coord: Coordinator, view: SagaView) -> str | None:
    """Why a context-manager saga's compensations could not be run here, if they could not."""
    for step in view.steps:
        if step.compensation is None or step.status is StepStatus.COMPENSATED:
            continue
        try:
            coord.resolver.resolve(step.compensation)
        except UnsafeReferenceError:
            module = step.compensation.partition(":")[0]
            return f"compensation {step.compensation} is not trusted here; pass --app {module}"
    return None


def _carry_out(coord: Coordinator, item: RecoveryItem) -> RecoveryItem:
    try:
        outcome = coord.recover_saga(item.saga_id, compensate=item.plan is Plan.COMPENSATE)
    except OperationRefusedError as busy:  # held by another, or finished, since it was read
        reason = f"taken or finished meanwhile: {busy}"
        return dataclasses.replace(item, result=Result.SKIPPED, reason=reason)
    if outcome.lost:
        return dataclasses.replace(item, result=Result.LOST, status=None, reason=LOST_REASON)
    if outcome.error is not None:
        return dataclasses.replace(item, result=Result.FAILED, reason=outcome.error)
    if outcome.handed_back:  # not failed: its compensation's next attempt is due later
        found = waiting(coord, item.saga_id) if outcome.waiting else None
        reason = HANDED_BACK_REASON if found is None else f"waiting: {found.text}"
        return dataclasses.replace(
            item,
            result=Result.SKIPPED,
            status=outcome.status,
            reason=reason,
            waiting=outcome.waiting,
        )
    status = outcome.status
    if status is SagaStatus.COMPLETED:
        return dataclasses.replace(item, result=Result.RESUMED, status=status)
    if status in (SagaStatus.COMPENSATED, SagaStatus.CANCELLED):
        return dataclasses.replace(item, result=Result.COMPENSATED, status=status)
    reason = "a compensation failed for good; see `saga show` and `saga history`"
    return dataclasses.replace(item, result=Result.FAILED, status=status, reason=reason)
