"""``python -m tests.transactional.fastapi_child URL KEY GATE``: another server placing an order.

It runs the FastAPI example's ``web-order`` saga with ``KEY`` on its own coordinator and
holds it just after the saga's creation is durable (before the first action runs): it
creates ``GATE/started`` and waits there until ``GATE/go`` exists, its heartbeat keeping the
lease live all the while. Then it finishes the saga and reports its id and status
(:func:`tests.children.report`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from examples import fastapi_app
from saga import Coordinator
from saga._internal import faults
from tests import children

ORDER = {"item": "lamp", "card": "tok_visa"}
HOLD_AT = "after_start_commit:reserve"
"""The saga is recorded, with its lease, and its first step may start: a server mid-request."""


def main(url: str, key: str, gate: Path) -> None:
    def hold() -> None:
        (gate / "started").touch()
        children.wait_for(gate / "go", timeout=120.0)

    faults.arm(HOLD_AT, how=hold)
    with Coordinator(url) as coord:
        coord.register(fastapi_app.order)
        view = coord.run(fastapi_app.order, data=ORDER, key=key)
    children.report(saga_id=view.id, status=view.status.value)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
