"""The in-memory store's listing: which sagas a ``ListQuery`` matches, and how a page
without payloads reads them (the SQL store's ``reads`` answers the same)."""

from __future__ import annotations

import dataclasses

from saga._internal.ports import ListQuery, SagaRecord, StepRecord
from saga._internal.record import current_step
from saga._internal.status import SagaStatus, StepStatus

_ACTIVE = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)


def stuck(saga: SagaRecord, now: float) -> bool:
    """An unfinished saga no process holds a live lease on."""
    expired = saga.lease_expires_at is not None and saga.lease_expires_at < now
    return saga.status in _ACTIVE and expired


def without_payloads(saga: SagaRecord) -> SagaRecord:
    """``saga`` as a listing without payloads reads it (``ListQuery.payloads``)."""
    steps = tuple(
        dataclasses.replace(s, args=None, result=None, error=_listed_error(s)) for s in saga.steps
    )
    return dataclasses.replace(saga, input=None, trace_context=None, steps=steps)


def _listed_error(step: StepRecord) -> str | None:
    """A compensating step's error stays in a listing: it can be the saga's headline."""
    return step.error if step.status is StepStatus.COMPENSATING else None


def matches(saga: SagaRecord, query: ListQuery, now: float) -> bool:
    if query.status and saga.status not in query.status:
        return False
    if query.name is not None and saga.name != query.name:
        return False
    if query.key is not None and saga.key != query.key:
        return False
    if query.id_prefix is not None and not saga.id.startswith(query.id_prefix):
        return False
    key = saga.key  # a saga without a key matches no prefix, as NULL LIKE is not true
    if query.key_prefix is not None and (key is None or not key.startswith(query.key_prefix)):
        return False
    if query.step is not None and _current_name(saga) != query.step:
        return False
    if query.stuck and not stuck(saga, now):
        return False
    created = saga.created_at or 0.0
    return query.older_than is None or created < now - query.older_than


def _current_name(saga: SagaRecord) -> str | None:
    step = current_step(saga)
    return None if step is None else step.name


def after_anchor(saga: SagaRecord, anchor: tuple[float | None, str] | None) -> bool:
    """Keyset paging: strictly older than the anchor saga (an unknown anchor matches none)."""
    if anchor is None:
        return True
    created_at, anchor_id = anchor
    if created_at is None or saga.created_at is None:
        return False
    return saga.created_at < created_at or (saga.created_at == created_at and saga.id < anchor_id)
