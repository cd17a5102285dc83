"""A saga for the worker's clean stop (tests/cli/test_worker_drain.py): its first step
waits, in the worker, until the test lets it go; the files named in its input are how
the two processes tell each other where they are."""

from __future__ import annotations

import os
from pathlib import Path

import tenacity

from saga import Saga, StepContext
from tests.cli.steps import SimulatedCrash

slow = Saga("drain-worker")


def _until_exists(path: Path) -> None:
    tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda found: not found),
        wait=tenacity.wait_fixed(0.05),
        stop=tenacity.stop_after_delay(60),
    )(path.exists)


@slow.step()
def first(ctx: StepContext) -> str:
    if ctx.attempt == 1:
        raise SimulatedCrash("the first owner dies here")
    Path(ctx.data["inside"]).touch()
    _until_exists(Path(ctx.data["go"]))
    return "one"


@slow.step()
def second(ctx: StepContext) -> str:
    Path(ctx.data["second"]).write_text(str(os.getpid()))
    return "two"
