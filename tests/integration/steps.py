"""Module-level step functions for context-manager sagas (they must be importable).

Every call is appended to ``CALLS`` so tests can check what ran, how often and
in which order; the ``calls`` fixture clears it before each test.
"""

from __future__ import annotations

import os
from typing import Any

from saga import Coordinator, RetryPolicy, current_step

CALLS: list[tuple[Any, ...]] = []
FAILURES: dict[str, int] = {}
"""How many more times a named flaky function fails before it succeeds."""


class Crash(BaseException):
    """Raised to simulate the process dying mid-saga: nothing unwinds it."""


def debit(account: str, amount: int) -> dict[str, Any]:
    CALLS.append(("debit", account, amount))
    return {"hold": f"{account}-{amount}", "key": current_step().idempotency_key}


def refund(result: dict[str, Any] | None, account: str, amount: int) -> None:
    CALLS.append(("refund", result, account, amount))


def credit(account: str, amount: int) -> int:
    CALLS.append(("credit", account, amount))
    return amount


def uncredit(result: int | None, account: str, amount: int) -> None:
    CALLS.append(("uncredit", result, account, amount))


def boom(message: str) -> None:
    CALLS.append(("boom", message))
    raise RuntimeError(message)


def unboom(result: None, message: str) -> None:
    CALLS.append(("unboom", result, message))


def flaky(name: str, error: str = "connection") -> str:
    """Fails with ``ConnectionError`` (or ``ValueError``) while ``FAILURES[name]`` > 0."""
    CALLS.append(("flaky", name, current_step().attempt))
    if FAILURES.get(name, 0) > 0:
        FAILURES[name] -= 1
        raise ConnectionError(name) if error == "connection" else ValueError(name)
    return name


def crash(name: str) -> None:
    """Dies (``Crash``) while ``FAILURES[name]`` > 0, else returns."""
    CALLS.append(("crash", name, current_step().attempt))
    if FAILURES.get(name, 0) > 0:
        FAILURES[name] -= 1
        raise Crash(name)


def probe() -> dict[str, Any]:
    """What ``current_step()`` says inside a context-manager step."""
    ctx = current_step()
    CALLS.append(("probe", ctx.saga_id, ctx.step, ctx.attempt))
    return {
        "saga_id": ctx.saga_id,
        "step": ctx.step,
        "attempt": ctx.attempt,
        "key": ctx.idempotency_key,
        "results": dict(ctx.results),
    }


def unsafe(*args: Any) -> None:
    """Never passed to ``s.step``: a stored reference to it must not be trusted."""
    CALLS.append(("unsafe", *args))


def unserialisable() -> object:
    CALLS.append(("unserialisable",))
    return {"fine": 1, "bad": {1, 2}}


class Account:
    """Its bound methods are not importable by path."""

    def debit(self, amount: int) -> int:
        CALLS.append(("Account.debit", amount))
        return amount


def locked(result: Any, *args: Any) -> None:
    """A compensation that always fails, whatever step it undoes."""
    CALLS.append(("locked", result, *args))
    raise RuntimeError("ledger locked")


class LedgerRefusedError(Exception):
    """A participant's own error class, raised by the compensation ``refused``."""


def refused(result: Any, *args: Any) -> None:
    """A compensation that always fails with the participant's own error class."""
    CALLS.append(("refused", result, *args))
    raise LedgerRefusedError("ledger refused the reversal")


def quick_coordinator() -> Coordinator:
    """``--app tests.integration.steps:quick_coordinator``: the admin command on
    ``$REPORT_DB`` with context-manager compensations given two quick attempts, so a
    compensation that keeps failing ends ``failed`` at once instead of being handed
    back to wait out the default budget."""
    return Coordinator(
        os.environ["REPORT_DB"],
        compensation_retry=RetryPolicy(
            max_attempts=2, initial_delay=0.001, max_delay=0.005, retry_on=(Exception,)
        ),
    )


def unflaky(result: Any, name: str, error: str = "connection") -> None:
    """A compensation that fails with ``ConnectionError`` while ``FAILURES[name]`` > 0."""
    CALLS.append(("unflaky", name, current_step().attempt))
    if FAILURES.get(name, 0) > 0:
        FAILURES[name] -= 1
        raise ConnectionError(f"{name} unreachable")
