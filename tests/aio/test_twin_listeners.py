"""tests/integration/test_listeners.py run again against ``AsyncCoordinator``: the
same events, in the same order, told after the same records."""

from tests.integration.test_listeners import (
    test_a_context_manager_saga_tells_its_story_and_its_reentry,
    test_a_failing_saga_tells_its_whole_story_in_order,
    test_a_hanging_listener_never_holds_a_saga_and_drops_past_its_queue,
    test_a_raising_listener_is_logged_once_and_counted,
    test_a_step_whose_record_was_lost_is_never_told_succeeded,
    test_an_inline_listener_is_told_only_once_the_record_is_committed,
    test_claims_and_operator_actions_are_told,
    test_recovery_tells_its_claim,
    test_step_scope_is_current_inside_every_step_and_compensation,
)

__all__ = [
    "test_a_context_manager_saga_tells_its_story_and_its_reentry",
    "test_a_failing_saga_tells_its_whole_story_in_order",
    "test_a_hanging_listener_never_holds_a_saga_and_drops_past_its_queue",
    "test_a_raising_listener_is_logged_once_and_counted",
    "test_a_step_whose_record_was_lost_is_never_told_succeeded",
    "test_an_inline_listener_is_told_only_once_the_record_is_committed",
    "test_claims_and_operator_actions_are_told",
    "test_recovery_tells_its_claim",
    "test_step_scope_is_current_inside_every_step_and_compensation",
]
