"""The functions behind the targets a flow names (``saga._internal.engine.targets``).

The engine never hands a driver a function: a ``Call`` or ``Transact`` names
what to run, and both drivers find it here. A declared step's functions come
from the coordinator's registered definitions, a compensation stored by
reference from its resolver (as any process would find them), and a
context-manager block's own calls from the table its face fills while they run.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from saga._internal.codec import decode
from saga._internal.context import StepContext
from saga._internal.engine.effects import CodeRefs
from saga._internal.engine.forward import is_async
from saga._internal.engine.targets import Declared, Given, Referenced, Target
from saga._internal.errors import UnknownSagaError
from saga._internal.versions import Registry

Action = Callable[[StepContext], Any]
"""A step's action or compensation, as the drivers call it."""


class Functions:
    """Finds the function a target names, for one coordinator (both its drivers)."""

    def __init__(self, registry: Registry, resolver: CodeRefs) -> None:
        self._registry = registry
        self._resolver = resolver
        self._numbers = itertools.count(1)  # next() is atomic: scopes in threads share it
        self._given: dict[int, Action] = {}

    def action(self, target: Target) -> Action:
        """The function to call for ``target``, with the step's context."""
        match target:
            case Given(number):
                return self._given[number]
            case Referenced(ref, args):
                return _with_arguments(self._resolver.resolve(ref), args)
            case Declared():
                return self._declared(target)

    @contextlib.contextmanager
    def given(self, actions: Sequence[Action | None]) -> Iterator[list[Given | None]]:
        """Number a block's ``actions`` while the flow that runs them does (a None, a
        call the flow refuses before it runs anything, gets no number)."""
        numbers = [None if action is None else next(self._numbers) for action in actions]
        for number, action in zip(numbers, actions, strict=True):
            if number is not None and action is not None:
                self._given[number] = action
        try:
            yield [None if number is None else Given(number) for number in numbers]
        finally:
            for number in numbers:
                if number is not None:
                    self._given.pop(number, None)

    def _declared(self, target: Declared) -> Action:
        saga = self._registry.get(target.saga, target.version)
        step = None if saga is None else saga.by_name(target.step)
        if step is None:  # the engine names only steps of definitions registered here
            raise UnknownSagaError(
                f"no step {target.step!r} in a registered saga {target.saga!r} "
                f"version {target.version}"
            )
        if target.role == "action":
            return step.fn
        function = step.undo if target.role == "undo" else step.reconciler
        assert function is not None  # the engine names only what the step declares
        if target.role == "undo":  # run as before: a plain function, awaited if it was async
            return lambda context: function(context)
        return function


def bound(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Action:
    """``fn(*args, **kwargs)`` as a step action; an async ``fn`` stays a coroutine
    function, so the async driver awaits it on the loop (and can time it out)."""
    if is_async(fn):

        async def run_async(_context: Any) -> Any:
            return await fn(*args, **kwargs)

        return run_async

    def run(_context: Any) -> Any:
        return fn(*args, **kwargs)

    return run


def _with_arguments(function: Callable[..., Any], args: str | None) -> Action:
    """A compensation stored by reference, called with the step's result and the
    arguments stored with the step."""
    stored = decode(args) or {"args": [], "kwargs": {}}

    def undo_call(context: StepContext) -> Any:
        return function(context.result, *stored["args"], **stored["kwargs"])

    return undo_call
