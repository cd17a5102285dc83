"""What a step sees of its coordinator's resources: named values, read-only.

Apart from :mod:`saga._internal.resources` (which gives and closes them, on an event loop
where a closer is async) so that the step context, and the engine that builds
it, reach no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class ResourceView(Mapping[str, Any]):
    """``ctx.resources``: read as ``ctx.resources["bank"]`` or ``ctx.resources.bank``."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(self._missing(name)) from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # copy, pickle-probing and dunder lookups: not resources
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(self._missing(name)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    # One coordinator's set of clients is itself, not its contents: compared and hashed
    # by identity (which also lets it be a dataclass field's default).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Resources({', '.join(self._values)})"  # names only: values may hold secrets

    def _missing(self, name: str) -> str:
        known = ", ".join(sorted(self._values)) or "none"
        return (
            f"no resource named {name!r} (this coordinator has: {known}); give it with "
            f"Coordinator(..., resources={{{name!r}: ...}}) or coord.resources.add({name!r}, ...)"
        )


NO_RESOURCES = ResourceView()
"""What ``ctx.resources`` is for a coordinator given none."""
