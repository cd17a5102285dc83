"""An owner process for the instant-takeover tests (tests/crash/test_takeover.py): it
runs a saga with the default 30 s lease and dies (``SAGA_FAULTS``: SIGKILL) or freezes
(``--freeze``: SIGSTOP, alive) as the step ``charge`` has started.

``python -m tests.crash.takeover_child declarative|block URL KEY [--freeze]``
"""

from __future__ import annotations

import signal
from typing import Any

from saga import Coordinator, Saga, StepContext
from saga._internal import faults
from tests.children import CommandLine, arg

FAULT = "after_start_commit:charge"
"""Where the owner dies or freezes: the step's start is durable, its action not run."""

order = Saga("takeover-order")


@order.step()
def reserve(ctx: StepContext) -> str:
    return f"R-{ctx.data['item']}"


@order.step()
def charge(ctx: StepContext) -> str:
    return f"C-{ctx.data['item']}"


def reserve_seat(trip: str) -> str:
    return f"seat-{trip}"


def charge_card(trip: str) -> str:
    return f"paid-{trip}"


def trip(coord: Coordinator, key: str) -> tuple[str, str]:
    """The context-manager saga: its block, as the owner and a re-entering caller run it."""
    with coord.saga("takeover-trip", key=key) as s:
        seat = s.step(reserve_seat, key, step_name="reserve")
        paid = s.step(charge_card, key, step_name="charge")
    return seat, paid


def _owner(kind: str, url: str, key: str, freeze: bool) -> None:
    if freeze:
        faults.arm(FAULT, signal.SIGSTOP)
    with Coordinator(url) as coord:  # the default lease: 30 s
        if kind == "declarative":
            coord.run(order, data={"item": key}, key=key)
        else:
            trip(coord, key)
    raise AssertionError(f"the owner was to stop at {FAULT}")


def main(argv: Any = None) -> None:
    line = CommandLine("tests.crash.takeover_child")
    arguments = (arg("url"), arg("key"), arg("--freeze", action="store_true"))
    line.add("declarative", lambda **o: _owner("declarative", **o), *arguments)
    line.add("block", lambda **o: _owner("block", **o), *arguments)
    line.main(argv)


if __name__ == "__main__":
    main()
