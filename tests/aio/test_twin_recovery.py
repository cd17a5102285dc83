"""tests/integration/test_recovery.py, run again against ``AsyncCoordinator``."""

from tests.integration.test_recovery import (
    _clear_log,
    test_a_compensating_saga_keeps_compensating,
    test_recover_claims_expired_sagas_and_resumes_them_forward,
    test_recover_compensates_running_context_manager_sagas,
)

__all__ = [
    "_clear_log",  # the module's autouse fixture
    "test_a_compensating_saga_keeps_compensating",
    "test_recover_claims_expired_sagas_and_resumes_them_forward",
    "test_recover_compensates_running_context_manager_sagas",
]
