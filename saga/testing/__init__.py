"""Testing your sagas like saga tests its own: fixtures, fault injection, the crash matrix.

Installed with ``saga[testing]``, this is a pytest plugin (its fixtures are
available in every test). Also importable: ``from saga.testing import
crash_matrix`` (the fixture), :class:`Ledger`, :func:`fail_step`,
:func:`slow_step`, :func:`assert_completed`, :func:`assert_compensated`.
See docs/testing.md.
"""

from saga.testing.asserts import assert_compensated, assert_completed
from saga.testing.ledger import Ledger
from saga.testing.matrix import CrashMatrix
from saga.testing.plugin import (
    crash_matrix,
    saga_coordinator,
    saga_database_url,
    saga_fork_server,
    saga_ledger,
)
from saga.testing.report import Case, Report, Row
from saga.testing.targets import StepFailure, fail_step, slow_step

__all__ = [
    "Case",
    "CrashMatrix",
    "Ledger",
    "Report",
    "Row",
    "StepFailure",
    "assert_compensated",
    "assert_completed",
    "crash_matrix",
    "fail_step",
    "saga_coordinator",
    "saga_database_url",
    "saga_fork_server",
    "saga_ledger",
    "slow_step",
]
