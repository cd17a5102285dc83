"""The sans-I/O engine: every decision of a saga and every record that says so.

- :mod:`~.decisions`: what happens next (pure functions of definition and record);
- :mod:`~.records`: the step writes and events each decision commits;
- :mod:`~.effects`: what a flow asks its driver to do;
- :mod:`~.targets`: what a ``Call`` runs, named as data (the driver holds the code);
- :mod:`~.attempts`, :mod:`~.forward`, :mod:`~.unwind`:
  the flows, generators that yield effects and receive their results;
- :class:`~.core.Engine`: the flows and verbs of one coordinator.

Nothing under this package does I/O or imports threading, asyncio, a store or a
driver (``tests/unit/test_import_graph.py`` checks it): the thread driver and the
asyncio driver in :mod:`saga._internal.drivers` answer the effects.
"""

from saga._internal.engine.decisions import (
    Complete,
    Cursor,
    GiveUp,
    NextStep,
    Route,
    RunStep,
    SagaState,
    failed_step,
    next_forward,
    no_unwinding,
    past_pivot,
    pivot_in_doubt,
    pivot_may_have_acted,
    ready,
    recovery_route,
    stop_reason,
    undo_stack,
    unwound_status,
)
from saga._internal.engine.records import (
    MAX_ERROR_LENGTH,
    ahead,
    apply,
    attempt_failed,
    commit,
    describe,
    failed,
    in_completion_order,
    moved,
    not_run,
    nothing_to_undo,
    release,
    start,
    start_all,
    started_event,
    succeeded,
    template,
    undo_attempt_failed,
    undo_failed,
    undo_started,
    undone,
    with_step,
)

__all__ = [
    "MAX_ERROR_LENGTH",
    "Complete",
    "Cursor",
    "GiveUp",
    "NextStep",
    "Route",
    "RunStep",
    "SagaState",
    "ahead",
    "apply",
    "attempt_failed",
    "commit",
    "describe",
    "failed",
    "failed_step",
    "in_completion_order",
    "moved",
    "next_forward",
    "no_unwinding",
    "not_run",
    "nothing_to_undo",
    "past_pivot",
    "pivot_in_doubt",
    "pivot_may_have_acted",
    "ready",
    "recovery_route",
    "release",
    "start",
    "start_all",
    "started_event",
    "stop_reason",
    "succeeded",
    "template",
    "undo_attempt_failed",
    "undo_failed",
    "undo_stack",
    "undo_started",
    "undone",
    "unwound_status",
    "with_step",
]
