"""Crash-test children for the async driver and for parallel steps.

Everything comes from tests/crash (its ``Case``, its ledger-recording steps
and sagas, its command line) and tests/children.py (the fork server); only
how a case runs differs, chosen by the case's idempotency key:

* ``"async"``: the case's saga, run by ``AsyncCoordinator``
  (``await coord.run(...)``, or ``async with coord.saga(...)`` and ``await s.step``);
* ``"fan"`` / ``"fan-async"``: the fan-out saga below, by ``Coordinator`` /
  ``AsyncCoordinator``: ``s1``, then ``s2``, ``s3`` and ``s4`` at once, then ``s5``;
* anything else: as tests/crash runs it.

    python -m tests.aio.crash_child run CASE_JSON  # or main(argv) in a forked child
"""

from __future__ import annotations

import asyncio

from saga import AsyncCoordinator, Coordinator, Saga, SagaFailed, SagaStatus
from tests.crash import child
from tests.crash.child import Case, OnCrash
from tests.crash.invariants import UNDO_RETRY


def _fan_out(on_crash: OnCrash) -> Saga:
    saga = Saga(fan_name(on_crash), on_crash=on_crash, max_concurrency=3)
    for number, after in enumerate([(), ("s1",), ("s1",), ("s1",), ("s2", "s3", "s4")], 1):
        step = saga.step(name=f"s{number}", after=after)(child.declared_action)
        step.compensation(retry=UNDO_RETRY)(child.declared_undo)
    return saga


def fan_name(on_crash: OnCrash) -> str:
    return "crash-fan" + ("-oc" if on_crash == "compensate" else "")


FAN_STEPS = {"s1": (), "s2": ("s1",), "s3": ("s1",), "s4": ("s1",), "s5": ("s2", "s3", "s4")}
"""Each fan-out step and the steps it runs after."""

FAN = {on_crash: _fan_out(on_crash) for on_crash in ("resume", "compensate")}


def run_once(case: Case) -> SagaStatus | None:
    """Run ``case`` in this process, with the driver and shape its key names."""
    if case.key.endswith("async"):
        return asyncio.run(_run_async(case))
    if case.key == "fan":
        with Coordinator(
            case.url, lease_ttl=child.LEASE_TTL, compensation_retry=UNDO_RETRY
        ) as coord:
            try:
                return coord.run(FAN[case.on_crash], data=case.behaviour(), key=case.key).status
            except SagaFailed as failure:
                return failure.status
    return child.run_once(case)


async def _run_async(case: Case) -> SagaStatus | None:
    async with AsyncCoordinator(
        case.url, lease_ttl=child.LEASE_TTL, compensation_retry=UNDO_RETRY
    ) as coord:
        try:
            if case.key.startswith("fan"):
                saga = FAN[case.on_crash]
            elif case.style == "context":
                return await _run_block(coord, case)
            else:
                saga = child.SAGAS[case.saga_name]
            return (await coord.run(saga, data=case.behaviour(), key=case.key)).status
        except SagaFailed as failure:
            return failure.status


async def _run_block(coord: AsyncCoordinator, case: Case) -> SagaStatus | None:
    how = case.behaviour()
    async with coord.saga(case.saga_name, key=case.key) as s:
        for number in range(1, case.steps + 1):
            await s.step(child.cm_action, how, compensate=child.cm_undo, step_name=f"s{number}")
    return s.status


def main(argv: list[str] | None = None) -> None:
    """tests/crash's command line, its cases run by :func:`run_once`."""
    child.main(argv, run=run_once)


if __name__ == "__main__":
    main()
