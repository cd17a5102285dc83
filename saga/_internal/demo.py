"""``saga demo``: three orders through a real saga, told step by step.

1. An order that goes through: stock reserved, card charged, parcel booked.
2. A declined card: the charge fails, and what was done is undone, newest first.
3. A crash: a child process places an order and is killed with SIGKILL right
   after the card was charged, before saga could record it. This process
   then recovers the saga: the charge step runs again with the same
   idempotency key, the payment provider recognises it, and the card is
   charged once.

Everything is recorded in the real database (``--db``, default
``$SAGA_DATABASE_URL``, else ``sqlite:///saga.db``); keys are fresh each run,
so the demo can run again and again on the same file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any

import tenacity
from rich.console import Console
from rich.text import Text

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.demo_steps import CHILD_LEASE_TTL, DECLINED_CARD, ORDER, Ledger
from saga._internal.errors import SagaBusyError, SagaFailed
from saga._internal.ports import EventRecord
from saga._internal.recovery import RecoveryOutcome
from saga._internal.status import SagaStatus, StepStatus
from saga._internal.store import default_url

CHILD_TIMEOUT = 60.0
RECOVERY_PATIENCE = 30.0
"""Seconds to wait for the killed child's lease to expire and the saga to be recovered."""

_STYLES = {
    "succeeded": "green",
    "compensated": "yellow",
    "compensating": "yellow",
    "failed": "red",
    "completed": "bold green",
    "lease": "magenta",
}


class Demo:
    """The three scenarios, sharing one coordinator, one ledger and one console."""

    def __init__(self, coord: Coordinator, ledger: Ledger, url: str, console: Console) -> None:
        self.coord = coord
        self.ledger = ledger
        self.url = url
        self.console = console

    # -- telling ---------------------------------------------------------------------------

    def say(self, text: str = "", style: str = "") -> None:
        self.console.print(Text(text, style=style))

    def heading(self, number: int, title: str) -> None:
        self.say()
        self.say(f"{number}. {title}", "bold")

    def events(self, saga_id: str, after: int = 0) -> int:
        """Print the saga's events after event id ``after``; return the last id printed."""
        last = after
        for entry in admin.timeline(self.coord.history(saga_id)):
            if entry.event.id > after:
                self.say(_event_line(entry), _style(entry.event))
                last = entry.event.id
        return last

    def order(self, number: str, card: str) -> dict[str, Any]:
        return {
            "order": number,
            "sku": "BOOK-42",
            "quantity": 2,
            "card": card,
            "amount_cents": 5990,
            "address": "Rua das Flores 7, Porto",
            "ledger": str(self.ledger.path),
        }

    # -- the scenarios -----------------------------------------------------------------------

    def happy(self) -> bool:
        self.heading(1, "An order that goes through")
        key = _key()
        self.say(f"   coord.run(place-order, key={key!r}): reserve stock, charge card, book parcel")
        view = self.coord.run(ORDER, data=self.order("A-1001", "tok_visa"), key=key)
        self.events(view.id)
        charge = self.ledger.read()["charges"][f"{view.id}:charge_card"]
        self.say(
            f"   => {view.status.value}: card charged {charge['amount_cents'] / 100:.2f} once, "
            f"parcel {view.results['create_shipment']['shipment']} booked",
            "bold green",
        )
        self.say(f"   saga show {view.id}", "dim")
        return view.status is SagaStatus.COMPLETED

    def declined(self) -> bool:
        self.heading(2, "A card that is declined")
        key = _key()
        self.say(f"   the same saga, key={key!r}, with card {DECLINED_CARD}")
        try:
            self.coord.run(ORDER, data=self.order("A-1002", DECLINED_CARD), key=key)
        except SagaFailed as failure:
            self.events(failure.saga_id)
            state = self.ledger.read()
            released = state["reservations"][f"{failure.saga_id}:reserve_stock"]["status"]
            charged = f"{failure.saga_id}:charge_card" in state["charges"]
            self.say(
                f"   => {failure.status.value} (failed at {failure.failed_step}): reservation "
                f"{released}, {'a charge exists' if charged else 'nothing was charged'}; "
                "no half-done order is left behind",
                "bold yellow",
            )
            self.say(f"   saga history {failure.saga_id}", "dim")
            return failure.status is SagaStatus.COMPENSATED and not charged
        self.say("   => the declined card went through?!", "bold red")
        return False

    def crash(self) -> bool:
        self.heading(3, "A process killed in the middle of a step")
        key = _key()
        pid, code, stderr = self._child(self.order("A-1003", "tok_mastercard"), key)
        record = self.coord.store.find(ORDER.name, key)
        if code != -signal.SIGKILL or record is None:
            self.say(f"   the child process did not die as planned (exit {code}):", "red")
            self.say(stderr.strip()[-2000:])
            return False
        last = self.events(record.id)
        self.say(f"   ** child process {pid} killed by SIGKILL **", "bold red")
        self._stuck(record.id)
        self.say(
            f"   once the dead process's lease ({CHILD_LEASE_TTL:g} s) has expired, this process "
            "claims the saga and finishes it, as coord.recover() or `saga worker` would:"
        )
        outcome = self._recovered(record.id)
        if outcome is None:
            self.say("   => the saga was not recovered in time", "bold red")
            return False
        self.events(record.id, after=last)
        requests = self.ledger.read()["charges"][f"{record.id}:charge_card"]["requests"]
        status = outcome.status.value if outcome.status else f"error: {outcome.error}"
        self.say(
            f"   => {status}: the payment provider got {requests} charge requests under one "
            "idempotency key and charged the card once",
            "bold green" if outcome.ok else "bold red",
        )
        self.say(f"   saga history {record.id}", "dim")
        return outcome.status is SagaStatus.COMPLETED

    def _child(self, order: dict[str, Any], key: str) -> tuple[int, int, str]:
        """Place the order in a child process that kills itself after charging the card."""
        self.say(
            "   a child process places the order and dies (SIGKILL) right after the card "
            "is charged, before saga can record it"
        )
        env = {
            **os.environ,
            "SAGA_DATABASE_URL": self.url,  # in the environment: argv would show a password
            "SAGA_FAULTS": "after_action:charge_card",
        }
        command = [sys.executable, "-m", "saga._internal.demo_steps", json.dumps(order), key]
        with subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        ) as child:
            _, stderr = child.communicate(timeout=CHILD_TIMEOUT)
        return child.pid, child.returncode, stderr

    def _stuck(self, saga_id: str) -> None:
        view = self.coord.get(saga_id)
        doubt = [s for s in view.steps if s.status is StepStatus.RUNNING]
        where = ", ".join(f"step {s.name} in doubt (attempt {s.attempt})" for s in doubt)
        self.say(f"   saga {view.id} is stuck: {view.status.value}, {where or 'between steps'}")

    def _recovered(self, saga_id: str) -> RecoveryOutcome | None:
        """Recover our saga as soon as its lease has expired.

        Only this saga is claimed (``recover_saga``, where ``coord.recover()``
        would take every stuck saga): the demo never touches sagas that are not
        its own, even on a shared database.
        """
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(SagaBusyError),  # the lease is still live
            wait=tenacity.wait_fixed(0.2),
            stop=tenacity.stop_after_delay(RECOVERY_PATIENCE),
            retry_error_callback=lambda _state: None,
        )
        outcome: RecoveryOutcome | None = retrying(self.coord.recover_saga, saga_id)
        return outcome


def _key() -> str:
    return f"demo-{uuid.uuid4().hex[:8]}"


def _event_line(entry: admin.TimelineEntry) -> str:
    took = "" if entry.duration is None else admin.human_duration(entry.duration)
    return f"     +{admin.human_duration(entry.offset):<8} {took:>7}  {entry.text}"


def _style(event: EventRecord) -> str:
    for word, style in _STYLES.items():
        if word in event.kind:
            return style
    return ""


def run(url: str | None, console: Console, scenarios: Sequence[str] = ()) -> bool:
    """Run the demo on ``url`` (default: ``$SAGA_DATABASE_URL``, else ``sqlite:///saga.db``).

    Returns whether every scenario ended the way it should.
    """
    url = url or default_url()
    workdir = tempfile.mkdtemp(prefix="saga-demo-")
    try:
        with admin.open_coordinator(url, lease_ttl=5.0, create_tables=True) as coord:
            coord.register(ORDER)
            demo = Demo(coord, Ledger(os.path.join(workdir, "shop.json")), url, console)
            demo.say(f"saga demo on {coord.store.url}", "bold")
            chosen = scenarios or ("happy", "declined", "crash")
            results = [getattr(demo, name)() for name in chosen]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ok = all(results)
    console.print()
    console.print(
        Text(
            "Next: saga list, saga show ID, saga history ID" if ok else "demo FAILED",
            style="bold" if ok else "bold red",
        )
    )
    return ok
