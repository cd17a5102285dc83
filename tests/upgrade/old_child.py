"""Runs under the first release's code (the test puts it first on PYTHONPATH).

``python -m tests.upgrade.old_child URL DIR finished``: sagas that end completed,
compensated, cancelled and failed. ``... DIR blocked``: three sagas that block
(declarative mid-action, declarative mid-compensation, context manager mid-step)
and stay blocked until the parent SIGKILLs the process.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path
from typing import Any

from saga import Coordinator, SagaFailed
from tests.upgrade import sagas

LEASE_TTL = 1.0  # short: the new release recovers the killed sagas soon after


def data(folder: Path, tag: str, **more: Any) -> dict[str, Any]:
    return {"dir": str(folder), "tag": tag, **more}


def finished(coord: Coordinator, folder: Path) -> None:
    coord.run(sagas.transfer, data(folder, "completed"), key="completed")
    for tag, extra in (("compensated", {}), ("failed", {})):
        if tag == "failed":
            (folder / "refund-broken-failed").touch()
        with contextlib.suppress(SagaFailed):
            coord.run(sagas.transfer, data(folder, tag, fail="credit", **extra), key=tag)
    cancelled = threading.Thread(
        target=lambda: _run_quietly(coord, data(folder, "cancelled", block="hold"))
    )
    cancelled.start()
    _wait_for(folder / "reached-cancelled")
    saga_id = coord.list(status="running", name=sagas.transfer.name)[0].id
    coord.cancel(saga_id)
    (folder / "release").touch()
    cancelled.join()
    (folder / "release").unlink()


def _run_quietly(coord: Coordinator, payload: dict[str, Any]) -> None:
    with contextlib.suppress(SagaFailed):
        coord.run(sagas.transfer, payload, key=payload["tag"])


def blocked(coord: Coordinator, folder: Path) -> None:
    runs = [
        lambda: coord.run(sagas.transfer, data(folder, "running", block="hold"), key="running"),
        lambda: _run_quietly(coord, data(folder, "compensating", block="refund", fail="credit")),
        lambda: _manual(coord, data(folder, "manual", block="ship")),
    ]
    for run in runs:
        threading.Thread(target=run, daemon=True).start()
    threading.Event().wait()  # until SIGKILL


def _manual(coord: Coordinator, payload: dict[str, Any]) -> None:
    with coord.saga("upgrade-manual", key="manual") as s:
        s.step(sagas.reserve, payload, compensate=sagas.unreserve)
        s.step(sagas.ship, payload)


def _wait_for(path: Path) -> None:
    while not path.exists():
        threading.Event().wait(0.02)


def main() -> None:
    url, folder, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    coord = Coordinator(url, lease_ttl=LEASE_TTL)
    coord.register(sagas.transfer)
    print("saga from", __import__("saga").__file__, flush=True)
    (finished if mode == "finished" else blocked)(coord, folder)
    coord.close()


if __name__ == "__main__":
    main()
