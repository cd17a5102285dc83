"""tests/integration/test_operations.py and test_recovery.py, run again against
``AsyncCoordinator``: operator actions, cancel, and recovery after a crash."""

from tests.integration.test_operations import (
    _clear_log,
    test_cancel_stops_a_running_context_manager_saga_at_its_next_step,
    test_cancel_stops_a_running_saga_at_its_next_step_boundary,
    test_compensate_unwinds_a_stuck_saga_now,
    test_resume_carries_a_stuck_saga_forward_now,
)

__all__ = [
    "_clear_log",  # the module's autouse fixture
    "test_cancel_stops_a_running_context_manager_saga_at_its_next_step",
    "test_cancel_stops_a_running_saga_at_its_next_step_boundary",
    "test_compensate_unwinds_a_stuck_saga_now",
    "test_resume_carries_a_stuck_saga_forward_now",
]
