"""What the crash matrix's child processes do: run the saga once, or recover.

Each job is a JSON object handed to :func:`job` by the fork server
(:mod:`saga.testing.forkserver`) in a freshly forked process:

* ``run``: run the target once on a short lease (``SAGA_FAULTS`` kills it
  where the case says); with ``trace`` set, also write the fault points it
  reached, in order, and how it ended, to that file (the probe run that
  lays out the matrix);
  with ``answers`` set, the point loses the answer to the next commit instead
  (the ``lost_ack`` mode), and the file gets how many answers were lost;
* ``recover``: ``recover()`` (or ``recover(compensate=True)``) until nothing
  is running or compensating.

``fail`` names a step made to fail on every call (:func:`saga.testing.fail_step`),
in the crashing process and in the recovering one alike: the failing path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from saga._internal import faults
from saga._internal.aio import AsyncCoordinator
from saga._internal.coordinator import Coordinator
from saga._internal.definition import Saga
from saga._internal.errors import SagaFailed, SagaHandedBack
from saga._internal.status import SagaStatus
from saga.testing.targets import Target, fail_step

RUN_LEASE_TTL = 0.1
"""The crashing child's lease (s): its saga is claimable this long after it dies."""

RECOVERY_LEASE_TTL = 10.0
"""The recoverer's lease: long, so that a slow recovery never loses its saga."""

LEDGER_ENV = "SAGA_TEST_LEDGER"
_ACTIVE = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)
_owners: list[Coordinator] = []
"""The coordinators this process runs the saga with (a zombie stops their heartbeats)."""


def _freeze() -> None:
    """Become a zombie: stop renewing leases (cleanly, never inside a renewal, whose row
    lock would block every other process), then stop until continued (SIGCONT)."""
    for coord in _owners:
        coord.heartbeat.stop()
    faults.signal_here(signal.SIGSTOP)


def job(args: dict[str, Any]) -> None:
    """The fork server's entry point for the crash matrix (see the module docstring)."""
    if args.get("ledger"):
        os.environ[LEDGER_ENV] = args["ledger"]
    if args.get("freeze"):
        faults.disarm()
        faults.arm(os.environ.get("SAGA_FAULTS", ""), _freeze)
    if args.get("answers"):  # lost_ack: the first commit after the point loses its answer
        faults.disarm()
        faults.arm(os.environ.get("SAGA_FAULTS", ""), faults.lose_next_answer)
    target = Target(**args["target"])
    with _failing(target, args.get("fail")):
        if args["job"] == "run":
            _run_job(target, args)
        else:
            _recover_job(target, args)


def _failing(target: Target, step: str | None) -> contextlib.AbstractContextManager[Any]:
    if step is None:
        return contextlib.nullcontext()
    return fail_step(target.load(), step)


def _run_job(target: Target, args: dict[str, Any]) -> None:
    trace: list[str] = []
    if args.get("trace"):
        faults.trace(trace)
    status = run_target(target, args["url"], args.get("data"), args["key"])
    faults.trace(None)
    if args.get("trace"):
        ended = None if status is None else status.value
        Path(args["trace"]).write_text(json.dumps({"points": trace, "status": ended}))
    if args.get("answers"):
        Path(args["answers"]).write_text(json.dumps({"lost": faults.answers_lost}))


def run_target(target: Target, url: str, data: Any, key: str) -> SagaStatus | None:
    """Run the target once; its final status (``None``: nothing was recorded)."""
    if target.asynchronous:
        return asyncio.run(_run_async(target, url, data, key))
    found = target.load()
    with Coordinator(url, lease_ttl=RUN_LEASE_TTL, trusted_modules=[target.module]) as coord:
        _owners.append(coord)
        try:
            if isinstance(found, Saga):
                return coord.run(found, data=data, key=key).status
            found(coord, data, key=key)
        except (SagaFailed, SagaHandedBack) as failure:  # handed back: waits for a worker
            return failure.status
        return _status(coord.list(limit=1))


async def _run_async(target: Target, url: str, data: Any, key: str) -> SagaStatus | None:
    found = target.load()
    lease = RUN_LEASE_TTL
    async with AsyncCoordinator(url, lease_ttl=lease, trusted_modules=[target.module]) as coord:
        _owners.append(coord.sync)
        try:
            if isinstance(found, Saga):
                return (await coord.run(found, data=data, key=key)).status
            await found(coord, data, key=key)
        except (SagaFailed, SagaHandedBack) as failure:  # handed back: waits for a worker
            return failure.status
        return _status(await coord.list(limit=1))


def _status(sagas: list[Any]) -> SagaStatus | None:
    return sagas[0].status if sagas else None


def _recover_job(target: Target, args: dict[str, Any]) -> None:
    trusted = [target.module, *args.get("trusted", [])]
    found = target.load()
    with Coordinator(args["url"], lease_ttl=RECOVERY_LEASE_TTL, trusted_modules=trusted) as coord:
        if isinstance(found, Saga):
            coord.register(found)
        if target.asynchronous:
            asyncio.run(_recover_async(args, trusted, found))
        else:
            settle(lambda: coord.recover(compensate=args["compensate"]), coord, args["timeout"])


async def _recover_async(args: dict[str, Any], trusted: list[str], found: Any) -> None:
    lease = RECOVERY_LEASE_TTL
    async with AsyncCoordinator(args["url"], lease_ttl=lease, trusted_modules=trusted) as coord:
        if isinstance(found, Saga):
            coord.register(found)
        deadline = time.monotonic() + args["timeout"]
        while True:
            await coord.recover(compensate=args["compensate"])
            if not await coord.list(status=_ACTIVE, limit=1):
                return
            _check_deadline(deadline, args["timeout"])
            await asyncio.sleep(0.02)


def settle(recover: Any, coord: Coordinator, timeout: float) -> None:
    """Call ``recover()`` until no saga is running or compensating (the dead process's
    lease expires by the database clock meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        recover()
        if not coord.list(status=_ACTIVE, limit=1):
            return
        _check_deadline(deadline, timeout)
        time.sleep(0.02)  # polling for the lease to expire, a condition checked each time


def _check_deadline(deadline: float, timeout: float) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"sagas still unfinished after {timeout:g}s of recovery")
