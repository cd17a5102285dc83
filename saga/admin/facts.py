"""What an operator judges a saga by, and how times are written for them.

The step in flight, the pivot, the lease; timestamps and durations as the
table, the JSON and the demo all show them.
"""

from __future__ import annotations

from saga._internal import engine
from saga._internal.status import SagaStatus, StepKind, StepStatus
from saga._internal.views import SagaView, StepView
from saga._internal.wording import iso_time as iso_time  # one wording of times, for events too

FINISHED = (SagaStatus.COMPLETED, SagaStatus.COMPENSATED, SagaStatus.CANCELLED)
IN_DOUBT = (StepStatus.RUNNING, StepStatus.IN_DOUBT, StepStatus.COMPENSATING)


def current_step(view: SagaView) -> StepView | None:
    """The step in flight (running or compensating), else the most recent one."""
    in_flight = [s for s in view.steps if s.status in IN_DOUBT]
    if in_flight:
        return in_flight[-1]
    return view.steps[-1] if view.steps else None


def past_pivot(view: SagaView) -> bool:
    """Whether its pivot succeeded: the engine's own rule, read off the view."""
    return engine.past_pivot(view)


def lease_left(view: SagaView, now: float) -> float | None:
    """Seconds left on an unfinished saga's lease (negative once expired)."""
    if view.status.is_terminal or view.lease_expires_at is None:
        return None
    return view.lease_expires_at - now


def is_stuck(view: SagaView, now: float) -> bool:
    """Running or compensating with an expired lease: its process is gone."""
    left = lease_left(view, now)
    return left is not None and left < 0


def human_duration(seconds: float | None) -> str:
    """``850 ms``, ``4.2 s``, ``3m 05s``, ``2h 10m``, ``3d 4h``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def json_value(value: SagaStatus | StepStatus | StepKind | None) -> str | None:
    """An enum as it appears in JSON and log lines."""
    return None if value is None else value.value


def rounded(value: float | None) -> float | None:
    """Seconds as JSON carries them: to the microsecond."""
    return None if value is None else round(value, 6)
