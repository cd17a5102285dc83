"""Function references (``module:qualname``) and the rule for trusting them.

A context-manager saga stores the import path of each action and
compensation so that another process can finish it. The database is not
trusted to name code: a stored reference is resolved only to a function this
process already knows (passed to ``s.step`` here, or declared in a ``Saga``)
or to one living in a module the operator trusted (``--app``, or
``Coordinator(trusted_modules=...)``), submodules included.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterable
from typing import Any

from saga._internal.errors import UnsafeReferenceError
from saga._internal.known_functions import known_function, known_references, remember
from saga._internal.policy import DEFAULT_COMPENSATION_RETRY, INLINE_COMPENSATION_WAIT, RetryPolicy

__all__ = ["Resolver", "known_function", "known_references", "reference_of"]


def reference_of(fn: object, role: str) -> str:
    """The import path of ``fn``, remembered as known; refuse what cannot be imported."""
    problem = _unimportable(fn)
    if problem is not None:
        raise UnsafeReferenceError(f"{role} {_describe(fn)} {problem}; {_remedy(fn, problem)}")
    assert inspect.isfunction(fn)
    ref = f"{_module_of(fn)}:{fn.__qualname__}"
    remember(ref, fn)
    return ref


def _module_of(fn: Any) -> str:
    """The name another process imports ``fn``'s module by (``python -m pkg.mod`` runs
    ``pkg.mod`` as ``__main__``, a name that means another module everywhere else)."""
    if fn.__module__ != "__main__":
        return str(fn.__module__)
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None and spec.name else "__main__"


def _unimportable(fn: object) -> str | None:
    if isinstance(fn, functools.partial):
        return "is a functools.partial"
    if inspect.ismethod(fn):
        return "is a bound method"
    if not inspect.isfunction(fn):
        return "is not a plain function"
    if fn.__name__ == "<lambda>":
        return "is a lambda"
    if "<locals>" in fn.__qualname__:
        return "is a closure or nested function"
    if _module_of(fn) == "__main__":
        return f"is defined in the script run as __main__ ({_script()}), {_IN_MAIN}"
    if _lookup(fn.__module__, fn.__qualname__) is not fn:
        return f"cannot be found again as {fn.__module__}:{fn.__qualname__}"
    return None


_IN_MAIN = "which a process recovering the saga cannot import"


def _remedy(fn: object, problem: str) -> str:
    """What to do about ``problem``: a script's function is module-level already, so
    asking for one would not help; it must live in a module both processes import."""
    if problem.endswith(_IN_MAIN):
        name = getattr(fn, "__name__", "step")
        return (
            "move it into a module of its own that the recovering process imports too "
            f"(for example steps.py beside the script, then `from steps import {name}`)"
        )
    return (
        "saga stores functions by import path so that another process can run them: "
        "pass a module-level function"
    )


def _script() -> str:
    """The script ``python script.py`` ran, as its user typed it (or ``__main__``)."""
    return str(getattr(sys.modules.get("__main__"), "__file__", None) or "__main__")


def _describe(fn: object) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return repr(name)


def _lookup(module_name: str, qualname: str) -> object:
    try:
        target: object = importlib.import_module(module_name)
    except ImportError:
        return None
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target


class Resolver:
    """Resolves stored references, trusting only known functions and named modules."""

    def __init__(
        self,
        trusted_modules: Iterable[str] = (),
        compensation_retry: RetryPolicy = DEFAULT_COMPENSATION_RETRY,
        compensation_wait_in_place: float = INLINE_COMPENSATION_WAIT,
    ) -> None:
        self.trusted_modules = tuple(trusted_modules)
        # A compensation stored by reference (a context-manager step's) carries no
        # policy of its own: it resolves to this one, the coordinator's setting.
        self.compensation_retry = compensation_retry
        # How long an unwinding process waits in place for a compensation's next attempt;
        # a longer wait hands the saga back (see saga.policy.INLINE_COMPENSATION_WAIT).
        self.compensation_wait_in_place = compensation_wait_in_place

    def reference(self, fn: object, role: str) -> str:
        """The import path of ``fn`` (see :func:`reference_of`)."""
        return reference_of(fn, role)

    def trust(self, module: str) -> None:
        """Trust every function in ``module`` and its submodules."""
        self.trusted_modules = (*self.trusted_modules, module)

    def resolve(self, ref: str) -> Callable[..., Any]:
        """The function named by ``ref``, or ``UnsafeReferenceError``."""
        known = known_function(ref)
        if known is not None:
            return known
        module_name, _, qualname = ref.partition(":")
        if not qualname or not self._is_trusted(module_name):
            raise UnsafeReferenceError(
                f"stored reference {ref!r} is not a function this process knows; refused. "
                "Import the module that defines it with --app (or trusted_modules=...)"
            )
        target = _lookup(module_name, qualname)
        if not inspect.isfunction(target) or f"{target.__module__}:{target.__qualname__}" != ref:
            raise UnsafeReferenceError(
                f"stored reference {ref!r} does not name a function in a trusted module; refused"
            )
        return target

    def _is_trusted(self, module_name: str) -> bool:
        return any(
            module_name == trusted or module_name.startswith(trusted + ".")
            for trusted in self.trusted_modules
        )
