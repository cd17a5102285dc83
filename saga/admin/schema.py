"""The schema's revision: ``saga db status``, ``upgrade`` (``--sql``) and ``downgrade``.

These are the only ways saga's tables change, besides a store creating them in an
empty database on first use (see docs/upgrading.md).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Any

from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError
from saga._internal.ports import MigratableSchema


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaStatus:
    """Where a database's schema stands against this release of saga."""

    url: str
    revision: str | None
    """The revision the database is at (None: no saga tables yet)."""
    head: str
    """The revision this release needs."""
    pending: tuple[str, ...]
    """What ``saga db upgrade`` would apply, oldest first (described)."""
    verdict: str
    """empty, current, behind, ahead (a newer release's) or unknown (not saga's)."""
    legacy: int | None = None
    """The version a release before migrations recorded, if that is all there is."""

    @property
    def up_to_date(self) -> bool:
        return self.verdict == "current"

    @property
    def ahead(self) -> bool:
        """The database was made by a newer release of saga than this one."""
        return self.verdict == "ahead"

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "version": self.revision,  # the names of the first release, kept
            "expected": self.head,
            "revision": self.revision,
            "head": self.head,
            "pending": list(self.pending),
            "state": self.verdict,
            "up_to_date": self.up_to_date,
            "newer_than_this_release": self.ahead,
            "legacy_version": self.legacy,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaChange:
    """What ``saga db upgrade`` or ``downgrade`` did."""

    url: str
    applied: tuple[str, ...]
    direction: str  # "upgrade" or "downgrade"
    revision: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "direction": self.direction,
            "applied": list(self.applied),
            "revision": self.revision,
        }


def schema_status(coord: Coordinator) -> SchemaStatus:
    """The database's revision, this release's and what an upgrade would apply."""
    store, revisions = _migratable(coord)
    found = store.read_schema()
    todo: tuple[str, ...] = ()
    if found.state in ("empty", "behind"):
        todo = tuple(revisions.describe(r) for r in revisions.pending(found.at))
    legacy = found.legacy if found.revision is None else None
    return SchemaStatus(store.url, found.at, revisions.HEAD, todo, found.state, legacy)


def upgrade_schema(coord: Coordinator) -> SchemaChange:
    """Create saga's tables, or migrate them to this release's revision."""
    store, _ = _migratable(coord)
    applied = store.upgrade_schema()
    return SchemaChange(store.url, tuple(applied), "upgrade", store.schema_version())


def upgrade_sql(coord: Coordinator) -> str:
    """The SQL ``upgrade_schema`` would run, for a DBA to review (empty: nothing to do)."""
    store, _ = _migratable(coord)
    return store.upgrade_schema_sql()


def downgrade_schema(coord: Coordinator, revision: str) -> SchemaChange:
    """Reverse the migrations after ``revision`` (refused where one cannot be reversed)."""
    store, _ = _migratable(coord)
    undone = store.downgrade_schema(revision)
    return SchemaChange(store.url, tuple(undone), "downgrade", store.schema_version())


def _migratable(coord: Coordinator) -> tuple[MigratableSchema, ModuleType]:
    """The store, if its schema has revisions, and the module that names them."""
    store = coord.store
    if not isinstance(store, MigratableSchema):
        raise ConfigurationError(f"the store at {store.url} has no schema to manage")
    # Looked up only when asked for: the core never imports an adapter eagerly.
    return store, importlib.import_module("saga.adapters.sql.revisions")
