"""A context-manager saga's functions whose participant is down while a file exists
(``saga --app tests.cli.outage_steps``): its refund keeps failing until the test
removes the file, from outside the process that runs the compensation."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pay(account: str, amount: int, down: str) -> dict[str, Any]:
    return {"account": account, "paid": amount}


def refund(result: dict[str, Any] | None, account: str, amount: int, down: str) -> None:
    """Idempotent: refunding what was never paid is a no-op. Fails while ``down`` exists."""
    if Path(down).exists():
        raise ConnectionError("bank unreachable")
