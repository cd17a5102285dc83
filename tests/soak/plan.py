"""What the soak's saga number ``n`` is, drawn from the seed alone.

The driver and the checks both call :func:`planned`: a restarted driver
re-submits a transfer with exactly the input it first had (same key, same
JSON), and the checks know which transfers were meant to fail, to flake or to
crash-loop, without anything being passed between processes.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from tests.soak import bank

ACCOUNTS = 32
OPENING = 5_000
"""Each account's opening balance; transfers of up to 400 make some debits fall short."""

FAULTS = ("clean", "fail", "flaky", "crash")
WEIGHTS = (72, 13, 14, 1)


@dataclasses.dataclass(frozen=True)
class Planned:
    """Saga number ``n``: its definition, key, input, and the fault it carries."""

    n: int
    saga: str
    key: str
    data: dict[str, Any]
    fault: str

    @property
    def may_complete(self) -> bool:
        """Whether it can end ``completed`` (a planned failure or crash loop never can)."""
        return self.fault in ("clean", "flaky")


def planned(seed: int, n: int, bank_url: str) -> Planned:
    rng = random.Random(f"{seed}:{n}")
    names = bank.accounts(ACCOUNTS)
    src, dst = rng.sample(names, 2)
    fault = rng.choices(FAULTS, WEIGHTS)[0]
    data: dict[str, Any] = {
        "bank": bank_url,
        "src": src,
        "dst": dst,
        "amount": rng.randint(1, 400),
        "fee": rng.randint(1, 5),
        "nap": round(rng.uniform(0.0, 0.03), 4),
        "pace": round(rng.uniform(0.05, 0.6), 3),  # in the driver only (bank.PACED)
    }
    if rng.random() < 0.2:  # a slow step: lease renewals, kills and operators land mid-step
        data["slow"] = rng.choice(bank.STEPS)
        data["slow_for"] = round(rng.uniform(0.5, 2.0), 3)
    step = rng.choice(bank.STEPS)
    if fault == "fail":
        data["fail"] = step
        # A compensatable step may fail after acting (a timeout after the bank committed);
        # a pivot that fails never acted.
        data["fail_after"] = step != bank.PIVOT and rng.random() < 0.5
    elif fault in ("flaky", "crash"):
        data[fault] = step
    saga = bank.TRANSFER_UNWINDING.name if rng.random() < 0.25 else bank.TRANSFER.name
    return Planned(n, saga, f"t-{n}", data, fault)
