"""Named fault points, for crash tests only.

The engine calls :func:`point` at the moments a crash is most interesting
(before and after each commit, after an action, around an undo). Nothing
happens unless ``SAGA_FAULTS`` names the point when the process starts (or a
test calls :func:`arm`): then the process kills itself with SIGKILL there,
exactly as a power cut or an OOM kill would stop it.

``SAGA_FAULTS`` is a comma-separated list of ``point``, ``point:step`` or
``point:step#n`` (the n-th time that point is reached for that step).
:func:`arm` can stop the process (SIGSTOP) instead of killing it, which makes
a zombie: a process that wakes after others took its sagas over. And
:func:`trace` lists the points a run reaches, in order, which is how
``saga.testing.crash_matrix`` learns where a saga can crash.

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
after_pause_request    an operator's pause is durable (the saga is paused); the
                       operator has not claimed it to hand it back yet
inside_action          ``saga.testing.Ledger`` applied an effect for a running
                       step (the action is under way and has not returned)
inside_undo            the same inside a compensation
=====================  =========================================================
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from saga._internal.engine.fault_points import FAULT_POINTS
from saga._internal.errors import StorageUnavailableError

_armed: dict[tuple[str, str | None], int] = {}
_seen: dict[tuple[str, str | None], int] = {}
_signal: signal.Signals | Callable[[], None] = signal.SIGKILL
_trace: list[str] | None = None


def arm(spec: str, how: signal.Signals | Callable[[], None] = signal.SIGKILL) -> None:
    """Arm the fault points named in ``spec`` (the ``SAGA_FAULTS`` syntax).

    ``how`` is the signal the process sends itself there: SIGKILL (a crash) or
    SIGSTOP (a freeze; the process goes on where it stopped once continued),
    or a function to call instead.
    """
    global _signal
    _signal = how
    for item in filter(None, (part.strip() for part in spec.split(","))):
        target, _, nth = item.partition("#")
        name, _, step = target.partition(":")
        _armed[(name, step or None)] = int(nth or 1)
    _tell_engine()


def _tell_engine() -> None:
    """The engine yields its fault points only while one is armed or traced."""
    FAULT_POINTS.on = bool(_armed) or _trace is not None


_answers_to_lose = 0
answers_lost = 0
"""How many commit acknowledgements :func:`answer_to_commit` has lost in this process."""


def lose_next_answer() -> None:
    """A fault action (``arm(spec, lose_next_answer)``): the next saga write this process
    commits lands in the database, but its answer is lost on the way back, as when the
    network fails between the server's COMMIT and its reply."""
    global _answers_to_lose
    _answers_to_lose += 1


def answer_to_commit() -> None:
    """Called by a store right after one of its writes committed: raises the error a lost
    connection would (``StorageUnavailableError``) when a fault asked to lose this answer,
    so the store's retry must recognise the write that already landed."""
    global _answers_to_lose, answers_lost
    if _answers_to_lose == 0:
        return
    _answers_to_lose -= 1
    answers_lost += 1
    raise StorageUnavailableError("the answer to a commit was lost (fault injected)")


def disarm() -> None:
    global _signal, _answers_to_lose
    _armed.clear()
    _seen.clear()
    _signal = signal.SIGKILL
    _answers_to_lose = 0
    _tell_engine()


def trace(into: list[str] | None) -> None:
    """Append every point reached from now on to ``into`` as ``name:step``
    (``name`` for saga-wide points); ``None`` stops tracing."""
    global _trace
    _trace = into
    _tell_engine()


def point(name: str, step: str | None) -> None:
    """A place where a crash test may kill this process."""
    if _trace is not None:
        _trace.append(name if step is None else f"{name}:{step}")
    if not _armed:
        return
    for key in ((name, step), (name, None)):
        if key in _armed:
            _seen[key] = _seen.get(key, 0) + 1
            if _seen[key] == _armed[key]:
                if callable(_signal) and not isinstance(_signal, signal.Signals):
                    _signal()
                else:
                    signal_here(_signal)


def signal_here(number: signal.Signals) -> None:
    """Send ``number`` (SIGKILL, SIGSTOP) to this process through the calling thread.

    ``os.kill(os.getpid(), ...)`` lets the kernel hand a stop to any thread; the others,
    this one included, run on until that thread gets round to stopping them, and a
    step's thread has been seen to commit its success and start the next step in that
    gap. Directed at the calling thread, the process stops (or dies) before this
    function returns.
    """
    signal.pthread_kill(threading.get_ident(), number)


arm(os.environ.get("SAGA_FAULTS", ""))
