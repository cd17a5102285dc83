"""Function references: what may be stored, and what a stored reference may run."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from saga import UnsafeReferenceError
from saga._internal.refs import Resolver, reference_of


def debit(account: str, amount: int) -> dict[str, Any]:
    return {"account": account, "amount": amount}


def only_through_trust(value: int) -> int:
    """Never passed to ``reference_of``: reachable only through a trusted module."""
    return value * 2


class Ledger:
    @staticmethod
    def post(amount: int) -> int:
        return amount

    def entry(self, amount: int) -> int:
        return amount


def make_closure() -> Callable[[], int]:
    def inner() -> int:
        return 1

    return inner


def shadowed() -> None:
    return None


_original_shadowed = shadowed
shadowed = debit  # type: ignore[assignment]  # the name now points elsewhere


def test_module_level_function_is_stored_as_module_and_qualname() -> None:
    assert reference_of(debit, "step function") == f"{__name__}:debit"


def test_static_method_of_a_module_level_class_is_accepted() -> None:
    assert reference_of(Ledger.post, "step function") == f"{__name__}:Ledger.post"


@pytest.mark.parametrize(
    ("fn", "problem"),
    [
        (lambda result: None, "is a lambda"),
        (make_closure(), "is a closure or nested function"),
        (functools.partial(debit, "alice"), "is a functools.partial"),
        (Ledger().entry, "is a bound method"),
        (len, "is not a plain function"),
        (_original_shadowed, "cannot be found again"),
    ],
    ids=["lambda", "closure", "partial", "bound-method", "builtin", "shadowed"],
)
def test_unimportable_functions_are_refused(fn: object, problem: str) -> None:
    with pytest.raises(UnsafeReferenceError, match=problem) as caught:
        reference_of(fn, "compensation")
    assert "module-level function" in str(caught.value)


def test_known_functions_resolve_without_trust() -> None:
    ref = reference_of(debit, "step function")
    assert Resolver().resolve(ref) is debit


def test_forged_reference_to_os_system_is_refused() -> None:
    with pytest.raises(UnsafeReferenceError, match="'os:system' is not a function this process"):
        Resolver().resolve("os:system")


def test_trusting_os_still_refuses_its_builtins() -> None:
    with pytest.raises(UnsafeReferenceError, match="does not name a function"):
        Resolver(["os"]).resolve("os:system")


def test_a_function_in_a_trusted_module_resolves() -> None:
    resolver = Resolver(["tests.unit"])  # a package: its submodules are trusted too
    assert resolver.resolve(f"{__name__}:only_through_trust") is only_through_trust


def test_trust_can_be_added_later() -> None:
    resolver = Resolver()
    with pytest.raises(UnsafeReferenceError):
        resolver.resolve(f"{__name__}:only_through_trust")
    resolver.trust(__name__)
    assert resolver.resolve(f"{__name__}:only_through_trust") is only_through_trust


def test_trust_in_a_module_does_not_extend_to_a_name_prefix() -> None:
    with pytest.raises(UnsafeReferenceError):
        Resolver(["tests.un"]).resolve(f"{__name__}:only_through_trust")


@pytest.mark.parametrize(
    "ref",
    [
        f"{__name__}:Ledger",  # a class, not a function
        f"{__name__}:missing",
        f"{__name__}:shadowed",  # resolves to a function stored under another name
        f"{__name__}",  # no qualname at all
    ],
)
def test_references_that_do_not_name_a_trusted_function_are_refused(ref: str) -> None:
    with pytest.raises(UnsafeReferenceError):
        Resolver([__name__]).resolve(ref)
