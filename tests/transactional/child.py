"""Crash children for the transactional tests: one saga per forked process.

The shared fork server (:class:`tests.children.ForkServer`) forks a process
per request, arms ``SAGA_FAULTS`` in it and calls :func:`job` with
``{"url": ..., "shape": ...}``, which runs that saga on a short lease and
reports its status (:func:`tests.children.report`). The fault point SIGKILLs
it exactly as an OOM kill or a power cut would.

Shapes (all steps transactional, with transactional compensations):

- ``forward``: declarative, two steps, resumed forward after a crash;
- ``failing``: declarative, step s2 writes its row and then refuses;
- ``on-crash``: declarative with ``on_crash="compensate"``;
- ``cm-forward`` / ``cm-failing``: the same as context-manager sagas.
"""

from __future__ import annotations

from typing import Any

from saga import Coordinator, SagaFailed
from tests import children
from tests.transactional import app

LEASE_TTL = 0.15
KEY = "case"


def run_shape(coord: Coordinator, shape: str) -> str | None:
    """Run one saga of ``shape``; its final status (None when nothing was recorded)."""
    try:
        if shape == "forward":
            return coord.run(app.FORWARD, data={}, key=KEY).status.value
        if shape == "failing":
            return coord.run(app.FORWARD, data={"fail": "s2"}, key=KEY).status.value
        if shape == "on-crash":
            return coord.run(app.ON_CRASH, data={}, key=KEY).status.value
        return _block(coord, fail=shape == "cm-failing")
    except SagaFailed as failure:
        return failure.status.value


def _block(coord: Coordinator, fail: bool) -> str | None:
    with coord.saga("tx-cm", key=KEY) as s:
        s.step(app.cm_act, transactional=True, compensate=app.cm_undo, step_name="s1")
        s.step(app.cm_act, fail, transactional=True, compensate=app.cm_undo, step_name="s2")
    return None if s.status is None else s.status.value


def job(request: dict[str, Any]) -> None:
    """The fork server's entry point: run ``request["shape"]`` on ``request["url"]``."""
    with Coordinator(request["url"], lease_ttl=LEASE_TTL) as coord:
        children.report(status=run_shape(coord, request["shape"]))
