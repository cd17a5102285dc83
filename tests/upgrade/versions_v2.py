"""Release 2 of the versioned saga: a fee step between debit and credit."""

from __future__ import annotations

from saga import Saga, StepContext
from tests.upgrade.sagas import gate, note

transfer = Saga("versioned-transfer", version=2)


@transfer.step()
def debit(ctx: StepContext) -> str:
    note(ctx.data, "v2-debit")
    return "D"


@debit.compensation
def refund(ctx: StepContext) -> None:
    note(ctx.data, "v2-refund")


@transfer.step()
def fee(ctx: StepContext) -> str:
    note(ctx.data, "v2-fee")
    return "F"


@transfer.step()
def credit(ctx: StepContext) -> str:
    gate(ctx.data, "credit")
    note(ctx.data, "v2-credit")
    return "C"
