"""What a ``Call`` or ``Transact`` effect runs, named as data: never the function.

The engine decides which function runs as which step; the driver holds the
functions (``saga._internal.drivers.functions.Functions``) and finds the one a
target names, as another process would: a declared step by its definition's
name and version, a compensation stored by reference by that reference. Only a
context-manager block's own calls (``s.step(fn, ...)``) exist in one process
alone: its face hands them to the driver, which numbers them while they run.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Role = Literal["action", "undo", "reconcile"]
"""Which of a declared step's functions: the step, its compensation, its reconcile."""


@dataclasses.dataclass(frozen=True, slots=True)
class Declared:
    """Function ``role`` of step ``step`` of definition ``saga`` version ``version``, as
    the coordinator registered it."""

    saga: str
    version: int
    step: str
    role: Role


@dataclasses.dataclass(frozen=True, slots=True)
class Referenced:
    """The compensation stored as ``ref`` (``module:qualname``), called with the step's
    result and the arguments stored as ``args`` (JSON ``{"args": [...], "kwargs": {...}}``;
    None: none)."""

    ref: str
    args: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Given:
    """A call a context-manager block handed its driver, by the number the driver gave
    it (``Functions.given``) for as long as its step runs."""

    number: int


Target = Declared | Referenced | Given
