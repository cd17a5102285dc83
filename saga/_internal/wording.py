"""Events in plain English: one wording for ``saga history``, the logs and the web."""

from __future__ import annotations

import datetime
import json
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class Described(Protocol):
    """What a wording reads of an event (a stored ``EventRecord``, a ``SagaEvent``)."""

    @property
    def kind(self) -> str: ...

    @property
    def step(self) -> str | None: ...

    @property
    def attempt(self) -> int | None: ...

    @property
    def epoch(self) -> int | None: ...

    @property
    def at(self) -> float: ...

    @property
    def detail(self) -> dict[str, Any] | None: ...


def iso_time(seconds: float | None) -> str | None:
    """A timestamp (epoch seconds) as ISO 8601 UTC with milliseconds."""
    if seconds is None:
        return None
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_RETRIED = ("attempt_failed", "compensation_attempt_failed")


def next_attempt_at(event: Described) -> float | None:
    """When the attempt after a failed one is due: an ``attempt_failed`` is recorded as
    its attempt fails, before the retry wait of ``delay`` seconds (None for one written
    by an earlier release, with the next attempt's start)."""
    delay = (event.detail or {}).get("delay")
    if event.kind not in _RETRIED or not isinstance(delay, int | float):
        return None
    return event.at + float(delay)


def attempt_failed_text(event: Described) -> str:
    """``attempt 1 failed: E; next attempt at T`` (what ``saga show`` and the console say
    of a step waiting to retry, and the history of its failure)."""
    undo = "compensation " if event.kind == "compensation_attempt_failed" else ""
    text = f"{undo}attempt {event.attempt} failed: {(event.detail or {}).get('error')}"
    due = next_attempt_at(event)
    return text if due is None else f"{text}; next attempt at {iso_time(due)}"


def _failed_text(event: Described) -> str:
    detail = event.detail or {}
    marked = detail.get("marked_by")
    if marked is None:
        return f"step {event.step} failed: {detail.get('error') or detail.get('reason')}"
    return f"step {event.step} recorded as not done by {marked}: {detail.get('reason')}"


def describe_event(event: Described) -> str:
    """An event as one line of plain English."""
    detail = event.detail or {}
    texts = _texts(event, detail)
    if event.kind in texts:
        return texts[event.kind]()
    if event.kind.startswith("saga_"):
        reason = detail.get("reason")
        return f"saga {event.kind[5:]}" + (f" ({reason})" if reason else "")
    return f"{event.kind} {detail}" if detail else event.kind


def _texts(event: Described, detail: Mapping[str, Any]) -> dict[str, Callable[[], str]]:
    """How each kind of event is told, made only when asked for (a lambda each)."""
    step, attempt = event.step, event.attempt
    error = detail.get("error")
    return {
        "saga_started": lambda: "saga started",
        "step_started": lambda: f"step {step} started (attempt {attempt})",
        "attempt_failed": lambda: f"step {step} {attempt_failed_text(event)}",
        "step_succeeded": lambda: f"step {step} succeeded (attempt {attempt})",
        "step_failed": lambda: _failed_text(event),
        "step_reset": lambda: (
            f"step {step} set to run again (retry from step {detail.get('from_step')}); "
            f"it was {detail.get('was')}"
        ),
        "step_in_doubt": lambda: (
            f"step {step} given up, outcome unknown (it may have acted): {error}"
        ),
        "compensation_started": lambda: f"compensating step {step} (attempt {attempt})",
        "compensation_attempt_failed": lambda: (
            f"compensation of step {step} attempt {attempt} failed: {error}"
        ),
        "compensation_done": lambda: _compensated_text(event),
        "result_mismatch": lambda: (
            f"compensation of step {step} given its result as stored JSON: {error}"
        ),
        "compensation_failed": lambda: f"compensation of step {step} failed: {error}",
        "lease_claimed": lambda: _claim_text(event),
        "operator_action": lambda: _operator_text(event),
        "recovery_refused": lambda: f"recovery by {detail.get('owner')} refused: {error}",
        "retry_scheduled": lambda: (
            f"{'compensation of ' if detail.get('compensating') else ''}step {step} attempt"
            f" {attempt} failed: {error}; retrying in {detail.get('delay')}s"
        ),
        "lease_lost": lambda: f"lease lost to another process (epoch {event.epoch})",
        "lease_released": lambda: (
            f"lease handed back ({detail.get('why', 'released')}): any process may take it"
        ),
    }


def _compensated_text(event: Described) -> str:
    detail = event.detail or {}
    if detail.get("marked_by"):
        return (
            f"step {event.step} marked compensated by {detail['marked_by']}: {detail.get('reason')}"
        )
    if detail.get("reason"):
        return f"step {event.step} compensated ({detail['reason']})"
    if "result" in detail:
        return f"step {event.step} compensated, returning {_short_json(detail['result'])}"
    if detail.get("result_not_kept"):
        return (
            f"step {event.step} compensated; its result was not kept: {detail['result_not_kept']}"
        )
    return f"step {event.step} compensated"


SHOWN_RESULT = 200
"""Characters of a compensation's result shown in its history line (``--json`` has it all)."""


def _short_json(value: object) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= SHOWN_RESULT else text[: SHOWN_RESULT - 3] + "..."


def _claim_text(event: Described) -> str:
    detail = event.detail or {}
    why = f" to {detail['why']}" if detail.get("why") else ""
    # An operator's claim (``saga recover``) names the person as well as the process.
    who = f"by {detail['by']}@{detail.get('host', '?')}, " if detail.get("by") else ""
    return f"lease claimed by {detail.get('owner', '?')}{why} ({who}epoch {event.epoch})"


def _operator_text(event: Described) -> str:
    detail = dict(event.detail or {})
    who = f"{detail.pop('by', '?')}@{detail.pop('host', '?')}"
    action = detail.pop("action", "?")
    owner = detail.pop("owner", None)
    extra = "".join(f", {key} {value!r}" for key, value in sorted(detail.items()))
    claimed = f"as {owner}, " if owner else ""
    return f"operator {who}: {action}{extra} ({claimed}epoch {event.epoch})"


# Characters that must never reach a terminal as they are: controls (C0, DEL, C1: newlines
# that forge rows, ESC sequences), format characters (bidi overrides, zero-width ones),
# line and paragraph separators, and lone surrogates (which cannot even be encoded).
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def printable(text: str) -> str:
    """``text`` made safe to print: every control or invisible formatting character
    is written as an escape, the way Python writes it in a string (``\\n``,
    ``\\x1b``, ``\\u202e``).

    Names, keys, errors and event details are stored text, often from a client
    of the application: printed as they are, a newline would forge a table row,
    an escape sequence would drive the operator's terminal and a bidi override
    would reorder what they read. Letters, symbols and emoji are left alone;
    ``--json`` carries the exact text.
    """
    if text.isprintable():  # the common case; isprintable() is False for every unsafe category
        return text
    return "".join(_escaped(char) if unsafe(char) else char for char in text)


def unsafe(char: str) -> bool:
    """Whether ``char`` must not reach a terminal as it is (see ``printable``)."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escaped(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")
