"""What the errors carry beyond their message, and that their old spellings still work."""

from __future__ import annotations

import pytest

from saga import OperationRefusedError, SagaBusyError


def test_a_busy_error_built_the_old_way_reads_the_same_and_knows_no_lease() -> None:
    error = SagaBusyError("saga-1", "saga saga-1 is held by a whose lease is still live")

    assert str(error) == "saga saga-1 is held by a whose lease is still live"
    assert error.saga_id == "saga-1"
    assert error.lease_remaining is None
    assert isinstance(error, OperationRefusedError)


def test_a_busy_error_says_the_lease_left_and_never_less_than_nothing() -> None:
    assert SagaBusyError("s", "busy", lease_remaining=2.5).lease_remaining == 2.5
    # The lease may run out between the refusal and the read of the clock.
    assert SagaBusyError("s", "busy", lease_remaining=-0.01).lease_remaining == 0.0


def test_the_lease_left_is_read_only() -> None:
    error = SagaBusyError("s", "busy", lease_remaining=1.0)
    with pytest.raises(AttributeError):
        error.lease_remaining = 5.0  # type: ignore[misc]
