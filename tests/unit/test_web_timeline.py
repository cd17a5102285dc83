"""The web console's timeline layout, from events alone (no database, no browser)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from saga._internal.ports import EventRecord
from saga._internal.status import SagaStatus, StepKind, StepStatus
from saga._internal.views import SagaView, StepView
from saga.admin import timeline
from saga.web.timeline import UNKNOWN_LABEL, WIDTH, layout, svg


def view(status: SagaStatus = SagaStatus.COMPLETED) -> SagaView:
    return SagaView("id-1", "s", None, "declarative", status, None, None, None, 1, None,
                    0.0, 10.0, False, ())  # fmt: skip


def events(
    *rows: tuple[float, str, str | None, int | None, dict[str, Any] | None],
) -> list[EventRecord]:
    return [EventRecord(i, "id-1", at, kind, step, attempt, 1, detail)
            for i, (at, kind, step, attempt, detail) in enumerate(rows)]  # fmt: skip


def test_overlapping_steps_get_their_own_rows_and_the_next_reuses_the_first() -> None:
    history = events(
        (0.0, "step_started", "a", 1, None),
        (0.0, "step_started", "b", 1, None),
        (1.0, "step_succeeded", "a", 1, None),
        (2.0, "step_succeeded", "b", 1, None),
        (2.0, "step_started", "c", 1, None),
        (3.0, "step_succeeded", "c", 1, None),
    )
    lay = layout(view(), timeline(history), now=100.0, own_rows_up_to=0)  # packed rows
    rows = {bar.step: bar.row for bar in lay.bars}
    assert rows == {"a": 0, "b": 1, "c": 0}
    assert lay.rows["forward"] == 2


def test_a_failed_attempt_ends_when_it_stopped_running_not_after_the_wait() -> None:
    history = events(
        (0.0, "step_started", "pay", 1, None),
        (5.0, "attempt_failed", "pay", 1, {"error": "x", "took": 1.0}),
        (5.0, "step_started", "pay", 2, None),
        (6.0, "step_failed", "pay", 2, {"error": "x"}),
        (6.0, "saga_compensating", None, None, None),
        (7.0, "compensation_done", "pay", 1, {"reason": "nothing to undo"}),
    )
    lay = layout(view(SagaStatus.COMPENSATED), timeline(history), now=100.0)
    first, second, undo = lay.bars
    assert (first.start, first.end, first.outcome) == (0.0, 1.0, "failed")
    assert (second.start, second.end, second.outcome) == (5.0, 6.0, "failed")
    assert (undo.lane, undo.start, undo.outcome) == ("compensation", 7.0, "ok")
    assert lay.turn == 6.0
    drawn = svg(lay)
    assert drawn.count('class="gap"') == 1
    assert 'data-marker="turn"' in drawn


def test_an_attempt_nobody_closed_in_a_finished_saga_has_an_unknown_outcome() -> None:
    history = events((0.0, "step_started", "ship", 1, None), (2.0, "saga_failed", None, None, None))
    (bar,) = layout(view(SagaStatus.FAILED), timeline(history), now=100.0).bars
    assert (bar.end, bar.outcome) == (2.0, "unknown")


def test_each_step_gets_a_row_with_its_whole_name_beside_it() -> None:
    names = ("reserve_inventory", "charge_customer_card", "ship")
    rows = []
    for i, name in enumerate(names):
        rows += [
            (float(i), "step_started", name, 1, None),
            (i + 0.01, "step_succeeded", name, 1, None),
        ]
    history = events(*rows)
    lay = layout(view(), timeline(history), now=100.0)
    assert lay.named
    assert {bar.step: bar.row for bar in lay.bars} == {name: i for i, name in enumerate(names)}
    drawn = svg(lay)
    for name in names:  # whole, however short its bar (10 ms of a 2 s saga)
        assert f'data-step="{name}" data-lane="forward" x="8"' in drawn
        assert f">{name}</text></g>" in drawn
    assert "…" not in drawn
    assert int(re.search(r'<svg[^>]* width="(\d+)"', drawn).group(1)) >= WIDTH  # type: ignore[union-attr]


def test_a_stuck_step_says_its_outcome_is_unknown_and_its_marker_fits() -> None:
    history = events(
        (0.0, "step_started", "prepare", 1, None),
        (0.1, "step_succeeded", "prepare", 1, None),
        (0.2, "step_started", "hang", 1, None),
    )
    hanging = StepView("hang", 1, StepStatus.RUNNING, 1, None, None, StepKind.COMPENSATABLE,
                       False, 0, 0.2, None, None, None, None, None)  # fmt: skip
    stuck = dataclasses.replace(view(SagaStatus.RUNNING), lease_expires_at=30.2, steps=(hanging,))
    lay = layout(stuck, timeline(history), now=100.0)
    hang = next(bar for bar in lay.bars if bar.step == "hang")
    assert (hang.outcome, hang.end) == ("unknown", 30.2)  # drawn to the lease's end
    drawn = svg(lay)
    assert f">{UNKNOWN_LABEL}</text>" in drawn
    assert "not how long it ran" in drawn  # the tooltip says what the length means
    width = int(re.search(r'<svg[^>]* width="(\d+)"', drawn).group(1))  # type: ignore[union-attr]
    (cx,) = (float(c) for c in re.findall(r'class="unknown" cx="([\d.]+)"', drawn))
    assert cx + 7 <= width  # the "?" is inside the picture, not clipped at its edge
