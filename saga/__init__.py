"""saga: durable sagas for multi-step data writes.

Each step pairs a forward action with an idempotent compensation; a
coordinator records every step in PostgreSQL or SQLite, unwinds the steps
that ran when one fails, and finishes interrupted sagas after a crash.
"""

from saga.aio import AsyncCoordinator
from saga.aio_scope import AsyncSagaScope
from saga.context import StepContext, current_step
from saga.coordinator import Coordinator
from saga.definition import Saga, Step
from saga.errors import (
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
from saga.listening import Listener, SagaEvent
from saga.policy import RetryPolicy
from saga.recovery import RecoveryOutcome, RecoveryReport
from saga.resources import Resources
from saga.scope import SagaScope
from saga.status import SagaStatus, StepKind, StepStatus
from saga.transient import is_transient
from saga.typed import ResultTypeError
from saga.views import SagaView, StepView

__version__ = "0.1.0"

__all__ = [
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
