"""The application as the admin command opens it.

``--app mypkg.sagas`` imports a module so its sagas are known; ``--app
mypkg.sagas:make_coordinator`` calls the application's own factory, so that ``saga
worker``, ``saga recover``, ``saga web`` and every other command run with the
coordinator the application runs with: its database, lease, listeners, session
factory and resources. The factory returns a ``Coordinator`` (closed when the command
ends), or is a context manager (or a generator function) yielding one, for
applications that start things before it and stop them after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from saga._internal.aio import AsyncCoordinator
from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError, SagaError
from saga._internal.policy import RetryPolicy
from saga.admin.inputs import CLI_STORE_RETRY, import_apps, open_coordinator


def split_apps(apps: Sequence[str]) -> tuple[list[str], str | None]:
    """The plain modules among ``apps``, and the one ``MODULE:FUNCTION`` factory if any."""
    factories = [app for app in apps if ":" in app]
    if len(factories) > 1:
        raise ConfigurationError(
            f"more than one --app factory ({', '.join(factories)}): one MODULE:FUNCTION builds "
            "the coordinator; name the other modules without ':FUNCTION'"
        )
    modules = [app for app in apps if ":" not in app]
    return modules, (factories[0] if factories else None)


@contextlib.contextmanager
def application(
    url: str | None = None,
    apps: Sequence[str] = (),
    *,
    lease_ttl: float | None = None,
    store_retry: RetryPolicy = CLI_STORE_RETRY,
    create_tables: bool = False,
) -> Iterator[Coordinator]:
    """The coordinator an admin command works with, closed when the block ends: the
    application factory's among ``apps`` if there is one, else one opened on ``url`` with
    the modules of ``apps`` trusted (see :func:`open_coordinator`)."""
    modules, factory = split_apps(apps)
    if factory is None:
        with open_coordinator(
            url,
            modules,
            lease_ttl=lease_ttl,
            store_retry=store_retry,
            create_tables=create_tables,
        ) as coord:
            yield coord
        return
    _refuse_overrides(factory, {"--db": url, "--lease-ttl": lease_ttl})
    module = factory.partition(":")[0]
    import_apps([*modules, module])
    with _built(factory, _factory_function(factory)) as coord:
        for trusted in (*modules, module):
            coord.resolver.trust(trusted)
        yield coord


def _refuse_overrides(factory: str, given: dict[str, object]) -> None:
    named = [option for option, value in given.items() if value is not None]
    if named:
        options = " and ".join(named)
        raise ConfigurationError(
            f"--app {factory} builds the coordinator, database and lease included; "
            f"set them in the factory, or drop {options}"
        )


def _factory_function(spec: str) -> Callable[[], Any]:
    module_name, _, attribute = spec.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigurationError(
                f"--app {spec}: module {module_name!r} has no {attribute!r}; "
                "name a function that returns a Coordinator"
            )
    if not callable(target):
        raise ConfigurationError(
            f"--app {spec} names a {type(target).__name__!r} object, not a function; "
            "name a function that returns a Coordinator"
        )
    return target  # type: ignore[no-any-return]


@contextlib.contextmanager
def _built(spec: str, factory: Callable[[], Any]) -> Iterator[Coordinator]:
    if inspect.isgeneratorfunction(factory):  # `yield coord` with set-up and tear-down
        factory = contextlib.contextmanager(factory)
    made = _called(spec, factory)
    if not isinstance(made, contextlib.AbstractContextManager):
        made = contextlib.nullcontext(made)
    coord: Coordinator | None = None
    try:
        with _Guarded(spec, made) as entered:
            coord = _coordinator_of(spec, entered)
            yield coord
    finally:  # after the factory's own tear-down, which may close it too (twice is harmless)
        if coord is not None:
            coord.close()


def _called(spec: str, factory: Callable[[], Any]) -> Any:
    try:
        return factory()
    except ConfigurationError:
        raise
    except Exception as error:
        raise ConfigurationError(_failed(spec, "the factory failed", error)) from error


class FactoryTeardownError(SagaError):
    """The factory's tear-down (after its ``yield``, or its ``__exit__``) raised once the
    command was done: one line for the operator, the command's own outcome kept."""


@dataclasses.dataclass
class _Guarded(contextlib.AbstractContextManager[Any]):
    """The factory's context manager, its failures named after it: at start-up (before
    the ``yield``) a ConfigurationError, at tear-down a FactoryTeardownError."""

    spec: str
    made: contextlib.AbstractContextManager[Any]

    def __enter__(self) -> Any:
        try:
            return self.made.__enter__()
        except ConfigurationError:
            raise
        except Exception as error:
            raise ConfigurationError(
                _failed(self.spec, "the factory failed at start-up", error)
            ) from error

    def __exit__(self, *raised: Any) -> bool | None:
        try:
            return self.made.__exit__(*raised)
        except Exception as error:
            if error is raised[1]:
                raise  # the command's own error, handed back by the factory's tear-down
            message = _failed(
                self.spec, "the factory's tear-down failed once the command ran", error
            )
            raise FactoryTeardownError(message) from error


def _failed(spec: str, what: str, error: Exception) -> str:
    return f"--app {spec}: {what}: {type(error).__name__}: {error}"


def _coordinator_of(spec: str, made: object) -> Coordinator:
    if isinstance(made, AsyncCoordinator):
        return made.sync  # the same store, resources and listeners, driven from threads
    if isinstance(made, Coordinator):
        return made
    raise ConfigurationError(
        f"--app {spec} returned {type(made).__name__!r}; it must return a Coordinator "
        "(or be a context manager that yields one)"
    )
