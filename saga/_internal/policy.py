"""Retry policies, carried out by tenacity.

A :class:`RetryPolicy` is a plain description; :meth:`RetryPolicy.retrying`
turns it into a ``tenacity.Retrying`` for the attempts that remain. Attempts
are persisted by the coordinator, so ``max_attempts`` counts attempts across
crashes: a process that resumes a step after two attempts only gets
``max_attempts - 2`` more.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable

import tenacity
from tenacity.wait import wait_base

from saga._internal.errors import (
    ConfigurationError,
    DefinitionError,
    LeaseLostError,
    PayloadError,
    StorageUnavailableError,
)
from saga._internal.transient import is_transient

_NEVER_RETRIED: tuple[type[BaseException], ...] = (LeaseLostError, PayloadError)

RetryOn = (
    type[BaseException]
    | tuple[type[BaseException], ...]
    | Callable[[BaseException], bool]
    | tenacity.retry_base
)
"""Which errors are retried: classes (an instance of one is), a predicate taking the
error, or one of tenacity's ``retry_if_*`` objects."""


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, how fast and on which errors to retry an action.

    ``max_attempts`` counts the first try; ``None`` retries until success
    (the default for retriable steps). The delay before attempt n+1 is
    ``min(max_delay, initial_delay * multiplier ** (n - 1))``, spread by
    ``jitter`` (a fraction: 0.2 means +/-20 %). ``retry_on`` says which errors
    are retried: exception classes, a predicate ``error -> bool``, or a tenacity
    ``retry_if_*`` object; by default :func:`saga.is_transient` (a lost,
    refused or timed-out connection, whichever driver raised it).
    """

    max_attempts: int | None = 3
    initial_delay: float = 0.1
    max_delay: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.1
    retry_on: RetryOn = is_transient
    max_elapsed: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigurationError("RetryPolicy.max_attempts must be at least 1 (or None)")
        if self.initial_delay < 0 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise ConfigurationError(
                "RetryPolicy delays must be >= 0 and jitter a fraction between 0 and 1"
            )

    def allows(self, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based) may still run."""
        return self.max_attempts is None or attempt <= self.max_attempts

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is worth another attempt under this policy."""
        if isinstance(error, _NEVER_RETRIED):
            return False
        rule = self.retry_on
        if isinstance(rule, type | tuple):
            return isinstance(error, rule)
        if isinstance(rule, tenacity.retry_base):
            # A tenacity rule reads the outcome of a call: this error, as one.
            state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
            state.set_exception((type(error), error, error.__traceback__))
            return bool(rule(state))
        return bool(rule(error))

    def retrying(
        self, attempts_used: int = 0, sleep: Callable[[float], None] = time.sleep
    ) -> tenacity.Retrying:
        """A tenacity loop for the attempts left after ``attempts_used``."""
        stop, wait, retry = self._tenacity_args(attempts_used)
        return tenacity.Retrying(sleep=sleep, reraise=True, stop=stop, wait=wait, retry=retry)

    def async_retrying(self, attempts_used: int = 0) -> tenacity.AsyncRetrying:
        """The asyncio twin of :meth:`retrying`."""
        stop, wait, retry = self._tenacity_args(attempts_used)
        return tenacity.AsyncRetrying(reraise=True, stop=stop, wait=wait, retry=retry)

    def delay(self, attempt: int) -> float:
        """Delay after attempt number ``attempt`` failed, jitter included."""
        base = self._base_delay(attempt)
        spread = base * self.jitter
        return max(0.0, base + random.uniform(-spread, spread))

    def schedule(self) -> tuple[float, ...]:
        """The waits (s) between attempts, before jitter: one fewer than ``max_attempts``;
        their sum is how long the policy outlasts an error that does not go away."""
        if self.max_attempts is None:
            raise ConfigurationError("RetryPolicy.schedule: max_attempts=None never ends")
        return tuple(self._base_delay(attempt) for attempt in range(1, self.max_attempts))

    def _base_delay(self, attempt: int) -> float:
        return min(self.max_delay, self.initial_delay * self.multiplier ** max(0, attempt - 1))

    def _tenacity_args(
        self, attempts_used: int
    ) -> tuple[tenacity.stop.stop_base, wait_base, tenacity.retry_base]:
        stop: tenacity.stop.stop_base = tenacity.stop_never
        if self.max_attempts is not None:
            stop = tenacity.stop_after_attempt(max(1, self.max_attempts - attempts_used))
        if self.max_elapsed is not None:
            stop = stop | tenacity.stop_after_delay(self.max_elapsed)
        return stop, _Backoff(self, attempts_used), tenacity.retry_if_exception(self.retries)


def describe_retry_on(rule: RetryOn) -> str:
    """Which errors ``rule`` retries, in a few words for an operator (``saga show``)."""
    if rule is is_transient:
        return "transient errors (default)"
    if isinstance(rule, type | tuple):
        return _short(_error_names(rule) or "no error")
    if isinstance(rule, tenacity.retry_base):
        return _short(f"tenacity {_tenacity_rule(rule)}")
    return _short(f"predicate {_function_name(rule)}")


def _error_names(classes: type[BaseException] | tuple[type[BaseException], ...]) -> str:
    # Builtins by their bare name, as Python's own messages write them; others qualified.
    return ", ".join(
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        for cls in (classes if isinstance(classes, tuple) else (classes,))
    )


def _function_name(fn: object) -> str:
    """``module:qualname``, the way saga names functions (a callable object: its class)."""
    name = getattr(fn, "__qualname__", None) or f"{type(fn).__qualname__} object"
    return f"{getattr(fn, '__module__', None) or type(fn).__module__}:{name}"


def _tenacity_rule(rule: tenacity.retry_base) -> str:
    """``retry_if_exception_type(ConnectionError)``: tenacity's rules have no useful repr,
    so the class name is written with what it holds (types, predicate, or inner rules)."""
    name = type(rule).__name__.lstrip("_")
    inner = getattr(rule, "retries", None)  # retry_any, retry_all (also made by | and &)
    classes = getattr(rule, "exception_types", getattr(rule, "exception_cause_types", None))
    predicate = getattr(rule, "predicate", None)
    if getattr(predicate, "__module__", "").startswith("tenacity"):
        predicate = None  # tenacity's own (retry_if_exception_message's): its name says it
    if inner is not None:
        return f"{name}({', '.join(_tenacity_rule(r) for r in inner)})"
    if classes is not None:
        return f"{name}({_error_names(classes)})"
    if predicate is not None:
        return f"{name}({_function_name(predicate)})"
    return name


def _short(text: str, width: int = 80) -> str:
    """One short field: a long list of classes is cut, and says so."""
    return text if len(text) <= width else text[: width - 3] + "..."


class _Backoff(wait_base):
    """Exponential backoff with proportional jitter, numbered across crashes."""

    def __init__(self, policy: RetryPolicy, attempts_used: int) -> None:
        self.policy = policy
        self.attempts_used = attempts_used

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self.policy.delay(self.attempts_used + retry_state.attempt_number)


DEFAULT_STEP_RETRY = RetryPolicy()
"""Steps: three attempts, retried only on transient errors (``saga.is_transient``)."""

DEFAULT_RETRIABLE_RETRY = RetryPolicy(max_attempts=None, max_delay=30.0, retry_on=(Exception,))
"""Retriable steps (after a pivot): retried on any error until they succeed."""

DEFAULT_COMPENSATION_RETRY = RetryPolicy(
    max_attempts=20, initial_delay=0.5, max_delay=60.0, jitter=0.1, retry_on=(Exception,)
)
"""Compensations: 20 attempts on any error, 0.5 s doubling to at most 60 s between two
(+/-10 % jitter), about 13 minutes in all (:meth:`RetryPolicy.schedule`); then the saga
is ``failed`` and needs a person.

Why so long: an undo is owed, and what makes it fail is most often the participant
being away for a while (a deploy, a failover, a network partition, a rate limit), which
a few seconds of retries never outlast; a ``failed`` saga pages someone who can only
retry it once the participant is back. The first attempts (the waits up to
:data:`INLINE_COMPENSATION_WAIT`: 0.5, 1 and 2 s) are made in place, in the caller's
thread; after the fourth the saga is handed back (``SagaHandedBack``: it is
``compensating``, nothing failed for good) and a worker (``saga worker``,
``coord.recover()``) makes each next attempt when it is due. A shorter budget, per
compensation (``@step.compensation(retry=...)``) or per coordinator
(``Coordinator(compensation_retry=...)``), suits a participant that fails fast for good
(docs/concepts.md, "How long a compensation keeps trying")."""

INLINE_COMPENSATION_WAIT = 3.0
"""The longest wait (s) before a compensation's next attempt that the process unwinding
spends in place (in the caller's thread, for ``coord.run`` or a ``with`` block). A
longer one hands the saga back instead: the failed attempt is recorded, the lease is
released until the next attempt is due, and ``SagaHandedBack`` is raised; a worker
(``saga worker``, ``coord.recover()``) claims the saga when that time comes, and the
stored attempt count carries the backoff on."""

STORE_RETRY = RetryPolicy(
    max_attempts=None,
    initial_delay=0.05,
    max_delay=2.0,
    retry_on=(StorageUnavailableError,),
    max_elapsed=30.0,
)
"""Store calls after a lost connection: retried for up to 30 seconds."""


def check_step_settings(whose: str, retry: object, timeout: object = None) -> None:
    """A step's ``retry`` and ``timeout`` as given (None: the defaults), refused in one
    line when declared, not found wrong in the middle of a run."""
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise DefinitionError(
            f"{whose}: retry must be a RetryPolicy, not {retry!r}; "
            "e.g. retry=RetryPolicy(max_attempts=5)"
        )
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout < math.inf
    ):
        raise DefinitionError(
            f"{whose}: timeout must be a finite number of seconds above 0 (None: no limit), "
            f"not {timeout!r}"
        )
