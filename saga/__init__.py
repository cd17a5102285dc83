"""saga: durable sagas for multi-step data writes.

Each step pairs a forward action with an idempotent compensation; a
coordinator records every step in PostgreSQL or SQLite, unwinds the steps
that ran when one fails, and finishes interrupted sagas after a crash.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from saga._internal import moved as _moved
from saga._internal.context import StepContext, current_step
from saga._internal.coordinator import Coordinator
from saga._internal.definition import Saga, Step
from saga._internal.errors import (
    AmbiguousSagaError,
    ConfigurationError,
    CorruptRecordError,
    DatabaseNotFoundError,
    DatabaseRefusedError,
    DefinitionError,
    IllegalTransitionError,
    InputMismatchError,
    LeaseLost,
    LeaseLostError,
    OperationRefusedError,
    PayloadError,
    RecordedError,
    SagaBusyError,
    SagaChangedError,
    SagaError,
    SagaFailed,
    SagaHandedBack,
    SchemaVersionError,
    StepTimeoutError,
    StorageError,
    StorageUnavailableError,
    UnknownSagaError,
    UnsafeReferenceError,
)
from saga._internal.listening import Listener, SagaEvent
from saga._internal.policy import DEFAULT_COMPENSATION_RETRY, DEFAULT_STEP_RETRY, RetryPolicy
from saga._internal.reconciled import Reconciled
from saga._internal.resources import Resources
from saga._internal.status import SagaStatus, StepKind, StepStatus
from saga._internal.transient import is_transient
from saga._internal.typed import ResultTypeError
from saga._internal.views import SagaView, StepView

if _TYPE_CHECKING:
    from saga._internal.aio import AsyncCoordinator
    from saga._internal.aio_scope import AsyncSagaScope
    from saga._internal.recovery import RecoveryOutcome, RecoveryReport
    from saga._internal.scope import SagaScope

_ON_FIRST_USE = {
    "AsyncCoordinator": "saga._internal.aio",
    "AsyncSagaScope": "saga._internal.aio_scope",
    "SagaScope": "saga._internal.scope",
    "RecoveryOutcome": "saga._internal.recovery",
    "RecoveryReport": "saga._internal.recovery",
}
"""Imported when first asked for: a program that only uses the ``Coordinator`` never
loads the asyncio driver, and one that only runs declarative sagas never loads the
context-manager block's machinery nor the recoverer's reports."""


def __getattr__(name: str) -> _Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'saga' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

_moved.install()  # saga.coordinator and the other old paths, deprecated


def _name_errors_by_their_public_path() -> None:
    """Tracebacks and messages say ``saga.SagaFailed``, not where the class is kept."""
    for name in __all__:
        value = globals().get(name)  # the asyncio half, not imported yet, raises none
        if isinstance(value, type) and issubclass(value, BaseException):
            value.__module__ = __name__


__all__ = [
    "DEFAULT_COMPENSATION_RETRY",
    "DEFAULT_STEP_RETRY",
    "AmbiguousSagaError",
    "AsyncCoordinator",
    "AsyncSagaScope",
    "ConfigurationError",
    "Coordinator",
    "CorruptRecordError",
    "DatabaseNotFoundError",
    "DatabaseRefusedError",
    "DefinitionError",
    "IllegalTransitionError",
    "InputMismatchError",
    "LeaseLost",
    "LeaseLostError",
    "Listener",
    "OperationRefusedError",
    "PayloadError",
    "Reconciled",
    "RecordedError",
    "RecoveryOutcome",
    "RecoveryReport",
    "Resources",
    "ResultTypeError",
    "RetryPolicy",
    "Saga",
    "SagaBusyError",
    "SagaChangedError",
    "SagaError",
    "SagaEvent",
    "SagaFailed",
    "SagaHandedBack",
    "SagaScope",
    "SagaStatus",
    "SagaView",
    "SchemaVersionError",
    "Step",
    "StepContext",
    "StepKind",
    "StepStatus",
    "StepTimeoutError",
    "StepView",
    "StorageError",
    "StorageUnavailableError",
    "UnknownSagaError",
    "UnsafeReferenceError",
    "current_step",
    "is_transient",
]

_name_errors_by_their_public_path()
