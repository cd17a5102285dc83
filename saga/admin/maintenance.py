"""Looking after the database: ``saga purge`` (the schema: :mod:`saga.admin.schema`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from saga.admin.facts import FINISHED
from saga.coordinator import Coordinator
from saga.errors import ConfigurationError
from saga.ports import Deletable, ListQuery
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
    store = coord.store
    if not isinstance(store, Deletable):
        raise ConfigurationError(f"the store at {store.url} cannot delete sagas")
    query = ListQuery(status=tuple(statuses), older_than=older_than, limit=batch)
    total = 0
    while True:
        ids = [record.id for record in store.list(query)]
        deleted = store.delete(ids) if ids else 0
        total += deleted
        if progress is not None and deleted:
            progress(total)
        if deleted == 0:
            return total
