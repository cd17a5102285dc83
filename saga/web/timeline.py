"""The saga page's timeline: bars worked out from the history, then drawn as SVG.

:func:`layout` is pure (events in, bars and markers out); :func:`svg` draws
them. Forward attempts go in the upper lane and compensation attempts in the
lower one; within a lane, steps that overlap in time (parallel steps) get rows
of their own. Every drawn element carries ``data-`` attributes (step, lane,
row, attempt, outcome) so that a reader, or a test, can tell what it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

from saga._internal.status import StepStatus
from saga._internal.views import SagaView
from saga.admin import IN_DOUBT, TimelineEntry, human_duration, is_stuck
from saga.web.markup import attr, text

Lane = Literal["forward", "compensation"]
_Scale = Callable[[float], float]

_OPENS: dict[str, Lane] = {"step_started": "forward", "compensation_started": "compensation"}
_CLOSES: dict[str, tuple[Lane, str]] = {
    "step_succeeded": ("forward", "ok"),
    "attempt_failed": ("forward", "failed"),
    "step_failed": ("forward", "failed"),
    "step_in_doubt": ("forward", "unknown"),
    "compensation_done": ("compensation", "ok"),
    "compensation_attempt_failed": ("compensation", "failed"),
    "compensation_failed": ("compensation", "failed"),
}


@dataclasses.dataclass(slots=True)
class Bar:
    """One attempt of a step (``lane`` forward) or of its compensation."""

    step: str
    lane: Lane
    attempt: int | None
    start: float
    end: float | None = None
    outcome: str = "running"  # ok, failed, unknown (given up in doubt), running
    row: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """What the timeline shows, in seconds from the saga's first event."""

    bars: tuple[Bar, ...]
    span: float
    turn: float | None  # when the saga turned to compensating
    unknown: tuple[str, ...]  # steps that may have acted, outcome never learnt
    rows: dict[Lane, int]
    named: bool = False  # one row per step, its name beside it (else packed rows)


OWN_ROWS = 24
"""Up to this many steps in a lane, each step gets a row of its own with its name
beside it, so that no name is cut; a longer saga packs steps that do not overlap in
time into shared rows (its page would otherwise be thousands of rows high)."""


def layout(
    view: SagaView, entries: Sequence[TimelineEntry], now: float, own_rows_up_to: int = OWN_ROWS
) -> Layout:
    """Bars for every attempt in ``entries``. An attempt nobody closed runs to ``now``
    in a live saga; in a stuck one, to when its lease ran out (nobody worked after)."""
    first = entries[0].event.at if entries else now
    bars, turn = _bars(entries)
    end = _end(view, entries, now, first)
    gone = is_stuck(view, now) or view.status.is_terminal
    for bar in bars:
        if bar.end is None:
            bar.end = max(bar.start, end)
            if gone:
                bar.outcome = "unknown"
    lanes = ([b for b in bars if b.lane == lane] for lane in ("forward", "compensation"))
    forward, compensation = lanes
    named = max(_steps(forward), _steps(compensation)) <= own_rows_up_to
    place = _own_rows if named else _pack
    rows: dict[Lane, int] = {"forward": place(forward), "compensation": place(compensation)}
    return Layout(tuple(bars), max(end, 1e-6), turn, _unknown(view, now), rows, named)


def _end(view: SagaView, entries: Sequence[TimelineEntry], now: float, first: float) -> float:
    last = entries[-1].offset if entries else 0.0
    if view.status.is_terminal:
        return last
    if is_stuck(view, now) and view.lease_expires_at is not None:
        return max(last, view.lease_expires_at - first)
    return max(last, now - first)


def _bars(entries: Sequence[TimelineEntry]) -> tuple[list[Bar], float | None]:
    bars: list[Bar] = []
    open_bars: dict[tuple[Lane, str], Bar] = {}
    turn = None
    for entry in entries:
        event = entry.event
        if event.kind == "saga_compensating" and turn is None:
            turn = entry.offset
        step = event.step
        if step is None:
            continue
        if event.kind in _OPENS:
            bar = Bar(step, _OPENS[event.kind], event.attempt, entry.offset)
            open_bars[(bar.lane, step)] = bar
            bars.append(bar)
        elif event.kind in _CLOSES:
            lane, outcome = _CLOSES[event.kind]
            found = open_bars.pop((lane, step), None)
            bar = found if found is not None else _point(bars, step, lane, entry)
            if bar.end is None or outcome == "unknown":
                bar.end, bar.outcome = _ended(bar, entry), outcome
    return bars, turn


def _ended(bar: Bar, entry: TimelineEntry) -> float:
    """When an attempt ended. A failed attempt is recorded as it fails; one recorded by
    an earlier release came with the next one's start, after the retry wait, and its
    ``took`` (how long it ran) separates the two."""
    took = (entry.event.detail or {}).get("took")
    if isinstance(took, int | float) and entry.event.kind.endswith("attempt_failed"):
        return min(entry.offset, bar.start + max(0.0, float(took)))
    return entry.offset


def _point(bars: list[Bar], step: str, lane: Lane, entry: TimelineEntry) -> Bar:
    """A close with no open attempt: a mark by an operator, or nothing to undo."""
    last = next((b for b in reversed(bars) if b.step == step and b.lane == lane), None)
    if last is not None and entry.event.kind in ("step_failed", "step_in_doubt"):
        return last  # the attempt's own close came first (attempt_failed)
    bar = Bar(step, lane, entry.event.attempt, entry.offset)
    bars.append(bar)
    return bar


def _steps(bars: list[Bar]) -> int:
    return len({bar.step for bar in bars})


def _own_rows(bars: list[Bar]) -> int:
    """Give each step a row of its own, in order of its first attempt; rows used."""
    row_of: dict[str, int] = {}
    for bar in bars:
        bar.row = row_of.setdefault(bar.step, len(row_of))
    return len(row_of)


def _pack(bars: list[Bar]) -> int:
    """Give each step the first row where its span overlaps no other step's; rows used."""
    spans: dict[str, list[float]] = {}
    for bar in bars:
        low, high = spans.setdefault(bar.step, [bar.start, bar.start])
        spans[bar.step] = [min(low, bar.start), max(high, bar.end or bar.start)]
    row_ends: list[float] = []
    row_of: dict[str, int] = {}
    for step, (low, high) in spans.items():  # in order of first start
        row = next((i for i, ends in enumerate(row_ends) if ends <= low), len(row_ends))
        if row == len(row_ends):
            row_ends.append(high)
        row_ends[row] = max(row_ends[row], high)
        row_of[step] = row
    for bar in bars:
        bar.row = row_of[bar.step]
    return len(row_ends)


def _unknown(view: SagaView, now: float) -> tuple[str, ...]:
    """Steps that may have acted with nobody knowing: given up in doubt, or left
    running (or compensating) by a process that is gone."""
    stuck = is_stuck(view, now) or view.status.is_terminal
    return tuple(
        s.name
        for s in view.steps
        if s.status is StepStatus.IN_DOUBT or (stuck and s.status in IN_DOUBT)
    )


# -- drawing ----------------------------------------------------------------------------------

MIN_BAR_WIDTH = 2.0
"""Every bar is drawn at least this wide (px), so that an attempt of a millisecond shows."""
WIDTH = 1360
"""The timeline's width (px): a 1400 px window's page, less its margins; narrower
windows scale it down (CSS), so it always spans the page."""
ROW, PAD, HEADING, RIGHT = 22, 8, 16, 48  # RIGHT: room past the last bar for "?" or "12 ms"
CHAR = 6.5  # px per character of the 11 px labels, to decide what fits where
UNKNOWN_LABEL = "outcome unknown: no word from the process after it started"
_Row = Callable[["Bar"], float]


def svg(lay: Layout) -> str:
    """The layout as an inline SVG element."""
    width = max(WIDTH, min(6000, 4 * len(lay.bars)))
    label = _label_width(lay)
    forward_top = PAD + HEADING
    comp_top = forward_top + max(1, lay.rows["forward"]) * ROW + 10 + HEADING
    height = comp_top + max(1, lay.rows["compensation"]) * ROW + PAD + 14
    scale = (width - label - RIGHT) / lay.span

    def x(offset: float) -> float:
        return label + offset * scale

    def y(bar: Bar) -> float:
        return (forward_top if bar.lane == "forward" else comp_top) + bar.row * ROW

    parts = _lane_headings(forward_top, comp_top, width)
    if lay.named:
        parts += _row_names(lay.bars, label, y)
    parts += _gaps(lay.bars, x, y)
    parts += [_bar(bar, x, y, lay, width) for bar in lay.bars]
    if lay.turn is not None:
        tx = x(lay.turn)
        parts.append(
            f'<line class="turn" data-marker="turn" x1="{tx:.1f}" x2="{tx:.1f}" y1="0" '
            f'y2="{height}"><title>turned to compensating</title></line>'
        )
    parts += _unknown_marks(lay, x, y)
    parts.append(_time_axis(label, width, height, lay.span))
    return (
        f'<svg class="timeline" id="timeline" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">{"".join(parts)}</svg>'
    )


def _lane_headings(forward_top: int, comp_top: int, width: int) -> list[str]:
    """The two lanes' names, and the line between them."""
    divider = comp_top - HEADING - 2
    return [
        f'<text class="lane-label" x="4" y="{forward_top - 4}">forward</text>',
        f'<text class="lane-label" x="4" y="{comp_top - 4}">compensation</text>',
        f'<line x1="4" x2="{width}" y1="{divider}" y2="{divider}" stroke="#e3e5ea"/>',
    ]


def _time_axis(label: int, width: int, height: int, span: float) -> str:
    """The time scale's two ends, under the lanes: 0 and the whole span."""
    return (
        f'<text class="lane-label" x="{label}" y="{height - 3}">0</text>'
        f'<text class="lane-label" x="{width - RIGHT - 60}" y="{height - 3}">'
        f"{text(human_duration(span))}</text>"
    )


def _label_width(lay: Layout) -> int:
    """The left column: lane names, and each step's name when steps have rows of their own
    (as wide as the longest name, within reason)."""
    if not lay.named:
        return 110
    longest = max((len(bar.step) for bar in lay.bars), default=0)
    return int(min(260, max(110, 12 + longest * CHAR)))


def _row_names(bars: Sequence[Bar], label: int, y: _Row) -> list[str]:
    """Each step's name at the start of its row (a name too long for the column is cut,
    and whole in its tooltip)."""
    names, seen = [], set()
    room = int((label - 12) / CHAR)
    for bar in bars:
        if (bar.lane, bar.step) in seen:
            continue
        seen.add((bar.lane, bar.step))
        shown = bar.step if len(bar.step) <= room else bar.step[: room - 1] + "…"
        names.append(
            f"<g><title>{text(bar.step)}</title>"
            f'<text class="row-label" data-step="{attr(bar.step)}" data-lane="{bar.lane}" '
            f'x="8" y="{y(bar) + 15:.1f}">{text(shown)}</text></g>'
        )
    return names


def _bar(bar: Bar, x: _Scale, y: _Row, lay: Layout, width: int) -> str:
    left, right = x(bar.start), x(bar.end if bar.end is not None else bar.start)
    right = max(right, left + MIN_BAR_WIDTH)
    lane = "comp " if bar.lane == "compensation" else ""
    return (
        f'<rect class="bar {lane}{bar.outcome}" data-step="{attr(bar.step)}" '
        f'data-lane="{bar.lane}" data-row="{bar.row}" data-attempt="{attr(bar.attempt)}" '
        f'data-outcome="{bar.outcome}" data-start="{bar.start:.6f}" x="{left:.1f}" '
        f'y="{y(bar) + 3:.1f}" width="{right - left:.1f}" height="{ROW - 6}">'
        f"<title>{text(_tip(bar))}</title></rect>"
        f"{_label(bar, x, y(bar), lay, width)}"
    )


def _tip(bar: Bar) -> str:
    if bar.outcome == "unknown":
        return (
            f"{bar.step} {bar.lane} attempt {bar.attempt}: outcome unknown; the process went "
            "silent after it started (drawn to when its lease ran out, not how long it ran)"
        )
    tip = f"{bar.step} {bar.lane} attempt {bar.attempt}: {bar.outcome}"
    if bar.end is not None:
        tip += f", {human_duration(bar.end - bar.start)}"
    return tip


def _label(bar: Bar, x: _Scale, top: float, lay: Layout, width: int) -> str:
    """What a bar says on itself or beside it. In rows of their own, steps are named at
    the left, so only an unknown outcome is spelled out; in packed rows, the step's name
    goes on the bar when it fits, else beside it where the row is free."""
    left = x(bar.start)
    right = max(x(bar.end if bar.end is not None else bar.start), left + MIN_BAR_WIDTH)
    if lay.named and bar.outcome != "unknown":
        return _took(bar, right, top, lay)
    words = UNKNOWN_LABEL if bar.outcome == "unknown" else bar.step
    need = len(words) * CHAR + 6
    if right - left >= need:  # an unknown outcome's bar is an outline: dark text on white
        return _text_at(left + 3, top, words, inside=bar.outcome != "unknown")
    if _free_until(lay.bars, bar, x, width) - right >= need:
        return _text_at(right + 4, top, words, inside=False)
    if bar.outcome == "unknown" and left - _label_width(lay) >= need:
        return _text_at(left - need, top, words, inside=False)
    room = int((right - left - 6) / CHAR)
    cut = words[: room - 1] + "…"
    return _text_at(left + 3, top, cut, inside=bar.outcome != "unknown") if room >= 3 else ""


def _took(bar: Bar, right: float, top: float, lay: Layout) -> str:
    """Beside a step's last attempt in its own row, how long that attempt took (a sliver of
    a compensation still says what it was)."""
    if bar.end is None or bar.outcome == "running":
        return ""
    last = next(b for b in reversed(lay.bars) if b.step == bar.step and b.lane == bar.lane)
    if last is not bar:
        return ""
    return _text_at(right + 4, top, human_duration(bar.end - bar.start), inside=False)


def _free_until(bars: Sequence[Bar], bar: Bar, x: _Scale, width: int) -> float:
    """Where the row is taken again after ``bar`` (px): the next bar in it, or the end."""
    ended = bar.end if bar.end is not None else bar.start
    later = [
        b.start
        for b in bars
        if b is not bar and b.lane == bar.lane and b.row == bar.row and b.start >= ended
    ]
    return x(min(later)) if later else width - RIGHT


def _text_at(left: float, top: float, words: str, *, inside: bool) -> str:
    """A label at ``left``: white on a coloured bar, dark beside one."""
    css = "bar-label" if inside else "bar-label beside"
    return (
        f'<text class="{css}" x="{left:.1f}" y="{top + 15:.1f}" '
        f'pointer-events="none">{text(words)}</text>'
    )


def _gaps(bars: Sequence[Bar], x: _Scale, y: _Row) -> list[str]:
    """The wait between a failed attempt and the next one of the same step (the retry delay)."""
    lines = []
    previous: dict[tuple[Lane, str], Bar] = {}
    for bar in bars:
        before = previous.get((bar.lane, bar.step))
        if before is not None and before.outcome == "failed" and before.end is not None:
            mid = y(bar) + ROW / 2
            lines.append(
                f'<line class="gap" data-step="{attr(bar.step)}" data-lane="{bar.lane}" '
                f'x1="{x(before.end):.1f}" x2="{x(bar.start):.1f}" y1="{mid:.1f}" y2="{mid:.1f}">'
                f"<title>retry wait {text(human_duration(bar.start - before.end))}</title></line>"
            )
        previous[(bar.lane, bar.step)] = bar
    return lines


def _unknown_marks(lay: Layout, x: _Scale, y: _Row) -> list[str]:
    marks = []
    for name in lay.unknown:
        bar = next((b for b in reversed(lay.bars) if b.step == name), None)
        if bar is None:
            continue
        cx, cy = x(bar.end if bar.end is not None else bar.start) + 8, y(bar) + ROW / 2
        marks.append(
            f'<g class="marker" data-marker="outcome-unknown" data-step="{attr(name)}" '
            f'data-lane="{bar.lane}"><circle class="unknown" cx="{cx:.1f}" cy="{cy:.1f}" r="7"/>'
            f'<text x="{cx - 3:.1f}" y="{cy + 4:.1f}" font-size="11" fill="#c01c28">?</text>'
            f"<title>outcome unknown: step {text(name)} may have acted</title></g>"
        )
    return marks
