"""RetryPolicy: validation, decisions, and the tenacity loops it builds."""

from __future__ import annotations

import asyncio

import pytest
import tenacity

from saga import ConfigurationError, LeaseLostError, PayloadError, RetryPolicy, is_transient
from saga._internal.policy import (
    DEFAULT_COMPENSATION_RETRY,
    DEFAULT_STEP_RETRY,
    INLINE_COMPENSATION_WAIT,
    STORE_RETRY,
    RetryOn,
    describe_retry_on,
)

FAST = {"initial_delay": 0.0, "jitter": 0.0}


class Flaky:
    """Raises ``error`` for the first ``failures`` calls, then returns the call count."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return self.calls


def run(policy: RetryPolicy, action: Flaky, attempts_used: int = 0) -> list[float]:
    """Drive ``action`` through ``policy.retrying``; return the sleeps it asked for."""
    sleeps: list[float] = []
    for attempt in policy.retrying(attempts_used=attempts_used, sleep=sleeps.append):
        with attempt:
            action()
    return sleeps


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"initial_delay": -0.1},
        {"max_delay": -1.0},
        {"jitter": 1.5},
        {"jitter": -0.1},
    ],
)
def test_invalid_policies_are_refused(options: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**options)  # type: ignore[arg-type]


def test_allows_counts_the_first_try() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.allows(n) for n in (1, 2, 3, 4)] == [True, True, True, False]


def test_unbounded_policy_allows_every_attempt() -> None:
    assert RetryPolicy(max_attempts=None).allows(10_000)


def test_retries_only_the_listed_errors() -> None:
    policy = RetryPolicy(retry_on=(ConnectionError,))
    assert policy.retries(ConnectionResetError())
    assert not policy.retries(ValueError())


def test_lease_lost_and_payload_errors_are_never_retried() -> None:
    policy = RetryPolicy(retry_on=(Exception,))
    assert not policy.retries(LeaseLostError("s", 1))
    assert not policy.retries(PayloadError("input", "too big"))


def test_defaults() -> None:
    assert DEFAULT_STEP_RETRY.max_attempts == 3
    assert DEFAULT_STEP_RETRY.retries(TimeoutError())
    assert not DEFAULT_STEP_RETRY.retries(ValueError())
    assert DEFAULT_COMPENSATION_RETRY.max_attempts == 20
    assert DEFAULT_COMPENSATION_RETRY.retries(ValueError())
    assert STORE_RETRY.max_attempts is None
    assert STORE_RETRY.max_elapsed == 30.0


def test_retrying_stops_after_max_attempts_and_reraises() -> None:
    action = Flaky(failures=10)
    with pytest.raises(ConnectionError, match="failure 3"):
        run(RetryPolicy(max_attempts=3, **FAST), action)
    assert action.calls == 3


def test_retrying_succeeds_within_the_budget() -> None:
    action = Flaky(failures=2)
    run(RetryPolicy(max_attempts=3, **FAST), action)
    assert action.calls == 3


def test_attempts_used_before_a_crash_count_against_the_budget() -> None:
    action = Flaky(failures=10)
    with pytest.raises(ConnectionError):
        run(RetryPolicy(max_attempts=5, **FAST), action, attempts_used=3)
    assert action.calls == 2


def test_a_spent_budget_still_allows_the_attempt_being_resumed() -> None:
    action = Flaky(failures=10)
    with pytest.raises(ConnectionError):
        run(RetryPolicy(max_attempts=3, **FAST), action, attempts_used=7)
    assert action.calls == 1


def test_unlisted_error_is_raised_at_once() -> None:
    action = Flaky(failures=1, error=KeyError)
    with pytest.raises(KeyError):
        run(RetryPolicy(max_attempts=5, **FAST), action)
    assert action.calls == 1


def test_delay_grows_exponentially_up_to_max_delay() -> None:
    policy = RetryPolicy(initial_delay=0.5, multiplier=2.0, max_delay=3.0, jitter=0.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_stays_within_its_fraction() -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=1.0, max_delay=1.0, jitter=0.2)
    delays = [policy.delay(1) for _ in range(500)]
    assert all(0.8 <= d <= 1.2 for d in delays)
    assert len(set(delays)) > 1


def test_full_jitter_never_goes_negative() -> None:
    policy = RetryPolicy(initial_delay=1.0, jitter=1.0)
    assert all(policy.delay(1) >= 0.0 for _ in range(500))


def test_backoff_is_numbered_across_crashes() -> None:
    policy = RetryPolicy(max_attempts=6, initial_delay=1.0, max_delay=100.0, jitter=0.0)
    sleeps = run(policy, Flaky(failures=2), attempts_used=2)
    assert sleeps == [policy.delay(3), policy.delay(4)] == [4.0, 8.0]


def test_max_elapsed_stops_an_unbounded_policy() -> None:
    policy = RetryPolicy(max_attempts=None, max_elapsed=0.0, **FAST)
    action = Flaky(failures=100)
    with pytest.raises(ConnectionError):
        run(policy, action)
    assert action.calls == 1


def test_async_retrying_follows_the_same_policy() -> None:
    action = Flaky(failures=2)

    async def drive() -> None:
        async for attempt in RetryPolicy(max_attempts=3, **FAST).async_retrying():
            with attempt:
                action()

    asyncio.run(drive())
    assert action.calls == 3


def _judge(error: BaseException) -> bool:
    return True


class _Judge:
    def __call__(self, error: BaseException) -> bool:
        return True


@pytest.mark.parametrize(
    ("retry_on", "described"),
    [
        (is_transient, "transient errors (default)"),
        ((ConnectionError, PayloadError), "ConnectionError, saga.PayloadError"),
        (TimeoutError, "TimeoutError"),
        ((), "no error"),
        (_judge, "predicate tests.unit.test_policy:_judge"),
        (_Judge(), "predicate tests.unit.test_policy:_Judge object"),
        (
            tenacity.retry_if_exception_type(OSError) | tenacity.retry_always,
            "tenacity retry_any(retry_if_exception_type(OSError), retry_always)",
        ),
        (
            tenacity.retry_if_exception(_judge),
            "tenacity retry_if_exception(tests.unit.test_policy:_judge)",
        ),
        (tenacity.retry_if_exception_message(match="again"), "tenacity retry_if_exception_message"),
        (tenacity.retry_always, "tenacity retry_always"),
    ],
)
def test_retry_on_is_described_in_a_few_words(retry_on: RetryOn, described: str) -> None:
    assert describe_retry_on(retry_on) == described


def test_a_long_description_is_cut_and_says_so() -> None:
    described = describe_retry_on((ConnectionError,) * 20)
    assert len(described) == 80
    assert described.endswith("...")


def test_the_default_compensation_budget_outlasts_an_outage_of_minutes() -> None:
    """Issue 29: 20 attempts, 0.5 s doubling to a 60 s cap, about 13 minutes in all, so
    a participant's deploy or failover does not turn an unwinding saga ``failed``."""
    policy = DEFAULT_COMPENSATION_RETRY
    assert policy.max_attempts == 20
    assert policy.retries(ConnectionError())
    assert policy.retries(ValueError())
    assert policy.schedule() == (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0) + (60.0,) * 12
    assert sum(policy.schedule()) == 783.5  # 13 min 03.5 s before jitter
    assert policy.jitter == 0.1
    # The waits a caller's thread spends in place are the first three; the fourth
    # failure hands the saga back to a worker, whatever the jitter draws.
    in_place = [w for w in policy.schedule() if w * (1 + policy.jitter) <= INLINE_COMPENSATION_WAIT]
    assert in_place == [0.5, 1.0, 2.0]
    assert policy.schedule()[3] * (1 - policy.jitter) > INLINE_COMPENSATION_WAIT


def test_a_schedule_needs_an_end() -> None:
    with pytest.raises(ConfigurationError, match="max_attempts=None never ends"):
        RetryPolicy(max_attempts=None).schedule()
