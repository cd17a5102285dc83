"""An application that describes itself to the admin command with a factory
(``saga --app tests.cli.factory_app:make_coordinator``): its database, lease and a
resource its step needs, all from the application, none from globals.

The environment stands in for the application's configuration: ``FACTORY_DB`` the
database URL, ``FACTORY_LEDGER`` the file its ledger resource writes to.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from saga import Coordinator, Saga, StepContext

order = Saga("factory-order")


class SimulatedCrash(BaseException):
    """Escapes every ``except Exception``: the saga is left as a crash leaves it."""


class Ledger:
    """A client the application opens at start-up and closes at shutdown."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.closed = False

    def write(self, line: str) -> None:
        assert not self.closed, "a step used the ledger after shutdown"
        with self.path.open("a") as out:
            out.write(line + "\n")

    def close(self) -> None:
        self.write("closed")
        self.closed = True


@order.step()
def book(ctx: StepContext) -> str:
    if ctx.data.get("crash") and ctx.attempt == 1:
        raise SimulatedCrash("book")
    ctx.resources["ledger"].write(f"booked {ctx.data['sku']} for {os.getpid()}")
    return f"{ctx.resources.settings['prefix']}-{ctx.data['sku']}"


def make_coordinator() -> Coordinator:
    coord = Coordinator(
        os.environ["FACTORY_DB"], lease_ttl=4.0, resources={"settings": {"prefix": "B"}}
    )
    coord.resources.add("ledger", Ledger(Path(os.environ["FACTORY_LEDGER"])), close=Ledger.close)
    coord.register(order)
    return coord


def lifecycle() -> Iterator[Coordinator]:
    """The generator form: set-up before ``yield``, tear-down after."""
    ledger = Ledger(Path(os.environ["FACTORY_LEDGER"]))
    ledger.write("started")
    with make_coordinator() as coord:
        yield coord
    ledger.write("stopped")


def returns_nothing() -> None:
    return None


def fails() -> Coordinator:
    raise RuntimeError("settings file missing")


not_a_function = 42


def fails_at_start_up() -> Iterator[Coordinator]:
    """A generator factory whose set-up raises before it yields."""
    raise RuntimeError("settings file missing")
    yield make_coordinator()  # pragma: no cover - never reached


def fails_at_tear_down() -> Iterator[Coordinator]:
    """A generator factory whose tear-down raises after the command is done."""
    with make_coordinator() as coord:
        yield coord
    raise RuntimeError("could not flush the ledger")
