"""Every exception saga raises, in one place.

::

    SagaError
    ├── SagaFailed                  the saga unwound (or could not): saga_id, status, failed_step
    ├── DefinitionError             an invalid Saga (duplicate, unknown dependency, cycle)
    ├── PayloadError                a value that cannot be stored (not JSON, NUL, too large)
    ├── UnsafeReferenceError        a function that is not importable, or an untrusted reference
    ├── UnknownSagaError            no saga with that id, or no definition with that name
    ├── OperationRefusedError       an operator action that makes no sense in the saga's state
    │   ├── SagaBusyError           another live process holds the saga's lease
    │   └── SagaChangedError        the saga moved on between an operator's read and claim
    ├── LeaseLostError (LeaseLost)  this process's claim on a saga was taken over: it stops at once
    ├── StepTimeoutError            a step's action ran past its timeout (also a TimeoutError)
    ├── ConfigurationError          a bad URL, an unknown scheme, a bad setting
    ├── IllegalTransitionError      a status change the state machine forbids: a bug, never expected
    └── StorageError                the database misbehaved
        ├── StorageUnavailableError the database cannot be reached (retried, then raised)
        ├── SchemaVersionError      the database's schema is from a newer release of saga
        └── CorruptRecordError      a stored row cannot be understood

Driver exceptions (psycopg, sqlite3, SQLAlchemy) never cross the storage port:
adapters translate them into ``StorageError`` subclasses, so retries key off
these types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from saga.status import SagaStatus


class SagaError(Exception):
    """Base class of every error raised by saga."""


class SagaFailed(SagaError):  # noqa: N818 - the name is part of the public contract
    """The saga did not complete.

    ``status`` tells how it ended: ``COMPENSATED`` (everything undone),
    ``CANCELLED`` (cancel requested and undone) or ``FAILED`` (a compensation
    failed for good; an operator must act). The original error is the
    ``__cause__``.
    """

    def __init__(
        self,
        saga_id: str,
        status: SagaStatus,
        failed_step: str | None = None,
        message: str | None = None,
    ) -> None:
        self.saga_id = saga_id
        self.status = status
        self.failed_step = failed_step
        where = f" at step {failed_step!r}" if failed_step else ""
        text = message or f"saga {saga_id} ended {status.value}{where}"
        super().__init__(text)


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
    """Another live process holds the saga's lease."""


class SagaChangedError(OperationRefusedError):
    """The saga changed between the read an operator's action was decided on and the claim
    that would carry it out (its status or epoch moved, or a pivot may have acted): the
    claim was refused and nothing was written. Look again and decide again."""


class LeaseLostError(SagaError):
    """This process no longer owns the saga (another claimed it); it stops at once."""

    def __init__(self, saga_id: str, epoch: int) -> None:
        self.saga_id = saga_id
        self.epoch = epoch
        super().__init__(f"saga {saga_id}: lease lost (epoch {epoch} was superseded)")


LeaseLost = LeaseLostError


class StepTimeoutError(SagaError, TimeoutError):
    """A step's action did not return within its ``timeout``."""

    def __init__(self, step: str, timeout: float) -> None:
        self.step = step
        self.timeout = timeout
        super().__init__(f"step {step!r} did not finish within {timeout:g}s")


class ConfigurationError(SagaError, ValueError):
    """A bad database URL, an unknown scheme, or an invalid setting."""


class IllegalTransitionError(SagaError):
    """A status change the state machine forbids. Always a bug."""


class StorageError(SagaError):
    """The database misbehaved."""


class StorageUnavailableError(StorageError):
    """The database cannot be reached or dropped the connection."""


class SchemaVersionError(StorageError):
    """The database's saga schema is newer than this release knows: refused before
    anything is written, so an older process never writes rows it does not understand."""

    def __init__(self, url: str, found: int, known: int) -> None:
        self.found = found
        self.known = known
        super().__init__(
            f"{url}: saga's schema there is version {found}, newer than this release of saga "
            f"knows (version {known}); upgrade saga in this environment, or use another database"
        )


class CorruptRecordError(StorageError):
    """A stored row cannot be understood (bad JSON, unknown status...)."""

    def __init__(self, saga_id: str, problem: str) -> None:
        self.saga_id = saga_id
        super().__init__(f"saga {saga_id}: corrupt record: {problem}")


INFRASTRUCTURE_ERRORS: tuple[type[SagaError], ...] = (LeaseLostError, StorageError)
"""Errors of saga's own machinery: never mistaken for a step's failure."""
