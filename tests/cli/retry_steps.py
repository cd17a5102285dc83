"""A saga whose steps classify errors every way ``RetryPolicy.retry_on`` can, importable
as ``tests.cli.retry_steps`` (``--app``). ``crash_at`` stops the process's work inside
that step the way a crash would, leaving the steps after it pending."""

from __future__ import annotations

import tenacity

from saga import RetryPolicy, Saga, StepContext
from tests.cli.steps import SimulatedCrash

RETRY = Saga("cli-retry")


def worth_retrying(error: BaseException) -> bool:
    return "try again" in str(error)


def _steer(ctx: StepContext) -> str:
    if ctx.data.get("crash_at") == ctx.step:
        raise SimulatedCrash(ctx.step)
    return ctx.step


@RETRY.step()
def plain(ctx: StepContext) -> str:
    return _steer(ctx)


@RETRY.step(retry=RetryPolicy(retry_on=(ConnectionError, TimeoutError)))
def typed(ctx: StepContext) -> str:
    return _steer(ctx)


@RETRY.step(retry=RetryPolicy(retry_on=worth_retrying))
def judged(ctx: StepContext) -> str:
    return _steer(ctx)


@RETRY.step(retry=RetryPolicy(retry_on=tenacity.retry_if_exception_type(ConnectionError)))
def tenacious(ctx: StepContext) -> str:
    return _steer(ctx)


@RETRY.step(pivot=True)
def ship(ctx: StepContext) -> str:
    return _steer(ctx)


@RETRY.step(retriable=True)
def notify(ctx: StepContext) -> str:
    return _steer(ctx)


@RETRY.step()
def archive(ctx: StepContext) -> str:
    return _steer(ctx)
