"""A saga whose every stored text is hostile to a terminal, importable as
``tests.cli.hostile_steps`` (``--app``).

Its name, its step names, its results and its errors hold a screen clear
(``ESC [2J``), a window-title change ended by BEL, rich markup and a
right-to-left override, the way text from an HTTP client might. The input
steers it as in ``tests.cli.steps``: ``fail`` makes the second step fail,
``undo_fails`` makes the first step's compensation fail too, ``crash``
stops the process's work inside the second step as a crash would, ``forge`` is
added to the second step's error.
"""

from __future__ import annotations

from typing import Any

from saga import RetryPolicy, Saga, StepContext

HOSTILE = "\x1b[2J\x1b]0;title\x07[red]x[/red]\u202e"
"""Escape sequences, BEL, rich markup and a bidi override, in one string."""
KEY = "k\nfake-row  completed"
"""A key that would print a row of its own if the newline reached the table."""

ONCE = RetryPolicy(max_attempts=1)
AFTER_A_CRASH = RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.001)
"""Attempts count across crashes: one to crash in, one for recovery."""
EVIL = Saga("evil" + HOSTILE)
GRAB = "grab" + HOSTILE
BOOM = "boom" + HOSTILE


class Crash(BaseException):
    """Escapes every ``except Exception``: the saga is left as a crash leaves it."""


@EVIL.step(name=GRAB, retry=ONCE)
def grab(ctx: StepContext) -> dict[str, Any]:
    return {"got": HOSTILE}


@grab.compensation(retry=ONCE)
def put_back(ctx: StepContext) -> None:
    if ctx.data.get("undo_fails"):
        raise RuntimeError("cannot put back " + HOSTILE)


@EVIL.step(name=BOOM, retry=AFTER_A_CRASH)
def boom(ctx: StepContext) -> str:
    if ctx.data.get("crash") and ctx.attempt == 1:
        raise Crash(BOOM)
    if ctx.data.get("fail"):
        # not retried: only connection errors are; "forge" adds a would-be log line
        raise ValueError("boom " + HOSTILE + ctx.data.get("forge", ""))
    return HOSTILE
