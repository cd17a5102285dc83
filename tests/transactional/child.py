"""Crash children for the transactional tests: a fork server that runs one saga per request.

``python -m tests.transactional.child serve`` imports everything once, then
reads one JSON request per line (``url``, ``shape``, ``faults``, ``log``),
forks a process that arms ``SAGA_FAULTS`` and runs that saga on a short
lease, and replies with how the process ended. The fault point SIGKILLs it
exactly as an OOM kill or a power cut would.

Shapes (all steps transactional, with transactional compensations):

- ``forward``: declarative, two steps, resumed forward after a crash;
- ``failing``: declarative, step s2 writes its row and then refuses;
- ``on-crash``: declarative with ``on_crash="compensate"``;
- ``cm-forward`` / ``cm-failing``: the same as context-manager sagas.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any, NoReturn

from saga import Coordinator, SagaFailed, faults
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


def serve() -> None:
    for module in ("saga.adapters.sql.sqlite", "saga.adapters.sql.postgres"):
        importlib.import_module(module)
    for line in sys.stdin:
        if not line.strip():
            continue
        request: dict[str, Any] = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _forked(request)
        _, status = os.waitpid(pid, 0)
        reply = {
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        }
        print(json.dumps(reply), flush=True)


def _forked(request: dict[str, Any]) -> NoReturn:
    code = 1
    try:
        output = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(output, 1)
        os.dup2(output, 2)
        faults.disarm()
        faults.arm(request["faults"])
        with Coordinator(request["url"], lease_ttl=LEASE_TTL) as coord:
            print("ended", run_shape(coord, request["shape"]))
        code = 0
    except BaseException:  # reported in the log; the test sees the exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve()
