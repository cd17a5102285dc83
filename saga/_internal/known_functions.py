"""The functions this process registered by reference (``module:qualname``).

A registry only, apart from :mod:`saga._internal.refs` (which imports modules to check and
resolve references) so that reading a recorded result's type reaches no import
machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_known: dict[str, Callable[..., Any]] = {}


def remember(ref: str, fn: Callable[..., Any]) -> None:
    """Register ``fn`` under ``ref``: a stored ``ref`` resolves to it in this process."""
    _known[ref] = fn


def known_function(ref: str | None) -> Callable[..., Any] | None:
    """The function this process registered under ``ref`` (None: none, or no ref)."""
    return None if ref is None else _known.get(ref)


def known_references() -> frozenset[str]:
    """The references of every function this process registered."""
    return frozenset(_known)
