"""Looking after the database: ``saga purge`` (the schema: :mod:`saga.admin.schema`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError
from saga._internal.ports import Deletable, ListQuery
from saga._internal.status import SagaStatus
from saga.admin.facts import FINISHED

DEFAULT_PACE = 0.25
"""Purge works a quarter of the time and rests the rest: measured at a million sagas on a
2-core machine, the sagas running beside it were 8 % slower (at half the time, far more
on a busy machine; docs/operating.md, "Purging finished sagas")."""


def check_pace(pace: float) -> None:
    """Refuse a pace that is not a share of the time (before anything is asked or deleted)."""
    if not 0 < pace <= 1:
        raise ConfigurationError(
            f"--pace {pace:g} is not a share of the time: give a number above 0 and at most 1 "
            "(0.25, the default: purge works a quarter of the time; 1: flat out)"
        )


def purge(
    coord: Coordinator,
    *,
    older_than: float,
    statuses: Sequence[SagaStatus] = (SagaStatus.COMPLETED, SagaStatus.COMPENSATED),
    batch: int = 500,
    progress: Callable[[int], None] | None = None,
    pace: float = DEFAULT_PACE,
) -> int:
    """Delete finished sagas created more than ``older_than`` seconds ago; return how many.

    Their steps and events go with them, so a key used again afterwards
    starts a fresh saga. Each batch is one short transaction; ``pace`` is the
    share of the time purge works (after a batch that took t seconds it rests
    ``t * (1 - pace) / pace``), so that the sagas running beside it keep the
    database and the machine (1: flat out).
    """
    check_pace(pace)
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
        began = time.monotonic()
        ids = [record.id for record in store.list(query)]
        deleted = store.delete(ids) if ids else 0
        total += deleted
        if progress is not None and deleted:
            progress(total)
        if deleted == 0:
            return total
        time.sleep((time.monotonic() - began) * (1 - pace) / pace)
