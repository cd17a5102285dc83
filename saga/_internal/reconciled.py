"""What a step's reconcile function answers about an attempt whose outcome was never
recorded (its process died inside the action): did it happen?

Recovery asks before it re-runs or compensates such a step, when the step declares one
(``@charge.reconcile``). A payment provider looked up by the idempotency key, a row
looked up by its key: most participants can tell.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Outcome = Literal["done", "not_done", "unknown"]


@dataclasses.dataclass(frozen=True, slots=True)
class Reconciled:
    """A reconcile function's answer. Build it with :meth:`done`, :meth:`not_done` or
    :meth:`unknown`; return None to say unknown too."""

    outcome: Outcome
    result: Any = None

    @classmethod
    def done(cls, result: Any = None) -> Reconciled:
        """It happened, and this is what the action would have returned: the saga goes on
        as if it had (forward: the step is not run again; unwinding: its compensation
        gets this result)."""
        return cls("done", result)

    @classmethod
    def not_done(cls) -> Reconciled:
        """It did not happen: forward, the step runs again (or, its attempts used up, is
        recorded failed, not in doubt); unwinding, it has nothing to compensate."""
        return cls("not_done")

    @classmethod
    def unknown(cls) -> Reconciled:
        """The participant cannot tell: recovery does what it does without an answer."""
        return cls("unknown")
