"""Several versions of one saga side by side.

A new run takes the newest version registered; an instance is resumed, compensated
and recovered by the version it started with, as long as that version is registered
with the same fingerprint (step names, order, dependencies, kinds). An instance whose
version is gone, or was edited in place, is refused with what to do.
"""

from __future__ import annotations

from typing import Protocol

from saga._internal.definition import Saga, defined_saga, defined_sagas, defined_versions
from saga._internal.errors import DefinitionError, UnknownSagaError
from saga._internal.known_functions import known_references
from saga._internal.ports import Runnable, SagaRecord
from saga._internal.views import view_of


class Registry:
    """The definitions a coordinator registered, by name and version."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[int, Saga]] = {}

    def add(self, saga: Saga) -> None:
        self._by_name.setdefault(saga.name, {})[saga.version] = saga

    def holds(self, saga: Saga) -> bool:
        return self.get(saga.name, saga.version) is saga

    def get(self, name: str, version: int) -> Saga | None:
        return self._by_name.get(name, {}).get(version)

    def newest(self, name: str) -> Saga | None:
        versions = self._by_name.get(name)
        return versions[max(versions)] if versions else None

    def versions(self, name: str) -> list[int]:
        return sorted(self._by_name.get(name, {}))

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def all(self) -> list[Saga]:
        return [saga for versions in self._by_name.values() for saga in versions.values()]


def record_version(record: SagaRecord) -> int:
    """The declared version an instance started with (1 for rows written before versions)."""
    try:
        return int(record.version) if record.version is not None else 1
    except ValueError:  # not a number: a corrupt row, reported by name and version
        return 0


def started_with(record: SagaRecord, saga: Saga | None, known: list[int]) -> Saga:
    """``saga`` if it is the definition ``record`` started with; refuse otherwise.

    ``saga`` is the registered definition of the record's name and version, or None;
    ``known`` are the versions of that name this process has.
    """
    version = record_version(record)
    if saga is None:
        raise DefinitionError(f"saga {record.id} {missing(record.name, version, known)}")
    if record.fingerprint is not None and record.fingerprint != saga.fingerprint:
        raise DefinitionError(
            f"saga {record.id} ({record.name!r}) started with definition version {version} "
            f"(fingerprint {record.fingerprint}) but this process's version {version} has "
            f"fingerprint {saga.fingerprint}: its steps changed in place. Restore version "
            f"{version} as it was and declare the change as a new version (see "
            "docs/upgrading.md), or compensate the saga"
        )
    return saga


def missing(name: str, version: int, known: list[int]) -> str:
    """Why a saga of ``name`` started with ``version`` cannot go on here, and what to do."""
    has = ", ".join(f"v{v}" for v in known) or "none"
    return (
        f"({name!r}) started with definition version {version}, which this process does "
        f"not have (it has {has}); deploy the code that defines {name!r} version {version} "
        "beside the newer one until its instances finish (`saga db check --app ...` lists them)"
    )


def lookup(registry: Registry, record: SagaRecord) -> tuple[Saga | None, list[int]]:
    """The definition for ``record``: registered, else defined in this process; and the
    versions of its name known here."""
    version = record_version(record)
    saga = registry.get(record.name, version)
    if saga is None:
        saga = next((s for s in defined_versions(record.name) if s.version == version), None)
    known = sorted(set(registry.versions(record.name)) | _defined(record.name))
    return saga, known


def _defined(name: str) -> set[int]:
    return {saga.version for saga in defined_versions(name)}


def runnable(registry: Registry) -> set[tuple[str, str, str]]:
    """(name, version, fingerprint) of every definition ``lookup`` can find: registered
    in ``registry`` or defined in this process. One that ``Saga.validate`` refuses is
    left out: a saga started with it would be refused anyway, and a name no backend
    can store (a NUL byte) in the claim's statement would fail every claim."""
    found = set()
    for saga in [*registry.all(), *defined_sagas()]:
        try:
            saga.validate()
            found.add((saga.name, str(saga.version), saga.fingerprint))
        except DefinitionError:
            continue
    return found


class TrustsModules(Protocol):
    """What the definitions read of the coordinator's ``saga._internal.refs.Resolver``."""

    trusted_modules: tuple[str, ...]


class Definitions:
    """Which definition a saga runs with, for one coordinator: what it registered,
    else what this process defined (the engine's verbs ask it; no reach-in needed)."""

    def __init__(self, resolver: TrustsModules) -> None:
        self.registry = Registry()
        self._resolver = resolver  # its trusted modules may grow (a module imported later)

    def register(self, *sagas: Saga) -> None:
        """Validate and keep ``sagas`` (versions of one name side by side)."""
        for saga in sagas:
            saga.validate()
            self.registry.add(saga)

    def definition(self, saga: Saga | str) -> Saga:
        """``saga`` itself (registered now if it was not), or the newest of that name."""
        if isinstance(saga, Saga):
            if not self.registry.holds(saga):
                self.register(saga)
            return saga
        known = self.registry.newest(saga) or defined_saga(saga)
        if known is None:
            raise UnknownSagaError(
                f"no saga definition named {saga!r}; register it (or import its module with --app)"
            )
        if not self.registry.holds(known):
            self.register(known)
        return known

    def started_with(self, record: SagaRecord) -> Saga:
        """The definition ``record`` started with: its version, with its fingerprint.
        ``DefinitionError`` naming both when this process has no such definition."""
        saga, known = lookup(self.registry, record)
        if saga is None and not known:  # no version at all: as for a run by name
            self.definition(record.name)
        saga = started_with(record, saga, known)
        if not self.registry.holds(saga):
            self.register(saga)
        return saga

    def saga_for(self, record: SagaRecord) -> Saga | None:
        """The definition a declarative ``record`` runs with (None: a context-manager one)."""
        view_of(record)  # CorruptRecordError before anything acts on a row with unreadable JSON
        if record.kind == "imperative":
            return None
        return self.started_with(record)

    def saga_if_known(self, record: SagaRecord) -> Saga | None:
        try:
            return self.saga_for(record)
        except UnknownSagaError:
            return None

    def runnable(self) -> Runnable:
        """Which stuck sagas this process can finish (see ``saga._internal.ports.Runnable``)."""
        modules = self._resolver.trusted_modules
        return Runnable(frozenset(runnable(self.registry)), modules, known_references())
