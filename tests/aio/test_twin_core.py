"""Behavioural tests of tests/integration, run again against ``AsyncCoordinator``.

Imported, not copied: collected here they get this package's ``coord`` and
``make_coord`` (the async facade of tests/aio/facade.py), so declarative
sagas run through ``await coord.run(...)`` and ``with coord.saga(...)``
blocks through ``async with`` and ``await s.step(...)``.
"""

from tests.integration.test_events import test_events_replay_to_the_stored_state_at_every_step
from tests.integration.test_forward import (
    test_current_step_inside_context_manager_steps,
    test_step_context_fields_inside_declarative_steps,
    test_steps_run_in_declaration_order_and_see_earlier_results,
)
from tests.integration.test_lease import (
    test_a_context_manager_saga_stops_after_a_takeover,
    test_after_a_takeover_the_old_executor_writes_nothing,
)
from tests.integration.test_pivot import (
    test_failure_after_the_pivot_compensates_nothing,
    test_retriable_steps_after_the_pivot_are_retried_until_they_succeed,
)
from tests.integration.test_retry import (
    test_a_failed_attempt_is_durable_before_the_retry_wait,
    test_max_attempts_counts_attempts_across_crashes,
    test_retry_on_errors_are_retried_and_each_attempt_is_recorded,
)
from tests.integration.test_unwind import (
    test_compensation_failing_for_good_leaves_the_saga_failed,
    test_context_manager_block_failure_compensates_newest_first,
    test_context_manager_failing_step_is_compensated_with_no_result,
    test_failure_compensates_every_started_step_newest_first,
)
from tests.integration.test_write_protocol import (
    test_context_manager_step_start_is_durable_before_it_runs,
    test_step_start_and_attempt_are_durable_before_the_action_runs,
)

__all__ = [
    "test_a_context_manager_saga_stops_after_a_takeover",
    "test_a_failed_attempt_is_durable_before_the_retry_wait",
    "test_after_a_takeover_the_old_executor_writes_nothing",
    "test_compensation_failing_for_good_leaves_the_saga_failed",
    "test_context_manager_block_failure_compensates_newest_first",
    "test_context_manager_failing_step_is_compensated_with_no_result",
    "test_context_manager_step_start_is_durable_before_it_runs",
    "test_current_step_inside_context_manager_steps",
    "test_events_replay_to_the_stored_state_at_every_step",
    "test_failure_after_the_pivot_compensates_nothing",
    "test_failure_compensates_every_started_step_newest_first",
    "test_max_attempts_counts_attempts_across_crashes",
    "test_retriable_steps_after_the_pivot_are_retried_until_they_succeed",
    "test_retry_on_errors_are_retried_and_each_attempt_is_recorded",
    "test_step_context_fields_inside_declarative_steps",
    "test_step_start_and_attempt_are_durable_before_the_action_runs",
    "test_steps_run_in_declaration_order_and_see_earlier_results",
]
