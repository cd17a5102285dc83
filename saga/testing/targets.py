"""What a crash matrix runs (a declarative ``Saga`` or a function that opens a
context-manager saga), found again by import path in a child process; and
:func:`fail_step` / :func:`slow_step`, which make a step misbehave without editing it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import inspect
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any, Literal

from saga._internal.definition import Saga
from saga._internal.errors import ConfigurationError

Style = Literal["declarative", "context"]


class StepFailure(Exception):
    """The error :func:`fail_step` raises by default: not retried, so the saga unwinds."""


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """A saga under test, by import path: ``ref`` is ``module:qualname``."""

    ref: str
    style: Style
    asynchronous: bool

    @property
    def module(self) -> str:
        return self.ref.partition(":")[0]

    def load(self) -> Any:
        """The ``Saga`` or the function this reference names (importing its module)."""
        module, _, qualname = self.ref.partition(":")
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        return found

    def steps(self) -> list[str]:
        """The declared step names in order (empty for a context-manager saga)."""
        found = self.load()
        return [s.name for s in found.order()] if isinstance(found, Saga) else []


def target_of(saga: Saga | Callable[..., Any]) -> Target:
    """The :class:`Target` for ``saga``; refuse what a child process could not import."""
    if isinstance(saga, Saga):
        return _declarative(saga)
    if not inspect.isfunction(saga) or "<locals>" in saga.__qualname__:
        raise ConfigurationError(
            f"crash_matrix: {saga!r} is neither a Saga nor a module-level function; "
            "pass the Saga object or a function (coord, data) that opens the saga block"
        )
    _importable(saga.__module__, repr(saga))
    asynchronous = inspect.iscoroutinefunction(saga)
    return Target(f"{saga.__module__}:{saga.__qualname__}", "context", asynchronous)


def _declarative(saga: Saga) -> Target:
    modules = [s.fn.__module__ for s in saga.steps]
    for name in dict.fromkeys(modules):
        module = sys.modules.get(name)
        attribute = _attribute_holding(module, saga)
        if module is not None and attribute is not None:
            _importable(name, f"saga {saga.name!r}")
            asynchronous = any(inspect.iscoroutinefunction(s.fn) for s in saga.steps)
            return Target(f"{name}:{attribute}", "declarative", asynchronous)
    raise ConfigurationError(
        f"crash_matrix: saga {saga.name!r} is not a module-level name in the module of its "
        "steps; define it at the top of an importable module, so that a child process finds it"
    )


def _attribute_holding(module: ModuleType | None, value: object) -> str | None:
    if module is None:
        return None
    return next((k for k, v in vars(module).items() if v is value), None)


def _importable(module: str, what: str) -> None:
    if module == "__main__":
        raise ConfigurationError(
            f"crash_matrix: {what} is defined in the __main__ script, which a child process "
            "cannot import; move it into a module"
        )


# -- misbehaving on demand --------------------------------------------------------------------


@dataclasses.dataclass
class Injected:
    """A step made to misbehave by :func:`fail_step` or :func:`slow_step`; ``calls`` counts
    the calls this process made to it while the injection was in place."""

    step: str
    calls: int = 0


def fail_step(
    saga: Saga | Callable[..., Any],
    step: str,
    *,
    times: int | None = None,
    error: BaseException | None = None,
) -> contextlib.AbstractContextManager[Injected]:
    """Make ``step`` raise ``error`` (default :class:`StepFailure`) on its first ``times``
    calls in this process (every call when ``None``), without editing it.

    ``saga`` is a declarative ``Saga`` (``step`` is a step's name) or a function that
    opens a context-manager saga (``step`` names a module-level function of that
    function's module, the action it passes to ``s.step``). Use as ``with``.
    """

    def before(injected: Injected) -> None:
        if times is None or injected.calls <= times:
            raise error if error is not None else StepFailure(f"{step} failed (fail_step)")

    async def before_async(injected: Injected) -> None:
        before(injected)

    return _wrapped(saga, step, before, before_async)


def slow_step(
    saga: Saga | Callable[..., Any], step: str, *, seconds: float, times: int | None = None
) -> contextlib.AbstractContextManager[Injected]:
    """Make ``step`` take ``seconds`` longer on its first ``times`` calls (every call when
    ``None``): for step timeouts, deadlines and leases. The same targets as :func:`fail_step`;
    a coroutine step awaits the delay (so a timeout can cancel it), a plain one sleeps."""

    def before(injected: Injected) -> None:
        if times is None or injected.calls <= times:
            time.sleep(seconds)  # the slowness under test, not a wait for something

    async def before_async(injected: Injected) -> None:
        if times is None or injected.calls <= times:
            await asyncio.sleep(seconds)

    return _wrapped(saga, step, before, before_async)


Before = Callable[[Injected], None]
BeforeAsync = Callable[[Injected], Awaitable[None]]


@contextlib.contextmanager
def _wrapped(
    saga: Saga | Callable[..., Any], step: str, before: Before, before_async: BeforeAsync
) -> Iterator[Injected]:
    injected = Injected(step)
    holder, attribute, original = _slot(saga, step)
    setattr(holder, attribute, _wrapper(original, injected, before, before_async))
    try:
        yield injected
    finally:
        setattr(holder, attribute, original)


def _slot(saga: Saga | Callable[..., Any], step: str) -> tuple[Any, str, Callable[..., Any]]:
    """Where the step's action lives: a ``Step``'s ``fn``, or a module's function."""
    if isinstance(saga, Saga):
        found = next((s for s in saga.steps if s.name == step), None)
        if found is None:
            names = ", ".join(s.name for s in saga.steps)
            raise ConfigurationError(f"saga {saga.name!r} has no step {step!r} (it has {names})")
        return found, "fn", found.fn
    module = sys.modules[saga.__module__]
    action = getattr(module, step, None)
    if not inspect.isfunction(action):
        raise ConfigurationError(
            f"module {module.__name__} has no function {step!r} to use as a step's action"
        )
    return module, step, action


def _wrapper(
    original: Callable[..., Any], injected: Injected, before: Before, before_async: BeforeAsync
) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def misbehaving_async(*args: Any, **kwargs: Any) -> Any:
            injected.calls += 1
            await before_async(injected)
            return await original(*args, **kwargs)

        return misbehaving_async

    @functools.wraps(original)
    def misbehaving(*args: Any, **kwargs: Any) -> Any:
        injected.calls += 1
        before(injected)
        return original(*args, **kwargs)

    return misbehaving
