"""``Resources``: the clients, pools and settings a coordinator gives its steps.

A step reaches them as ``ctx.resources["bank"]`` (or ``ctx.resources.bank``), so it
is a plain function of its context: a test hands it a ``StepContext`` holding fakes.
The coordinator closes what it was asked to close when it closes, last added first,
so a worker started from the application's factory shuts down what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

from saga._internal.errors import ConfigurationError
from saga._internal.resource_view import NO_RESOURCES, ResourceView

__all__ = ["NO_RESOURCES", "Closer", "ResourceView", "Resources"]

T = TypeVar("T")
Closer = Callable[[], object]
"""Called at close; may return an awaitable (an async client's ``aclose()``)."""

log = logging.getLogger("saga.resources")


class Resources(ResourceView):
    """Named values for the steps of one coordinator: ``Coordinator(resources={...})``
    gives values the application keeps and closes itself; ``add(..., close=...)`` and
    ``enter(...)`` hand their closing to the coordinator.

    Steps run in threads (or tasks) side by side: a value shared here must be safe to
    use from several at once, as connection pools and HTTP clients are.
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._closers: list[tuple[str, Closer]] = []
        for name, value in (values or {}).items():
            self.add(name, value)

    # -- giving --------------------------------------------------------------------------

    def add(self, name: str, value: T, *, close: Callable[[T], object] | None = None) -> T:
        """Give ``value`` to the steps as ``name``; ``close(value)`` is called when the
        coordinator closes (it may be a coroutine function: ``AsyncCoordinator.close``
        awaits it). Returns ``value``."""
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a resource needs a name (a non-empty string), not {name!r}")
        if name in self._values:
            raise ConfigurationError(f"resource {name!r} is already given; give each name once")
        self._values[name] = value
        if close is not None:
            self._closers.append((name, lambda: close(value)))
        return value

    def enter(self, name: str, manager: contextlib.AbstractContextManager[T]) -> T:
        """Enter ``manager`` now and give what it yields as ``name``; it is exited when the
        coordinator closes (a pool, a client: anything used as ``with ... as x``)."""
        value = manager.__enter__()
        self.add(name, value, close=lambda _: manager.__exit__(None, None, None))
        return value

    async def aenter(self, name: str, manager: contextlib.AbstractAsyncContextManager[T]) -> T:
        """``enter`` for an async context manager (``httpx.AsyncClient()``); exited by
        ``AsyncCoordinator.close``, on the event loop that entered it."""
        value = await manager.__aenter__()
        self.add(name, value, close=lambda _: manager.__aexit__(None, None, None))
        return value

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Close what was handed over, last first; an error is logged and the others are
        still closed. An async closer runs to its end here when no event loop runs in
        this thread; inside one, close with ``await aclose()`` instead."""
        for name, closer in self._take_closers():
            with _logged(name):
                result = closer()
                if inspect.isawaitable(result):
                    _run_to_end(name, result)

    async def aclose(self) -> None:
        """Close what was handed over, last first, awaiting async closers on this loop."""
        for name, closer in self._take_closers():
            with _logged(name):
                result = closer()
                if inspect.isawaitable(result):
                    await result

    def _take_closers(self) -> list[tuple[str, Closer]]:
        closers, self._closers = self._closers, []
        return list(reversed(closers))


@contextlib.contextmanager
def _logged(name: str) -> Iterator[None]:
    try:
        yield
    except Exception:  # one resource failing to close must not keep the others open
        log.exception("closing resource %r failed", name)


def _run_to_end(name: str, awaitable: Awaitable[object]) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(_awaited(awaitable))
        return
    if inspect.iscoroutine(awaitable):
        awaitable.close()  # never awaited: say so instead of a "never awaited" warning
    log.warning(
        "resource %r has an async closer but was closed from running event-loop code "
        "without awaiting; close the AsyncCoordinator with `await coord.close()`",
        name,
    )


async def _awaited(awaitable: Awaitable[object]) -> None:
    await awaitable
