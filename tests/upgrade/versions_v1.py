"""Release 1 of the versioned saga: debit, then credit."""

from __future__ import annotations

from saga import Saga, StepContext
from tests.upgrade.sagas import gate, note

transfer = Saga("versioned-transfer", version=1)


@transfer.step()
def debit(ctx: StepContext) -> str:
    note(ctx.data, "v1-debit")
    return "D"


@debit.compensation
def refund(ctx: StepContext) -> None:
    note(ctx.data, "v1-refund")


@transfer.step()
def credit(ctx: StepContext) -> str:
    gate(ctx.data, "credit")
    note(ctx.data, "v1-credit")
    return "C"
