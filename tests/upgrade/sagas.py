"""Sagas both the first release (e1266f4) and this one can run: only API they share.

Each call writes a line to the run's ledger, so the test can check which effects
happened and which were undone. A step or compensation told to ``block`` there
announces it (a ``reached-TAG`` file) and waits for a ``release`` file: the parent
SIGKILLs the process while it waits.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from saga import Saga, StepContext

transfer = Saga("upgrade-transfer")


def note(data: dict[str, Any], what: str) -> None:
    with (Path(data["dir"]) / "ledger").open("a") as ledger:
        ledger.write(f"{data['tag']} {what}\n")


def gate(data: dict[str, Any], where: str) -> None:
    """Wait here for the release file when this run is told to block at ``where``."""
    if data.get("block") != where:
        return
    folder = Path(data["dir"])
    (folder / f"reached-{data['tag']}").touch()
    while not (folder / "release").exists():  # the parent kills the process meanwhile
        time.sleep(0.02)


@transfer.step()
def debit(ctx: StepContext) -> str:
    note(ctx.data, "debit")
    return "D-" + ctx.data["tag"]


@debit.compensation
def refund(ctx: StepContext) -> None:
    gate(ctx.data, "refund")
    if (Path(ctx.data["dir"]) / f"refund-broken-{ctx.data['tag']}").exists():
        raise ConnectionError("the bank is down")
    note(ctx.data, "refund")


@transfer.step()
def hold(ctx: StepContext) -> str:
    gate(ctx.data, "hold")
    note(ctx.data, "hold")
    return "H-" + ctx.data["tag"]


@hold.compensation
def unhold(ctx: StepContext) -> None:
    note(ctx.data, "unhold")


@transfer.step()
def credit(ctx: StepContext) -> str:
    if ctx.data.get("fail") == "credit":
        raise ValueError("the account is closed")
    note(ctx.data, "credit")
    return "C-" + ctx.data["tag"]


def reserve(data: dict[str, Any]) -> str:
    """A context-manager saga's step (its arguments are its input)."""
    note(data, "reserve")
    return "R-" + data["tag"]


def unreserve(reserved: str | None, data: dict[str, Any]) -> None:
    """The compensation gets the step's result (None if unknown), then its arguments."""
    note(data, "unreserve")


def ship(data: dict[str, Any]) -> str:
    gate(data, "ship")
    note(data, "ship")
    return "S-" + data["tag"]
