"""Every exception saga raises, in one place.

::

    SagaError
    ├── SagaFailed                  the saga unwound (or could not): saga_id, status, failed_step,
    │                               failed_compensation, compensation_error
    ├── RecordedError               an error known only from its record (rebuilt on a rerun)
    ├── DefinitionError             an invalid Saga (duplicate, unknown dependency, cycle)
    ├── PayloadError                a value that cannot be stored (not JSON, NUL, too large)
    ├── UnsafeReferenceError        a function that is not importable, or an untrusted reference
    ├── UnknownSagaError            no saga with that id, or no definition with that name
    ├── OperationRefusedError       an operator action that makes no sense in the saga's state
    │   ├── SagaBusyError           another live process holds the saga's lease: lease_remaining
    │   ├── SagaChangedError        the saga moved on between an operator's read and claim
    │   └── InputMismatchError      a key run again with other input than its first run's
    ├── LeaseLostError (LeaseLost)  this process's claim on a saga was taken over: it stops at once
    ├── StepTimeoutError            a step's action ran past its timeout (also a TimeoutError)
    ├── ConfigurationError          a bad URL, an unknown scheme, a bad setting
    ├── IllegalTransitionError      a status change the state machine forbids: a bug, never expected
    └── StorageError                the database misbehaved
        ├── StorageUnavailableError the database cannot be reached (retried, then raised)
        ├── SchemaVersionError      the schema is not this release's (older, newer or unknown)
        └── CorruptRecordError      a stored row cannot be understood

Driver exceptions (psycopg, sqlite3, SQLAlchemy) never cross the storage port:
adapters translate them into ``StorageError`` subclasses, so retries key off
these types.
"""

from __future__ import annotations

from saga._internal._statuses import SagaStatus


class SagaError(Exception):
    """Base class of every error raised by saga."""


class SagaFailed(SagaError):  # noqa: N818 - the name is part of the public contract
    """The saga did not complete.

    ``status`` tells how it ended: ``COMPENSATED`` (everything undone),
    ``CANCELLED`` (cancel requested and undone) or ``FAILED`` (a compensation
    failed for good, or a step failed past the pivot; an operator must act).
    ``failed_step`` names the step whose failure made the saga unwind, and
    the original error is the ``__cause__``.

    When a compensation failed for good, ``failed_compensation`` names its
    step and ``compensation_error`` is its exception (a
    :class:`RecordedError` with no type name when nothing was raised: its
    attempts were used up across crashes), chained as the ``__context__``
    too (by ``run()``, a replay and a ``with coord.saga(...)`` block alike, so
    that walking the chain finds the participant's own exception class);
    ``compensation_error_type`` and ``compensation_error_message`` give its
    type name and message. The message says all of it, for example ``saga
    ... ended failed at step 'confirm'; the compensation of step 'transfer'
    failed: RuntimeError: ledger locked``.

    Running the same key again raises the same ``SagaFailed``, rebuilt from
    the records: the same message and attributes, and a ``__cause__`` (and
    ``compensation_error``) rebuilt from the stored error text (see
    :class:`RecordedError`).
    """

    def __init__(
        self,
        saga_id: str,
        status: SagaStatus,
        failed_step: str | None = None,
        message: str | None = None,
        *,
        failed_compensation: str | None = None,
        compensation_error: BaseException | None = None,
    ) -> None:
        self.saga_id = saga_id
        self.status = status
        self.failed_step = failed_step
        self.failed_compensation = failed_compensation
        self.compensation_error = compensation_error
        self._message = message
        super().__init__(str(self))
        if compensation_error is not None:
            # In the chain, beside the __cause__ (the error that made it unwind): the
            # compensation's error is what was being dealt with when the saga gave up.
            self.__context__ = compensation_error

    def __str__(self) -> str:
        # Built when asked: the unwinding learns failed_step after the compensation failed.
        if self._message:
            return self._message
        where = f" at step {self.failed_step!r}" if self.failed_step else ""
        text = f"saga {self.saga_id} ended {self.status.value}{where}"
        if self.failed_compensation is not None:
            error = self.compensation_error
            why = "" if error is None else f": {describe_error(error)}"
            text += f"; the compensation of step {self.failed_compensation!r} failed{why}"
        return text

    @property
    def compensation_error_type(self) -> str | None:
        """The type name of the compensation's error (as recorded, on a rerun)."""
        return None if self.compensation_error is None else error_type(self.compensation_error)

    @property
    def compensation_error_message(self) -> str | None:
        """The message of the compensation's error."""
        error = self.compensation_error
        return None if error is None else error_message(error)


class RecordedError(SagaError):
    """An error known only from the text the store kept of it.

    A rerun with the key of a failed saga raises its ``SagaFailed`` again,
    with the errors rebuilt from their records (``"TypeName: message"``).
    The database is not trusted to name code, so nothing is imported: a
    record naming a builtin exception class exactly (``ValueError``,
    ``KeyError``, ``TimeoutError`` ...) gives that class again, and any other
    gives a ``RecordedError`` with the recorded ``type_name`` (``None`` when
    the record was a reason rather than an exception) and ``message``.
    """

    def __init__(
        self,
        type_name: str | None,
        message: str,
        *,
        saga_id: str | None = None,
        step: str | None = None,
        attempt: int | None = None,
    ) -> None:
        self.type_name = type_name
        self.message = message
        self.saga_id = saga_id
        self.step = step
        self.attempt = attempt
        super().__init__(message)


class DefinitionError(SagaError):
    """A saga definition is invalid; the message names the steps involved."""


class PayloadError(SagaError, ValueError):
    """A value cannot be stored: not JSON-serialisable, a NUL byte, or too large."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")


class UnsafeReferenceError(SagaError):
    """A function cannot be referenced by import path, or a stored one is not trusted."""


class UnknownSagaError(SagaError, LookupError):
    """No saga with that id, or no registered definition with that name."""


class OperationRefusedError(SagaError):
    """An operation that makes no sense in the saga's current state."""

    def __init__(self, saga_id: str, message: str) -> None:
        self.saga_id = saga_id
        super().__init__(message)


class SagaBusyError(OperationRefusedError):
    """Another live process holds the saga's lease.

    ``lease_remaining`` is how many seconds that lease had left when the claim was
    refused, by the database's clock (``None`` when the store did not say): the
    soonest the saga can be taken over if its holder has died, so a sensible wait
    before asking again (an HTTP ``Retry-After``). A live holder renews its lease,
    so it is not a promise that the saga will be free by then.
    """

    def __init__(self, saga_id: str, message: str, *, lease_remaining: float | None = None) -> None:
        self._lease_remaining = lease_remaining
        super().__init__(saga_id, message)

    @property
    def lease_remaining(self) -> float | None:
        """Seconds left on the holder's lease when the claim was refused (at least 0)."""
        return None if self._lease_remaining is None else max(0.0, self._lease_remaining)


class SagaChangedError(OperationRefusedError):
    """The saga changed between the read an operator's action was decided on and the claim
    that would carry it out (its status or epoch moved, or a pivot may have acted): the
    claim was refused and nothing was written. Look again and decide again."""


class InputMismatchError(OperationRefusedError):
    """A saga was run again with the key of an earlier run but with other input:
    refused before anything runs, since the key already stands for the first input.
    Use a new key for new input."""


class LeaseLostError(SagaError):
    """This process no longer owns the saga (another claimed it); it stops at once."""

    def __init__(self, saga_id: str, epoch: int) -> None:
        self.saga_id = saga_id
        self.epoch = epoch
        super().__init__(f"saga {saga_id}: lease lost (epoch {epoch} was superseded)")


LeaseLost = LeaseLostError


class SagaHandedBack(SagaError):
    """This process is stopping (``Coordinator.drain()``): it handed the saga's lease
    back at a step boundary, and any other process may finish it at once. Nothing
    failed: the saga is as it was, ``running`` or ``compensating``.

    Also raised, with ``why``, when a compensation failed and its next attempt is due
    only after a long wait (more than ``saga._internal.policy.INLINE_COMPENSATION_WAIT``): the
    failed attempt is recorded, the saga stays ``compensating`` with no owner, and a
    worker (``saga worker``, ``coord.recover()``) retries it once the wait is over.
    Such a one is ``waiting`` and says which compensation: ``step``, the ``attempt``
    that failed out of ``max_attempts`` (None: no limit), its ``error`` (type: message)
    and the ``delay`` (s) until the next attempt is due.

    Also raised with status ``PAUSED`` (``why`` says who or what paused it) when the
    saga was paused at a step boundary (``coord.pause``, or a step's
    ``on_exhausted="pause"`` after its retries ran out), or a rerun of its key found it
    paused: nothing was compensated, and no worker takes it; an operator resumes it
    (``coord.resume``, ``saga resume ID``) or compensates it."""

    def __init__(
        self,
        saga_id: str,
        status: SagaStatus,
        why: str | None = None,
        *,
        step: str | None = None,
        attempt: int | None = None,
        max_attempts: int | None = None,
        error: str | None = None,
        delay: float | None = None,
    ) -> None:
        self.saga_id = saga_id
        self.status = status
        self.why = why
        self.step = step
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.error = error
        self.delay = delay
        if self.waiting:
            super().__init__(
                f"saga {saga_id} is {status.value}: {self.attempt_text}; it waits "
                f"{delay or 0.0:.1f}s for the next attempt, which a worker (saga worker, "
                "coord.recover()) makes"
            )
            return
        reason = why or "this process is stopping"
        if status is SagaStatus.PAUSED:
            super().__init__(
                f"saga {saga_id} is paused ({reason}); nothing was compensated: an operator "
                f"resumes it (saga resume {saga_id}) or compensates it"
            )
            return
        super().__init__(
            f"saga {saga_id} handed back while {status.value}: {reason}, "
            "and another process (a worker, a retry of the same key) finishes it"
        )

    @classmethod
    def waiting_for(
        cls,
        saga_id: str,
        step: str,
        attempt: int,
        max_attempts: int | None,
        error: str | None,
        delay: float,
    ) -> SagaHandedBack:
        """A compensating saga handed back until its compensation's next attempt is due."""
        why = f"the compensation of step {step!r} waits {delay:.1f}s to retry"
        return cls(
            saga_id,
            SagaStatus.COMPENSATING,
            why,
            step=step,
            attempt=attempt,
            max_attempts=max_attempts,
            error=error,
            delay=delay,
        )

    @property
    def waiting(self) -> bool:
        """A compensation waits for its next attempt (nothing is stopping)."""
        return self.step is not None and self.attempt is not None

    @property
    def attempt_text(self) -> str:
        """``attempt 4 of 20 of step 'charge''s compensation failed (E)``."""
        of = "" if self.max_attempts is None else f" of {self.max_attempts}"
        return (
            f"attempt {self.attempt}{of} of the compensation of step {self.step!r} "
            f"failed ({self.error})"
        )


class StepTimeoutError(SagaError, TimeoutError):
    """A step's action did not return within its ``timeout``."""

    def __init__(self, step: str, timeout: float) -> None:
        self.step = step
        self.timeout = timeout
        super().__init__(f"step {step!r} did not finish within {timeout:g}s")


class ConfigurationError(SagaError, ValueError):
    """A bad database URL, an unknown scheme, or an invalid setting."""


class AmbiguousSagaError(ConfigurationError):
    """A key alone, or an id prefix, names several sagas: the message lists them."""


class DatabaseNotFoundError(ConfigurationError):
    """The database is not there, or holds none of saga's tables, and the caller asked
    not to create them (``Coordinator(create_tables=False)``, the admin command's reads):
    most often the wrong ``--db`` or the wrong working directory."""


class IllegalTransitionError(SagaError):
    """A status change the state machine forbids. Always a bug."""


class StorageError(SagaError):
    """The database misbehaved."""


class DatabaseRefusedError(StorageError, ConfigurationError):
    """The database refused us for good (no such database or role, a wrong password, a
    role barred from logging in, a path SQLite cannot open): not retried, since no retry
    can fix it (an operator can)."""


class StorageUnavailableError(StorageError):
    """The database cannot be reached or dropped the connection."""


class SchemaVersionError(StorageError):
    """The database's saga schema is not this release's: older (run ``saga db
    upgrade``), newer (from a newer release of saga), or not one saga recognises.
    Refused before anything is written, so a process never writes rows its schema
    does not match."""

    def __init__(self, message: str, found: str | None, known: str) -> None:
        self.found = found
        self.known = known
        super().__init__(message)


class CorruptRecordError(StorageError):
    """A stored row cannot be understood (bad JSON, unknown status...)."""

    def __init__(self, saga_id: str, problem: str) -> None:
        self.saga_id = saga_id
        super().__init__(f"saga {saga_id}: corrupt record: {problem}")


MAX_ERROR_LENGTH = 2000
"""The longest error text stored; longer ones are cut, ending with ``...``."""


def describe_error(error: BaseException) -> str:
    """An error as one stored line of bounded length: ``"TypeName: message"``.

    A :class:`RecordedError` reads as the record it was rebuilt from.
    """
    name = error_type(error)
    body = error_message(error)
    text = body if name is None else f"{name}: {body}"
    text = text.replace("\x00", "\\0")
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 3] + "..."


def error_type(error: BaseException) -> str | None:
    """The type name of ``error``: the recorded one for a :class:`RecordedError`."""
    return error.type_name if isinstance(error, RecordedError) else type(error).__name__


def error_message(error: BaseException) -> str:
    """The message of ``error``: the recorded one for a :class:`RecordedError`."""
    return error.message if isinstance(error, RecordedError) else str(error)


INFRASTRUCTURE_ERRORS: tuple[type[SagaError], ...] = (
    LeaseLostError,
    StorageError,
    SagaHandedBack,
)
"""Errors of saga's own machinery: never mistaken for a step's failure."""
