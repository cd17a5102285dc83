"""Named fault points, for crash tests only.

The engine calls :func:`point` at the moments a crash is most interesting
(before and after each commit, after an action, around an undo). Nothing
happens unless ``SAGA_FAULTS`` names the point when the process starts (or a
test calls :func:`arm`): then the process kills itself with SIGKILL there,
exactly as a power cut or an OOM kill would stop it.

``SAGA_FAULTS`` is a comma-separated list of ``point``, ``point:step`` or
``point:step#n`` (the n-th time that point is reached for that step).

The points (sync and async drivers alike; ``step`` is None for saga-wide ones):

=====================  =========================================================
before_start_commit    a step's start is about to commit (for a saga's first
                       step: the saga's creation, which records that start)
after_start_commit     that commit is durable; the action has not run
after_action           the action returned; its success is not yet durable
after_success_commit   context-manager sagas: the step's success is durable
                       (declarative sagas commit it with the next start)
before_unwind          the saga turned compensating; no compensation ran yet
before_undo            a compensation attempt is about to be recorded
after_undo             the compensation returned; not yet recorded as done
after_undo_commit      the step is durably compensated
before_final_commit    the final status (completed / compensated / cancelled)
                       is about to commit
after_final_commit     the final status is durable
=====================  =========================================================
"""

from __future__ import annotations

import os
import signal

_armed: dict[tuple[str, str | None], int] = {}
_seen: dict[tuple[str, str | None], int] = {}


def arm(spec: str) -> None:
    """Arm the fault points named in ``spec`` (the ``SAGA_FAULTS`` syntax)."""
    for item in filter(None, (part.strip() for part in spec.split(","))):
        target, _, nth = item.partition("#")
        name, _, step = target.partition(":")
        _armed[(name, step or None)] = int(nth or 1)


def disarm() -> None:
    _armed.clear()
    _seen.clear()


def point(name: str, step: str | None) -> None:
    """A place where a crash test may kill this process."""
    if not _armed:
        return
    for key in ((name, step), (name, None)):
        if key in _armed:
            _seen[key] = _seen.get(key, 0) + 1
            if _seen[key] == _armed[key]:
                os.kill(os.getpid(), signal.SIGKILL)


arm(os.environ.get("SAGA_FAULTS", ""))
