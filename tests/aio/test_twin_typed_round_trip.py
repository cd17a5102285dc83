"""tests/integration/test_typed_round_trip.py run again against ``AsyncCoordinator``:
a result reads back as it was written, and one that no longer fits its type never
stops an unwinding, when steps and compensations run on an event loop."""

from tests.integration.test_typed_round_trip import (
    fresh_log,
    test_a_model_reads_back_from_its_own_record,
    test_a_raising_validator_breaks_neither_views_nor_the_unwinding,
    test_after_a_type_changed_in_a_deploy_an_older_saga_still_unwinds,
)

__all__ = [
    "fresh_log",
    "test_a_model_reads_back_from_its_own_record",
    "test_a_raising_validator_breaks_neither_views_nor_the_unwinding",
    "test_after_a_type_changed_in_a_deploy_an_older_saga_still_unwinds",
]
