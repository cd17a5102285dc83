"""The schema's revision: ``saga db status``, ``upgrade`` (``--sql``) and ``downgrade``.

These are the only ways saga's tables change, besides a store creating them in an
empty database on first use (see docs/upgrading.md).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Any

from saga.coordinator import Coordinator
from saga.errors import ConfigurationError


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
    migrate, revisions = _sql(coord)
    store: Any = coord.store  # an SqlSagaStore: _sql checked
    found = store._retried(lambda: _read(store, migrate))
    verdict = found.verdict
    todo: tuple[str, ...] = ()
    if verdict.value in ("empty", "behind"):
        todo = tuple(revisions.describe(r) for r in revisions.pending(found.at))
    legacy = found.legacy if found.revision is None else None
    return SchemaStatus(store.url, found.at, revisions.HEAD, todo, verdict.value, legacy)


def upgrade_schema(coord: Coordinator) -> SchemaChange:
    """Create saga's tables, or migrate them to this release's revision."""
    migrate, _ = _sql(coord)
    store: Any = coord.store  # an SqlSagaStore: _sql checked
    applied = store._retried(lambda: migrate.upgrade(store))
    return SchemaChange(store.url, tuple(applied), "upgrade", store.schema_version())


def upgrade_sql(coord: Coordinator) -> str:
    """The SQL ``upgrade_schema`` would run, for a DBA to review (empty: nothing to do)."""
    migrate, _ = _sql(coord)
    store: Any = coord.store  # an SqlSagaStore: _sql checked
    return str(store._retried(lambda: migrate.upgrade_sql(store)))


def downgrade_schema(coord: Coordinator, revision: str) -> SchemaChange:
    """Reverse the migrations after ``revision`` (refused where one cannot be reversed)."""
    migrate, _ = _sql(coord)
    store: Any = coord.store  # an SqlSagaStore: _sql checked
    undone = store._retried(lambda: migrate.downgrade(store, revision))
    return SchemaChange(store.url, tuple(undone), "downgrade", store.schema_version())


def _read(store: Any, migrate: ModuleType) -> Any:
    with store._translated(), store.engine.connect() as connection:
        return migrate.read(connection)


def _sql(coord: Coordinator) -> tuple[ModuleType, ModuleType]:
    # Looked up only when asked for: the core never imports an adapter eagerly.
    if not hasattr(coord.store, "engine"):
        raise ConfigurationError(f"the store at {coord.store.url} has no schema to manage")
    migrate = importlib.import_module("saga.adapters.sql.migrate")
    revisions = importlib.import_module("saga.adapters.sql.revisions")
    return migrate, revisions
