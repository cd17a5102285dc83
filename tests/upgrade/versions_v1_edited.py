"""Version 1 edited in place (a step added without a new version): what not to do."""

from __future__ import annotations

from saga import Saga, StepContext

transfer = Saga("versioned-transfer", version=1)


@transfer.step()
def debit(ctx: StepContext) -> str:
    return "D"


@transfer.step()
def audit(ctx: StepContext) -> None:
    return None


@transfer.step()
def credit(ctx: StepContext) -> str:
    return "C"
