"""tests/integration/test_listener_isolation.py run again against ``AsyncCoordinator``:
there the scopes are entered on the event loop around awaited steps and worker-thread
steps, and the events told from the loop; a broken listener changes no outcome."""

from tests.integration.test_listener_isolation import (
    test_a_broken_scope_around_a_context_manager_step_changes_nothing,
    test_a_listener_raising_in_any_hook_changes_no_outcome,
    test_a_queued_listener_that_raises_changes_no_outcome_either,
)

__all__ = [
    "test_a_broken_scope_around_a_context_manager_step_changes_nothing",
    "test_a_listener_raising_in_any_hook_changes_no_outcome",
    "test_a_queued_listener_that_raises_changes_no_outcome_either",
]
