"""Looking after the database: ``saga purge`` and ``saga db upgrade`` / ``status``."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from saga.admin.facts import FINISHED
from saga.coordinator import Coordinator
from saga.errors import ConfigurationError
from saga.ports import ListQuery
from saga.status import SagaStatus


def purge(
    coord: Coordinator,
    *,
    older_than: float,
    statuses: Sequence[SagaStatus] = (SagaStatus.COMPLETED, SagaStatus.COMPENSATED),
    batch: int = 500,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete finished sagas created more than ``older_than`` seconds ago; return how many.

    Their steps and events go with them, so a key used again afterwards
    starts a fresh saga.
    """
    unfinished = [s.value for s in statuses if s not in FINISHED]
    if unfinished or not statuses:
        raise ConfigurationError(
            f"purge deletes finished sagas only (completed, compensated, cancelled), not "
            f"{', '.join(unfinished) or 'nothing'}; a failed saga needs retry-compensation or "
            "mark-compensated first"
        )
    delete = getattr(coord.store, "delete", None)
    if delete is None:
        raise ConfigurationError(f"the store at {coord.store.url} cannot delete sagas")
    query = ListQuery(status=tuple(statuses), older_than=older_than, limit=batch)
    total = 0
    while True:
        ids = [record.id for record in coord.store.list(query)]
        deleted = int(delete(ids)) if ids else 0
        total += deleted
        if progress is not None and deleted:
            progress(total)
        if deleted == 0:
            return total


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaStatus:
    url: str
    version: int | None
    expected: int | None

    @property
    def up_to_date(self) -> bool:
        return self.version is not None and self.version == self.expected

    @property
    def ahead(self) -> bool:
        """The database was made by a newer release of saga than this one."""
        if self.version is None or self.expected is None:
            return False
        return self.version > self.expected

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "version": self.version,
            "expected": self.expected,
            "up_to_date": self.up_to_date,
            "newer_than_this_release": self.ahead,
        }


def schema_status(coord: Coordinator) -> SchemaStatus:
    """The schema version recorded in the database (None: no tables yet)."""
    return SchemaStatus(coord.store.url, coord.store.schema_version(), _expected_version())


def upgrade_schema(coord: Coordinator) -> SchemaStatus:
    """Create the tables, or migrate them to the version this code expects."""
    coord.store.create_schema()
    return schema_status(coord)


def _expected_version() -> int | None:
    # Looked up only when asked for: the core never imports an adapter eagerly.
    tables = importlib.import_module("saga.adapters.sql.tables")
    version = getattr(tables, "SCHEMA_VERSION", None)
    return version if isinstance(version, int) else None
