"""The public surface: ``saga.__all__`` is sorted, complete, and leaks nothing."""

from __future__ import annotations

import importlib
import inspect
import sys
import types
import warnings
from pathlib import Path

import pytest

import saga
import saga._internal.errors
from saga._internal import errors as error_module

# Every name the contract's examples import from ``saga`` (DESIGN.md, "Public API").
CONTRACT_NAMES = [
    "AsyncCoordinator",
    "Coordinator",
    "LeaseLost",
    "RetryPolicy",
    "Saga",
    "SagaFailed",
    "SagaStatus",
    "StepContext",
    "StepStatus",
    "current_step",
]


def test_all_is_sorted() -> None:
    """In ruff's order (RUF022): constants, then classes, then functions."""

    def kind(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2), name

    assert saga.__all__ == sorted(saga.__all__, key=kind)


def test_all_has_no_duplicates() -> None:
    assert len(saga.__all__) == len(set(saga.__all__))


@pytest.mark.parametrize("name", saga.__all__)
def test_every_exported_name_exists(name: str) -> None:
    assert getattr(saga, name, None) is not None


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_every_name_the_contract_uses_is_exported(name: str) -> None:
    assert name in saga.__all__


def test_nothing_public_leaks_from_the_package() -> None:
    public = {
        name
        for name, value in vars(saga).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(saga.__all__)


def test_every_exception_is_exported() -> None:
    errors = {
        name
        for name, value in vars(error_module).items()
        if inspect.isclass(value) and issubclass(value, saga.SagaError)
    }
    assert errors <= set(saga.__all__)


def test_every_exception_derives_from_saga_error() -> None:
    for name in saga.__all__:
        value = getattr(saga, name)
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, saga.SagaError), name


def test_lease_lost_is_lease_lost_error() -> None:
    assert saga.LeaseLost is saga.LeaseLostError


def test_version_is_a_string() -> None:
    assert isinstance(saga.__version__, str)


TOP_OF_THE_PACKAGE = {
    "__init__.py",
    "__main__.py",
    "py.typed",
    "_internal",  # everything else, free to move
    "admin",
    "cli",
    "logs.py",
    "metrics.py",
    "otel.py",
    "testing",
    "web",
}
"""What ``saga/`` shows: the public modules and packages (DESIGN.md, "What is public")."""


def test_the_package_shows_only_its_public_modules_at_its_top() -> None:
    top = Path(saga.__file__).parent
    assert {p.name for p in top.iterdir() if p.name != "__pycache__"} == TOP_OF_THE_PACKAGE


def test_all_is_exactly_the_public_names() -> None:
    """Adding or removing a public name is a decision: made here as well."""
    assert set(saga.__all__) == set(PUBLIC_NAMES)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("saga.coordinator", "saga._internal.coordinator"),
        ("saga.errors", "saga._internal.errors"),
        ("saga.engine.forward", "saga._internal.engine.forward"),
    ],
)
def test_an_old_module_path_still_imports_the_same_module_with_a_warning(
    old: str, new: str
) -> None:
    parent = old.rpartition(".")[0]
    if parent != "saga":  # the old package first, so that only the module itself warns
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            importlib.import_module(parent)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)  # one module: classes stay the same
    assert module.__spec__ is not None
    assert module.__spec__.name == new


def test_a_public_class_imported_by_its_old_path_is_the_same_class() -> None:
    sys.modules.pop("saga.coordinator", None)
    with pytest.warns(DeprecationWarning, match="saga.coordinator moved"):
        from saga.coordinator import Coordinator  # type: ignore[import-not-found]
    assert Coordinator is saga.Coordinator


PUBLIC_NAMES = [
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
