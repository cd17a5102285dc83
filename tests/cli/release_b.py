"""Release B of the ``rolling`` saga (tests/cli/test_worker_unrunnable.py): version 2,
a step more than release A's version 1."""

from __future__ import annotations

from saga import Saga, StepContext
from tests.cli.steps import SimulatedCrash

rolling = Saga("rolling", version=2)


@rolling.step()
def book(ctx: StepContext) -> str:
    if ctx.epoch == 1:  # its first process dies here; a worker finishes it
        raise SimulatedCrash("book")
    return "B"


@rolling.step()
def confirm(ctx: StepContext) -> str:
    return "confirmed"


def act(what: str) -> str:
    return what


def undo(result: str | None, what: str) -> None:
    """A context-manager saga's compensation, trusted only where this module is."""
