"""tests/integration/test_tracing.py run again against ``AsyncCoordinator``: sync steps
run in worker threads, where the step's span must still be current."""

from tests.integration.test_tracing import (
    exported,
    test_a_saga_that_retries_fails_and_compensates_is_one_tree_under_its_caller,
    test_a_trace_goes_on_in_the_process_that_recovers_after_a_sigkill,
)

__all__ = [
    "exported",  # the module's fixture
    "test_a_saga_that_retries_fails_and_compensates_is_one_tree_under_its_caller",
    "test_a_trace_goes_on_in_the_process_that_recovers_after_a_sigkill",
]
