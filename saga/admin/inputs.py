"""What the operator hands over, checked: a database and ``--app`` modules
become a coordinator; ids, statuses and durations become values, or an error
that says what to type instead.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
import uuid
from collections.abc import Iterable, Sequence

from saga._internal.coordinator import Coordinator
from saga._internal.definition import Saga, defined_saga, defined_versions
from saga._internal.errors import AmbiguousSagaError, ConfigurationError, UnknownSagaError
from saga._internal.listening import Listener
from saga._internal.policy import STORE_RETRY, RetryPolicy
from saga._internal.settings import parse_duration as parse_duration  # the admin command's too
from saga._internal.status import SagaStatus, parse_status
from saga._internal.versions import missing
from saga._internal.views import SagaView

CLI_STORE_RETRY = dataclasses.replace(STORE_RETRY, max_delay=0.5, max_elapsed=3.0)
"""An operator waits seconds, not the library's 30, to learn the database is unreachable."""


def import_apps(modules: Sequence[str]) -> None:
    """Import the operator's modules (``--app``) so that their sagas are defined here."""
    if modules and os.getcwd() not in sys.path:
        # The console script does not put the current directory on the path
        # the way ``python -m`` does; operators expect ``--app myproject.sagas``
        # to work from their project's root.
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ConfigurationError(
                f"cannot import --app module {name!r} ({error}); check the name and that it "
                "is importable from this directory or PYTHONPATH"
            ) from error
        except Exception as error:
            raise ConfigurationError(
                f"importing --app module {name!r} failed: {type(error).__name__}: {error}"
            ) from error


def open_coordinator(
    url: str | None = None,
    apps: Sequence[str] = (),
    *,
    lease_ttl: float | None = None,
    store_retry: RetryPolicy = CLI_STORE_RETRY,
    create_tables: bool = False,
) -> Coordinator:
    """A coordinator for operator work: ``apps`` imported and trusted, a short store retry;
    traced when OpenTelemetry is installed (see :func:`operator_listeners`). It creates
    no database and no tables unless asked (``create_tables``): a read from the wrong
    directory must say so, not report an empty database as all clear."""
    import_apps(apps)
    return Coordinator(
        url,
        lease_ttl=lease_ttl,
        trusted_modules=apps,
        store_retry=store_retry,
        listeners=operator_listeners(),
        create_tables=create_tables,
    )


def operator_listeners() -> list[Listener]:
    """A ``TracingListener`` on the global provider when ``saga[otel]`` is installed, so
    that an operator's ``saga recover`` joins the saga's trace wherever the process's
    tracing is configured (``opentelemetry-instrument saga ...``); a no-op tracer else."""
    try:
        from saga.otel import TracingListener
    except ImportError:
        return []
    return [TracingListener()]


@dataclasses.dataclass(frozen=True)
class ByKey:
    """A saga named the way the business knows it: its key (and its definition's name)."""

    key: str
    name: str | None = None


SagaRef = str | ByKey
"""A saga as an operator names it: an id, the first characters of one, or its key."""

_ID_PREFIX = re.compile(r"[0-9a-f][0-9a-f-]{3,35}")
_CANDIDATES = 5


def target(saga_id: str | None, key: str | None, name: str | None) -> SagaRef:
    """What ``ID`` or ``--key K [--name N]`` names (exactly one of the two)."""
    if key is not None and saga_id is not None:
        raise ConfigurationError("name the saga by ID or by --key, not both")
    if key is not None:
        return ByKey(key, name)
    if name is not None:
        raise ConfigurationError("--name goes with --key: name the saga by ID or by --key")
    if saga_id is None:
        raise ConfigurationError("name the saga: an ID (or its first characters) or --key")
    return saga_id


def saga_id_of(coord: Coordinator, ref: SagaRef) -> str:
    """The id of the saga ``ref`` names: a whole id, a unique prefix of one (at least 4
    characters), or a key. An ambiguous prefix or key is refused, listing candidates."""
    if isinstance(ref, ByKey):
        return coord.get(key=ref.key, name=ref.name).id
    text = ref.strip().lower()
    try:
        return str(uuid.UUID(text))
    except ValueError:
        pass
    if not _ID_PREFIX.fullmatch(text):
        return parse_saga_id(ref)  # says what an id looks like
    found = coord.list(id_prefix=text, limit=_CANDIDATES + 1)
    if not found:
        raise UnknownSagaError(f"no saga id starts with {text!r}; find ids with `saga list`")
    if len(found) > 1:
        shown = ", ".join(f"{v.id} ({v.name}, {v.status.value})" for v in found[:_CANDIDATES])
        more = " and more" if len(found) > _CANDIDATES else ""
        raise AmbiguousSagaError(
            f"{text!r} starts {len(found)}{'+' if more else ''} saga ids: {shown}{more}; "
            "type more of it"
        )
    return found[0].id


def parse_saga_id(text: str) -> str:
    """The canonical form of a saga id, or ``UnknownSagaError`` saying it cannot be one."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        raise UnknownSagaError(
            f"{text!r} is not a saga id (ids are UUIDs like 0b7e7c2e-4f7a-4c55-9d0e-"
            "5a2f8f1d3c11); find ids with `saga list`"
        ) from None


def parse_statuses(values: Iterable[str]) -> tuple[SagaStatus, ...]:
    """Statuses from ``--status`` values, each possibly comma-separated."""
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    return tuple(parse_status(name) for name in names)


def get_saga(coord: Coordinator, saga_id: SagaRef) -> SagaView:
    """The saga ``saga_id`` names (see :func:`saga_id_of`); an unknown or malformed one is
    ``UnknownSagaError`` with a hint."""
    try:
        return coord.get(saga_id_of(coord, saga_id))
    except UnknownSagaError as error:
        if "saga list" in str(error):  # the hint is there already
            raise
        raise UnknownSagaError(f"{error}; find ids with `saga list`") from None


def definition_of(view: SagaView) -> Saga | None:
    """The saga's declared definition, when this process knows it (``--app``)."""
    if view.kind != "declarative":
        return None
    return defined_saga(view.name, view.version)


def no_definition(coord: Coordinator, view: SagaView) -> str:
    """Why this process cannot act on a declarative saga: no definition of its version."""
    known = [saga.version for saga in defined_versions(view.name)]
    if known:
        return f"saga {view.id} {missing(view.name, view.version or 1, known)}"
    module = defining_module(coord, view.id)
    if module is None:  # started before the module was recorded, or by a script
        return f"no definition of saga {view.name!r} here; pass --app MODULE"
    return (
        f"no definition of saga {view.name!r} here; "
        f"pass --app {module} or run from a process that imports it"
    )


_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)


def defining_module(coord: Coordinator, saga_id: str) -> str | None:
    """The module that defined a declarative saga, as its start recorded it (if it did).

    Stored text is not trusted: anything but a dotted Python name is ignored.
    """
    events = coord.store.events(saga_id)
    started = next((e for e in events if e.kind == "saga_started"), None)
    module = None if started is None else (started.detail or {}).get("module")
    if isinstance(module, str) and _MODULE_NAME.fullmatch(module):
        return module
    return None
