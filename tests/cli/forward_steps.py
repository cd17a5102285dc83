"""A saga that fails past its pivot until its cause is fixed, importable as
``tests.cli.forward_steps`` (``--app``): ``invoice`` raises while the file named by the
input's ``blocker`` exists, so a test "deploys the fix" by deleting it."""

from __future__ import annotations

from pathlib import Path

from saga import RetryPolicy, Saga, StepContext

FORWARD = Saga("cli-forward")
ONCE = RetryPolicy(max_attempts=1)
TWICE = RetryPolicy(max_attempts=2, initial_delay=0.0, retry_on=(RuntimeError,))


@FORWARD.step(retry=ONCE)
def charge(ctx: StepContext) -> str:
    return "charged"


@charge.compensation
def refund(ctx: StepContext) -> None:
    return None


@FORWARD.step(pivot=True, retry=ONCE)
def ship(ctx: StepContext) -> str:
    return "shipped"


@FORWARD.step(retry=TWICE)
def invoice(ctx: StepContext) -> int:
    if Path(ctx.data["blocker"]).exists():
        raise RuntimeError("invoice service down")
    return ctx.attempt


# For ``saga retry --from``: ``stamp`` (idempotent) notes each run in the file named by
# the input's ``stamps``, and ``invoice`` refuses until the blocker is gone.
FORWARD_FROM = Saga("cli-forward-from")


@FORWARD_FROM.step(retry=ONCE)
def reserve(ctx: StepContext) -> str:
    return "reserved"


@reserve.compensation
def release(ctx: StepContext) -> None:
    return None


@FORWARD_FROM.step(pivot=True, retry=ONCE)
def dispatch(ctx: StepContext) -> str:
    return "dispatched"


@FORWARD_FROM.step(idempotent=True, retry=ONCE)
def stamp(ctx: StepContext) -> int:
    with Path(ctx.data["stamps"]).open("a") as stamps:
        stamps.write(f"{ctx.attempt}\n")
    return ctx.attempt


@FORWARD_FROM.step(name="invoice", retry=TWICE)
def invoice_after_stamp(ctx: StepContext) -> int:
    return invoice(ctx)
