"""Crash-test child processes: run a saga until a fault point kills it, or recover sagas.

Run from the repository root (the parent sets cwd and ``PYTHONPATH``)::

    python -m tests.crash.child run CASE_JSON      # SAGA_FAULTS names where to die
    python -m tests.crash.child recover URL [--go FILE] [--lease S] [--timeout S]

``run`` runs one saga (a :class:`Case`: declarative or context-manager, 1 to 5
steps, with or without a pivot, going forward or with a step that fails) on
a short lease; ``saga.faults`` SIGKILLs the process at the point
``SAGA_FAULTS`` names. ``recover`` calls ``coord.recover()`` until nothing
is running or compensating. The tests mostly call :func:`main` in processes
forked by saga.testing's fork server (:class:`tests.children.ForkServer`), the one
``crash_matrix`` uses: the same real process and real SIGKILL as ``run``,
without paying the ~0.5 s import of SQLAlchemy for each of several hundred
cases.

Every step appends its calls to the effect ledger (:mod:`tests.crash.ledger`),
whose path travels in the saga's input (declarative) or the step arguments
(context manager), so whichever process runs a step or its compensation
records it in the same place.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any, Literal

from saga import (
    Coordinator,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    current_step,
)
from tests import children
from tests.children import RECOVERY_LEASE_TTL, arg, recover_until_settled
from tests.crash import ledger
from tests.crash.invariants import UNDO_RETRY

LEASE_TTL = 0.1
"""The crashing child's lease (s): recovery can claim its sagas this long after it dies."""

MODULE = __spec__.name if __spec__ is not None else __name__
"""This module's importable name, also when it runs as ``__main__`` (``python -m``)."""

HANG_SECONDS = 60.0
SIZES = (1, 2, 3, 5)
Style = Literal["declarative", "context"]
OnCrash = Literal["resume", "compensate"]


class StepFailure(Exception):
    """A step's business failure: never retried, so the saga unwinds."""


def pivot_of(steps: int) -> int:
    """Where the pivot sits in a saga of ``steps`` steps: 1 of 1, 2 of 2, 2 of 3, 3 of 5."""
    return steps // 2 + 1


@dataclasses.dataclass(frozen=True)
class Case:
    """One saga to run: its shape, how it misbehaves, where its process dies."""

    style: Style
    steps: int
    pivot: bool = False
    fail: int | None = None  # this step raises StepFailure on every attempt
    on_crash: OnCrash = "resume"
    faults: str = ""  # SAGA_FAULTS for the process that runs it
    kill: int | None = None  # this step SIGKILLs its process on every attempt
    hang: int | None = None  # this step's first attempt blocks until its process is killed
    kill_undo: int | None = None  # this step's compensation SIGKILLs its process every time
    flaky: int | None = None  # this step's first attempt acts, then raises ConnectionError
    pause: float = 0.0  # every action and compensation sleeps this long first (random kills)
    url: str = ""
    ledger: str = ""
    key: str = "case"

    @property
    def saga_name(self) -> str:
        if self.style == "context":
            return f"crash-cm-{self.steps}"
        return declarative_name(self.steps, self.pivot, self.on_crash)

    @property
    def pivot_step(self) -> int | None:
        return pivot_of(self.steps) if self.pivot else None

    def kind_of(self, step: int) -> str:
        """``compensatable``, ``pivot`` or ``retriable``."""
        pivot = self.pivot_step
        if pivot is None or step < pivot:
            return "compensatable"
        return "pivot" if step == pivot else "retriable"

    def behaviour(self) -> dict[str, Any]:
        """What the steps read to know how to behave (saga input / step argument)."""
        fail = None if self.fail is None else f"s{self.fail}"
        return {
            "ledger": self.ledger,
            "fail": fail,
            # A failing compensatable step acts before it raises (a timeout after the
            # remote side committed); a pivot that raises never acted.
            "fail_effect": self.fail is not None and self.kind_of(self.fail) == "compensatable",
            "kill": None if self.kill is None else f"s{self.kill}",
            "hang": None if self.hang is None else f"s{self.hang}",
            "kill_undo": None if self.kill_undo is None else f"s{self.kill_undo}",
            "flaky": None if self.flaky is None else f"s{self.flaky}",
            "pause": self.pause,
        }

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Case:
        return cls(**json.loads(text))


# -- the steps ---------------------------------------------------------------------------------


def effect(how: dict[str, Any], saga_id: str, step: str, key: str, attempt: int, epoch: int) -> Any:
    """A step's action: record the call, apply the effect (idempotently), misbehave if told."""
    path = how["ledger"]
    time.sleep(how.get("pause", 0.0))
    if how.get("hang") == step and attempt == 1:
        ledger.attempted(path, saga_id, step, attempt, epoch)
        time.sleep(HANG_SECONDS)
    if how.get("fail") == step and not how.get("fail_effect"):
        ledger.attempted(path, saga_id, step, attempt, epoch)
        raise StepFailure(f"{step} failed before acting")
    ledger.do(path, saga_id, step, key, attempt, epoch)
    if how.get("fail") == step:
        raise StepFailure(f"{step} failed after acting")
    if how.get("flaky") == step and attempt == 1:  # the reply was lost: retried in-process
        raise ConnectionError(f"{step}: connection reset after acting")
    if how.get("kill") == step:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"step": step, "key": key}


def declared_action(ctx: StepContext) -> Any:
    return effect(ctx.data, ctx.saga_id, ctx.step, ctx.idempotency_key, ctx.attempt, ctx.epoch)


def reverse(how: dict[str, Any], saga_id: str, step: str, attempt: int, epoch: int) -> None:
    """A step's compensation: remove the effect if present, record the call."""
    time.sleep(how.get("pause", 0.0))
    ledger.undo(how["ledger"], saga_id, step, attempt, epoch)
    if how.get("kill_undo") == step:
        os.kill(os.getpid(), signal.SIGKILL)


def declared_undo(ctx: StepContext) -> None:
    reverse(ctx.data, ctx.saga_id, ctx.step, ctx.attempt, ctx.epoch)


def cm_action(how: dict[str, Any]) -> Any:
    """A context-manager step (``s.step(cm_action, how, compensate=cm_undo)``)."""
    ctx = current_step()
    return effect(how, ctx.saga_id, ctx.step, ctx.idempotency_key, ctx.attempt, ctx.epoch)


def cm_undo(result: Any, how: dict[str, Any]) -> None:
    ctx = current_step()
    reverse(how, ctx.saga_id, ctx.step, ctx.attempt, ctx.epoch)


# -- the sagas ----------------------------------------------------------------------------------


def declarative_name(steps: int, pivot: bool, on_crash: OnCrash) -> str:
    return f"crash-{steps}" + ("-pivot" if pivot else "") + ("-oc" if on_crash != "resume" else "")


def _declare(steps: int, pivot: bool, on_crash: OnCrash) -> Saga:
    shape = Case("declarative", steps, pivot=pivot, on_crash=on_crash)
    saga = Saga(declarative_name(steps, pivot, on_crash), on_crash=on_crash)
    for number in range(1, steps + 1):
        kind = shape.kind_of(number)
        step = saga.step(name=f"s{number}", pivot=kind == "pivot", retriable=kind == "retriable")(
            declared_action
        )
        if kind == "compensatable":
            step.compensation(retry=UNDO_RETRY)(declared_undo)
    return saga


SAGAS: dict[str, Saga] = {
    saga.name: saga
    for saga in (
        _declare(steps, pivot, on_crash)
        for steps in SIZES
        for pivot in (False, True)
        for on_crash in ("resume", "compensate")
    )
}


def run_case(coord: Coordinator, case: Case) -> SagaStatus | None:
    """Run ``case``'s saga in this process; its final status (``None``: nothing recorded)."""
    try:
        if case.style == "declarative":
            return coord.run(SAGAS[case.saga_name], data=case.behaviour(), key=case.key).status
        return _run_block(coord, case)
    except SagaFailed as failure:
        return failure.status


def _run_block(coord: Coordinator, case: Case) -> SagaStatus | None:
    how = case.behaviour()
    with coord.saga(case.saga_name, key=case.key) as s:
        for number in range(1, case.steps + 1):
            s.step(cm_action, how, compensate=cm_undo, step_name=f"s{number}")
    return s.status


# -- recovery and the command line ----------------------------------------------------------------


def recoverer(url: str, lease_ttl: float = RECOVERY_LEASE_TTL) -> Coordinator:
    """A coordinator that may compensate this module's context-manager sagas."""
    return children.recoverer(url, [MODULE], lease_ttl, compensation_retry=UNDO_RETRY)


def run_once(case: Case) -> SagaStatus | None:
    with Coordinator(case.url, lease_ttl=LEASE_TTL, compensation_retry=UNDO_RETRY) as coord:
        return run_case(coord, case)


def _recover(url: str, go: str | None, lease: float, timeout: float) -> None:
    with recoverer(url, lease) as coord:
        children.get_ready(coord, go, timeout)
        children.report_outcomes(coord.owner, recover_until_settled(coord, timeout))


def main(
    argv: list[str] | None = None, run: Callable[[Case], SagaStatus | None] = run_once
) -> None:
    """``run CASE_JSON`` (with ``run``: tests/aio's child runs the cases its own way) or
    ``recover URL [--go FILE] [--lease S] [--timeout S]``."""

    def run_command(case: str) -> None:
        status = run(Case.from_json(case))
        children.report(status=None if status is None else status.value)

    commands = children.CommandLine(f"python -m {MODULE}")
    commands.add("run", run_command, arg("case", help="a Case as JSON"))
    commands.add(
        "recover",
        _recover,
        arg("url"),
        arg("--go", help="print 'ready', then wait for this file to exist"),
        arg("--lease", type=float, default=RECOVERY_LEASE_TTL),
        arg("--timeout", type=float, default=60.0),
    )
    commands.main(argv)


if __name__ == "__main__":
    main()
