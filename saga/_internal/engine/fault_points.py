"""The engine's fault points (crash tests only), yielded only while one is in use.

A fault point is a ``Fault`` effect the driver answers by calling
:func:`saga._internal.faults.point`, which kills the process there when a crash test
armed it. Nearly every process arms none, so the engine asks this switch first and
yields nothing: each ``Fault`` would otherwise travel through every flow and the
driver to be answered with nothing (11 of a 3-step saga's 28 effects).
"""

from __future__ import annotations

from saga._internal.engine.effects import Fault, Flow


class _FaultPoints:
    """Whether a fault point is armed or traced in this process; set by
    :mod:`saga._internal.faults`, its only writer."""

    on = False


FAULT_POINTS = _FaultPoints()


def fault(point: str, step: str | None = None) -> Flow[None]:
    """The fault point ``point`` (crash tests only): a ``Fault`` effect when armed or traced."""
    if FAULT_POINTS.on:
        yield Fault(point, step)
