"""``@step.reconcile``: before recovery re-runs or compensates an attempt whose process
died inside the action, it asks the participant whether that attempt happened."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    Reconciled,
    RetryPolicy,
    Saga,
    SagaStatus,
    StepContext,
    StepStatus,
)
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import assert_history_replays, expire_lease, kinds

ONCE = RetryPolicy(max_attempts=1)


class Provider:
    """A payment provider: charges are kept by idempotency key; ``die`` makes the next
    charge kill its process, after (``acted``) or before it reached the provider."""

    def __init__(self, answer: str = "lookup") -> None:
        self.charges: dict[str, int] = {}
        self.calls: list[str] = []
        self.die: str | None = None
        self.answer = answer

    def charge(self, ctx: StepContext) -> dict[str, int]:
        self.calls.append(f"charge#{ctx.attempt}")
        if self.die == "before":
            self.die = None
            raise Crash("died before reaching the provider")
        self.charges[ctx.idempotency_key] = 42
        if self.die == "acted":
            self.die = None
            raise Crash("died after the provider charged")
        return {"charged": 42}

    def reconcile(self, ctx: StepContext) -> Reconciled | None:
        self.calls.append(f"reconcile#{ctx.attempt}")
        if self.answer == "unknown":
            return Reconciled.unknown()
        if self.answer == "raise":
            raise ConnectionError("provider lookup down")
        if self.answer == "none":
            return None
        if ctx.idempotency_key in self.charges:
            return Reconciled.done({"charged": self.charges[ctx.idempotency_key]})
        return Reconciled.not_done()

    def refund(self, ctx: StepContext) -> None:
        self.calls.append(f"refund:{ctx.result}")


def _order(provider: Provider, name: str, **options: Any) -> Saga:
    """reserve -> charge (reconcilable) -> ship."""
    saga = Saga(name, on_crash=options.pop("on_crash", "resume"))
    saga.step(name="reserve")(lambda ctx: "r").compensation()(
        lambda ctx: provider.calls.append("release")
    )
    charge = saga.step(name="charge", **options)(provider.charge)
    if not options.get("pivot"):
        charge.compensation()(provider.refund)
    charge.reconcile(provider.reconcile)
    saga.step(name="ship")(lambda ctx: provider.calls.append("ship"))
    return saga


def _crashed(make_coord: MakeCoordinator, saga: Saga) -> tuple[Coordinator, str]:
    dead = make_coord(lease_ttl=600)
    with pytest.raises(Crash):
        dead.run(saga)
    saga_id = dead.list(limit=1)[0].id
    recoverer = make_coord()
    expire_lease(recoverer, saga_id)
    return recoverer, saga_id


def _reconciled_events(coord: Coordinator, saga_id: str) -> list[dict[str, Any]]:
    return [
        {"kind": e.kind, **(e.detail or {})}
        for e in coord.history(saga_id)
        if e.kind == "step_reconciled" or (e.detail or {}).get("reconciled")
    ]


def test_an_attempt_that_happened_is_not_run_again(make_coord: MakeCoordinator) -> None:
    provider = Provider()
    provider.die = "acted"
    coord, saga_id = _crashed(make_coord, _order(provider, "reconcile-done"))

    assert coord.recover().ok

    view = coord.get(saga_id)
    assert view.status is SagaStatus.COMPLETED
    assert provider.calls == ["charge#1", "reconcile#1", "ship"]  # charged once
    assert view.step("charge").result == {"charged": 42}
    assert view.step("charge").attempt == 1
    assert _reconciled_events(coord, saga_id) == [{"kind": "step_succeeded", "reconciled": "done"}]
    assert_history_replays(coord, saga_id)


def test_an_attempt_that_did_not_happen_runs_again(make_coord: MakeCoordinator) -> None:
    provider = Provider()
    provider.die = "before"
    coord, saga_id = _crashed(make_coord, _order(provider, "reconcile-not-done"))

    assert coord.recover().ok

    assert coord.get(saga_id).status is SagaStatus.COMPLETED
    assert provider.calls == ["charge#1", "reconcile#1", "charge#2", "ship"]
    assert _reconciled_events(coord, saga_id) == [
        {"kind": "step_reconciled", "outcome": "not_done"}
    ]
    assert_history_replays(coord, saga_id)


@pytest.mark.parametrize("answer", ["unknown", "raise", "none"])
def test_no_answer_keeps_what_recovery_did_before(make_coord: MakeCoordinator, answer: str) -> None:
    provider = Provider(answer)
    provider.die = "acted"
    coord, saga_id = _crashed(make_coord, _order(provider, f"reconcile-{answer}"))

    assert coord.recover().ok

    assert coord.get(saga_id).status is SagaStatus.COMPLETED
    assert provider.calls == ["charge#1", "reconcile#1", "charge#2", "ship"]  # run again
    assert _reconciled_events(coord, saga_id) == [{"kind": "step_reconciled", "outcome": "unknown"}]


def test_a_pivot_in_doubt_that_did_not_happen_is_unwound_without_a_person(
    make_coord: MakeCoordinator,
) -> None:
    provider = Provider()
    provider.die = "before"
    coord, saga_id = _crashed(
        make_coord, _order(provider, "reconcile-pivot", pivot=True, retry=ONCE)
    )

    coord.recover()

    view = coord.get(saga_id)
    # Without an answer the pivot would be given up in doubt, the saga failed for a person.
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("charge").status is StepStatus.FAILED
    assert "reconciled: it did not happen" in (view.step("charge").error or "")
    assert provider.calls == ["charge#1", "reconcile#1", "release"]


def test_a_pivot_in_doubt_that_happened_goes_forward(make_coord: MakeCoordinator) -> None:
    provider = Provider()
    provider.die = "acted"
    saga = _order(provider, "reconcile-pivot-done", pivot=True, retry=ONCE)
    coord, saga_id = _crashed(make_coord, saga)

    assert coord.recover().ok

    assert coord.get(saga_id).status is SagaStatus.COMPLETED
    assert provider.calls == ["charge#1", "reconcile#1", "ship"]


@pytest.mark.parametrize(("die", "undone"), [("acted", "refund:{'charged': 42}"), ("before", None)])
def test_unwinding_asks_before_compensating(
    make_coord: MakeCoordinator, die: str, undone: str | None
) -> None:
    provider = Provider()
    provider.die = die
    saga = _order(provider, f"reconcile-unwind-{die}", on_crash="compensate")
    coord, saga_id = _crashed(make_coord, saga)

    assert coord.recover().ok

    view = coord.get(saga_id)
    assert view.status is SagaStatus.COMPENSATED
    expected = ["charge#1", "reconcile#1", *([undone] if undone else []), "release"]
    assert provider.calls == expected
    if undone is None:  # it did not happen: nothing to compensate
        assert view.step("charge").status is StepStatus.SKIPPED
    assert "step_skipped" in kinds(coord, saga_id) or undone is not None
    assert_history_replays(coord, saga_id)


def test_an_async_reconcile_function_is_awaited(db_url: str) -> None:
    provider = Provider()
    saga = Saga("reconcile-async")
    charge = saga.step(name="charge")(provider.charge)

    @charge.reconcile
    async def lookup(ctx: StepContext) -> Reconciled:
        await asyncio.sleep(0)
        return provider.reconcile(ctx) or Reconciled.unknown()

    async def scenario() -> SagaStatus:
        async with AsyncCoordinator(db_url, lease_ttl=600) as dead:
            provider.die = "acted"
            with pytest.raises(Crash):
                await dead.run(saga)
            saga_id = (await dead.list(limit=1))[0].id
        with Coordinator(db_url) as sync:
            expire_lease(sync, saga_id)
        async with AsyncCoordinator(db_url) as coord:
            await coord.recover()
            return (await coord.get(saga_id)).status

    assert asyncio.run(scenario()) is SagaStatus.COMPLETED
    assert provider.calls == ["charge#1", "reconcile#1"]
