"""Release A of the ``rolling`` saga, for two workers of different releases side by side
(tests/cli/test_worker_unrunnable.py): version 1, one step."""

from __future__ import annotations

from saga import Saga, StepContext
from tests.cli.steps import SimulatedCrash

rolling = Saga("rolling", version=1)


@rolling.step()
def book(ctx: StepContext) -> str:
    if ctx.epoch == 1:  # its first process dies here; a worker finishes it
        raise SimulatedCrash("book")
    return "A"


def act(what: str) -> str:
    return what


def undo(result: str | None, what: str) -> None:
    """A context-manager saga's compensation, trusted only where this module is."""
