"""tests/integration/test_idempotency.py, run again against ``AsyncCoordinator``."""

from tests.integration.test_idempotency import (
    _clear_ran,
    test_context_manager_completed_saga_re_entered_with_other_calls_is_refused,
    test_context_manager_same_key_continues_the_same_saga,
    test_same_key_on_an_interrupted_saga_finishes_it,
    test_same_key_returns_the_recorded_outcome_and_runs_nothing,
)

__all__ = [
    "_clear_ran",  # the module's autouse fixture
    "test_context_manager_completed_saga_re_entered_with_other_calls_is_refused",
    "test_context_manager_same_key_continues_the_same_saga",
    "test_same_key_on_an_interrupted_saga_finishes_it",
    "test_same_key_returns_the_recorded_outcome_and_runs_nothing",
]
