"""Parameter lists written once and worn by several functions.

A sync function and its asyncio twin (``Coordinator.list`` and
``AsyncCoordinator.list``), or ``s.step`` in both scopes and ``s.call``, take the
same arguments. Instead of a hand-kept copy of the parameters in each, one
function owns them, with their defaults and types, and the others are
decorated:

- ``@twin_of(original)``: takes ``original``'s arguments (after the first one,
  ``self`` or a client) and receives them untouched, to hand them on;
- ``@taking(build)``: takes ``build``'s arguments (after its own first one) and
  receives what ``build`` makes of them.

Type checkers see the owner's parameters through the ``ParamSpec``; ``help()``,
``inspect.signature`` and IDEs reading it see them through ``__signature__``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

P = ParamSpec("P")
S = TypeVar("S")  # the decorated function's own first parameter: self, or a client
A = TypeVar("A")  # what ``build`` makes of the arguments
R = TypeVar("R")


def twin_of(
    original: Callable[Concatenate[Any, P], Any],
) -> Callable[[Callable[Concatenate[S, ...], R]], Callable[Concatenate[S, P], R]]:
    """The decorated function takes ``original``'s arguments after its first one."""

    def decorate(twin: Callable[Concatenate[S, ...], R]) -> Callable[Concatenate[S, P], R]:
        own = inspect.signature(twin)
        worn = inspect.signature(original)
        first = next(iter(own.parameters.values()))
        rest = list(worn.parameters.values())[1:]
        _wear(twin, own.replace(parameters=[first, *rest]))
        return twin

    return decorate


def taking(
    build: Callable[P, A],
) -> Callable[[Callable[[S, A], R]], Callable[Concatenate[S, P], R]]:
    """The decorated ``body(first, built)`` is called as ``(first, *args, **kwargs)``
    with ``build``'s arguments, and given ``build(*args, **kwargs)``; a coroutine
    function stays one (``build`` then runs when it is awaited, as the body would)."""

    def decorate(body: Callable[[S, A], R]) -> Callable[Concatenate[S, P], R]:
        if inspect.iscoroutinefunction(body):
            awaited = cast(Callable[[S, A], Awaitable[Any]], body)

            async def run_async(first: S, /, *args: P.args, **kwargs: P.kwargs) -> Any:
                return await awaited(first, build(*args, **kwargs))

            wrapper: Callable[Concatenate[S, P], Any] = run_async
        else:

            def run(first: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
                return body(first, build(*args, **kwargs))

            wrapper = run
        functools.update_wrapper(wrapper, body)
        own = inspect.signature(body)
        first = next(iter(own.parameters.values()))
        built = list(inspect.signature(build).parameters.values())
        _wear(wrapper, own.replace(parameters=[first, *built]))
        return wrapper

    return decorate


def _wear(function: Callable[..., Any], signature: inspect.Signature) -> None:
    """What ``inspect.signature`` (so ``help()``) answers for ``function``."""
    function.__signature__ = signature  # type: ignore[attr-defined]
