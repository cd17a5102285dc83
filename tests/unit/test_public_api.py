"""The public surface: ``saga.__all__`` is sorted, complete, and leaks nothing."""

from __future__ import annotations

import inspect
import types

import pytest

import saga
import saga.errors

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
    assert saga.__all__ == sorted(saga.__all__)


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
        for name, value in vars(saga.errors).items()
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
