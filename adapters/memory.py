"""An in-process ``SagaStore`` for unit tests of pure logic: ``Coordinator("memory://")``.

It behaves like the SQL store where the core can tell: commits are fenced by
the epoch (``LeaseLostError``) and leave the lease to the heartbeat, a live
lease is never claimed, claims add one to the epoch, deadlines, pauses and cancel
requests make commits answer "stop", step rows are keyed by (saga, seq) with
unique names, events are numbered in order, and listing is newest first with
the same filters. Its clock is ``time.time()``, not a database's, and a
transactional step gets no session (``ctx.session`` is None). Nothing
survives the process: it proves nothing about crashes, durability or
concurrency between processes; use SQLite or PostgreSQL for that.
"""

from __future__ import annotations

import builtins
import collections
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from saga._internal.errors import (
    LeaseLostError,
    OperationRefusedError,
    SagaBusyError,
    SagaChangedError,
    StorageError,
    UnknownSagaError,
)
from saga._internal.ports import (
    CREATION_TICK,
    ClaimGuard,
    Commit,
    Event,
    EventRecord,
    ListQuery,
    Renewal,
    Runnable,
    SagaRecord,
    StepRecord,
    StepWrite,
    guard_broken,
)
from saga._internal.status import SagaStatus

from .memory_listing import after_anchor, matches, without_payloads
from .memory_listing import stuck as is_stuck

T = TypeVar("T")
SCHEMA_VERSION = "memory"  # nothing stored, nothing to migrate


@dataclasses.dataclass
class _Row:
    """One saga as stored: the record without steps, its steps by seq, its last commit."""

    saga: SagaRecord
    steps: dict[int, StepRecord] = dataclasses.field(default_factory=dict)
    token: str | None = None


class InMemorySagaStore:
    """A ``SagaStore`` kept in dictionaries behind one lock."""

    def __init__(self) -> None:
        self.url = "memory://"
        self._lock = threading.RLock()
        self._rows: dict[str, _Row] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._events: list[EventRecord] = []
        self._last_event_id = 0  # never reused, like the SQL store's sequence
        self._newest_created = 0.0

    # -- schema and lifecycle ---------------------------------------------------------

    def create_schema(self) -> None:
        """Nothing to create."""

    def schema_version(self) -> str | None:
        return SCHEMA_VERSION

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        """Nothing to release; the data stays readable until the store is dropped."""

    # -- writes -------------------------------------------------------------------------

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> tuple[SagaRecord, bool]:
        with self._lock:
            if saga.id in self._rows:
                return self._loaded(saga.id), True
            if saga.key is not None and (saga.name, saga.key) in self._keys:
                return self._loaded(self._keys[(saga.name, saga.key)]), False
            # A clock read twice alike (a test's, a coarse one) still lists in the order made.
            now = self._newest_created = max(self.now(), self._newest_created + CREATION_TICK)
            stored = dataclasses.replace(
                saga,
                created_at=now,
                updated_at=now,
                lease_expires_at=now + lease_ttl,
                deadline=None if saga.deadline is None else now + saga.deadline,  # relative here
                cancel_requested=False,
                stop=False,
                steps=(),
            )
            row = _Row(stored, token=first.token)
            self._write_steps(row, first.steps, now)  # may refuse: nothing is stored then
            self._rows[saga.id] = row
            if saga.key is not None:
                self._keys[(saga.name, saga.key)] = saga.id
            self._append_all(saga.id, first.epoch, first.events, now)
            return self._loaded(saga.id), True

    def commit(self, change: Commit) -> bool:
        with self._lock:
            row = self._fenced(change.saga_id, change.epoch)
            now = self.now()
            self._write_steps(row, change.steps, now)  # all or nothing, checked first
            row.saga = dataclasses.replace(row.saga, **_saga_changes(change, now))
            row.token = change.token
            self._append_all(change.saga_id, change.epoch, change.events, now)
            return _must_stop(row.saga, now)

    def transact(
        self, work: Callable[[Any], T], change_for: Callable[[T], Commit]
    ) -> tuple[T, bool]:
        """Run ``work(None)``, then apply ``change_for(result)``; nothing if ``work`` raises.

        There is no SQL session in memory: a transactional step gets
        ``ctx.session`` None here, so test steps that use it on SQLite.
        """
        result = work(None)
        return result, self.commit(change_for(result))

    def renew_many(self, held: Mapping[str, int], lease_ttl: float) -> Renewal:
        stop: set[str] = set()
        lost: set[str] = set()
        with self._lock:
            now = self.now()
            for saga_id, epoch in held.items():
                row = self._rows.get(saga_id)
                if row is None or row.saga.epoch != epoch:
                    lost.add(saga_id)
                    continue
                if row.saga.owner is not None:  # a lease given up stays free
                    row.saga = dataclasses.replace(row.saga, lease_expires_at=now + lease_ttl)
                if _must_stop(row.saga, now):
                    stop.add(saga_id)
        return Renewal(frozenset(stop), frozenset(lost))

    def claim(
        self,
        saga_id: str,
        owner: str,
        lease_ttl: float,
        event: Event,
        guard: ClaimGuard | None = None,
    ) -> SagaRecord:
        with self._lock:
            row = self._rows.get(saga_id)
            if row is None:
                raise UnknownSagaError(f"no saga with id {saga_id}")
            now = self.now()
            if row.saga.status.is_finished:  # it may have finished since the caller read it
                raise OperationRefusedError(
                    saga_id, f"saga {saga_id} is already {row.saga.status.value}"
                )
            changed = guard_broken(self._loaded(saga_id), guard)
            if changed is not None:
                raise SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {changed}")
            if not _free(row.saga, now):
                raise SagaBusyError(
                    saga_id,
                    f"saga {saga_id} is held by {row.saga.owner} whose lease is still live",
                    lease_remaining=_lease_remaining(row.saga, now),
                )
            self._take(row, owner, lease_ttl, now)
            detail = {"owner": owner, **(event.detail or {})}  # who took it, as the SQL store says
            self._append(saga_id, row.saga.epoch, dataclasses.replace(event, detail=detail), now)
            return self._loaded(saga_id)

    def claim_expired(
        self, owner: str, lease_ttl: float, limit: int, runnable: Runnable | None = None
    ) -> list[str]:
        with self._lock:
            now = self.now()
            admits = runnable.admits if runnable is not None else lambda _saga: True
            stuck = sorted(
                (
                    row
                    for row in self._rows.values()
                    if is_stuck(row.saga, now) and admits(self._loaded(row.saga.id))
                ),
                key=lambda row: row.saga.lease_expires_at or 0.0,
            )[: max(0, limit)]
            for row in stuck:
                self._take(row, owner, lease_ttl, now)
                claimed = Event("lease_claimed", detail={"owner": owner})
                self._append(row.saga.id, row.saga.epoch, claimed, now)
            return [row.saga.id for row in stuck]

    def request_cancel(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        with self._lock:
            row = self._rows.get(saga_id)
            if row is None:
                raise UnknownSagaError(f"no saga with id {saga_id}")
            if row.saga.status is not SagaStatus.RUNNING:
                return  # finished meanwhile: as the SQL store does
            changed = guard_broken(self._loaded(saga_id), guard)
            if changed is not None:
                raise SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {changed}")
            if row.saga.cancel_requested:
                return  # already requested
            row.saga = dataclasses.replace(row.saga, cancel_requested=True)
            self._append(saga_id, row.saga.epoch, event, self.now())

    def request_pause(self, saga_id: str, event: Event, guard: ClaimGuard | None = None) -> None:
        with self._lock:
            row = self._rows.get(saga_id)
            if row is None:
                raise UnknownSagaError(f"no saga with id {saga_id}")
            if row.saga.status is SagaStatus.PAUSED:
                return  # paused already: as the SQL store does
            changed = guard_broken(self._loaded(saga_id), guard)
            if row.saga.status is not SagaStatus.RUNNING or changed is not None:
                why = changed or f"it is {row.saga.status.value} now"
                raise SagaChangedError(saga_id, f"saga {saga_id} changed meanwhile: {why}")
            row.saga = dataclasses.replace(row.saga, status=SagaStatus.PAUSED)
            self._append(saga_id, row.saga.epoch, event, self.now())

    def record_event(self, saga_id: str, event: Event) -> None:
        with self._lock:
            row = self._rows.get(saga_id)  # unknown: kept with no epoch, as the SQL store does
            self._append(saga_id, None if row is None else row.saga.epoch, event, self.now())

    def record_fenced_event(self, saga_id: str, epoch: int, event: Event) -> bool:
        with self._lock:
            row = self._rows.get(saga_id)
            if row is None or row.saga.epoch != epoch:
                return False
            self._append(saga_id, epoch, event, self.now())
            return True

    def delete(self, saga_ids: Sequence[str]) -> int:
        """Delete these sagas with their steps and events; return how many went."""
        with self._lock:
            doomed = {saga_id for saga_id in saga_ids if saga_id in self._rows}
            for saga_id in doomed:
                saga = self._rows.pop(saga_id).saga
                if saga.key is not None:
                    self._keys.pop((saga.name, saga.key), None)
            self._events = [e for e in self._events if e.saga_id not in doomed]
            return len(doomed)

    # -- reads --------------------------------------------------------------------------

    def load(self, saga_id: str) -> SagaRecord | None:
        with self._lock:
            return self._loaded(saga_id) if saga_id in self._rows else None

    def find(self, name: str, key: str) -> SagaRecord | None:
        with self._lock:
            saga_id = self._keys.get((name, key))
            return None if saga_id is None else self._loaded(saga_id)

    def list(self, query: ListQuery) -> list[SagaRecord]:
        with self._lock:
            now = self.now()
            anchor = self._anchor(query.before)
            sagas = (
                row.saga if query.step is None else self._loaded(row.saga.id)  # with its steps
                for row in self._rows.values()
            )
            chosen = [s for s in sagas if matches(s, query, now) and after_anchor(s, anchor)]
            chosen.sort(key=lambda saga: (saga.created_at or 0.0, saga.id), reverse=True)
            found = [self._loaded(saga.id) for saga in chosen[: max(0, query.limit)]]
        return found if query.payloads else [without_payloads(saga) for saga in found]

    def status_counts(
        self, cap: int | None = None, statuses: Collection[SagaStatus] | None = None
    ) -> dict[SagaStatus, int]:
        with self._lock:
            counts = collections.Counter(row.saga.status for row in self._rows.values())
        wanted = counts.keys() if statuses is None else set(statuses) & counts.keys()
        return {s: counts[s] if cap is None else min(counts[s], cap + 1) for s in wanted}

    def stuck_count(self) -> int:
        now = self.now()
        with self._lock:
            return sum(1 for row in self._rows.values() if is_stuck(row.saga, now))

    def events(self, saga_id: str) -> builtins.list[EventRecord]:  # list: the method
        with self._lock:
            return [e for e in self._events if e.saga_id == saga_id]

    # -- internals ----------------------------------------------------------------------

    def _loaded(self, saga_id: str) -> SagaRecord:
        row = self._rows[saga_id]
        return dataclasses.replace(row.saga, steps=tuple(row.steps[s] for s in sorted(row.steps)))

    def _fenced(self, saga_id: str, epoch: int) -> _Row:
        """The saga's row if ``epoch`` is still current (``LeaseLostError`` otherwise)."""
        row = self._rows.get(saga_id)
        if row is None or row.saga.epoch != epoch:
            raise LeaseLostError(saga_id, epoch)
        return row

    def _take(self, row: _Row, owner: str, lease_ttl: float, now: float) -> None:
        row.saga = dataclasses.replace(
            row.saga, epoch=row.saga.epoch + 1, owner=owner, lease_expires_at=now + lease_ttl
        )

    def _anchor(self, before: str | None) -> tuple[float | None, str] | None:
        if before is None:
            return None
        row = self._rows.get(before)
        return (None if row is None else row.saga.created_at, before)

    def _write_steps(self, row: _Row, writes: Sequence[StepWrite], now: float) -> None:
        """Apply step writes all or nothing, with the SQL store's uniqueness rules."""
        steps = dict(row.steps)
        for write in writes:
            step = write.step
            stamp: dict[str, Any] = {f"{write.stamp}_at": now} if write.stamp else {}
            if write.new:
                clash = step.seq in steps or any(s.name == step.name for s in steps.values())
                if clash:
                    raise StorageError(
                        f"{self.url}: saga {row.saga.id} already has step {step.name!r} "
                        f"or seq {step.seq}"
                    )
                times: dict[str, Any] = {"started_at": None, "finished_at": None, **stamp}
                steps[step.seq] = dataclasses.replace(step, **times)
            elif step.seq in steps:  # like UPDATE ... WHERE seq = ?: a missing row is no-op
                steps[step.seq] = dataclasses.replace(
                    steps[step.seq], **_step_changes(step), **stamp
                )
        row.steps = steps

    def _append_all(self, saga_id: str, epoch: int, events: Sequence[Event], now: float) -> None:
        for event in events:
            self._append(saga_id, epoch, event, now)

    def _append(self, saga_id: str, epoch: int | None, event: Event, now: float) -> None:
        detail = None if event.detail is None else json.loads(json.dumps(event.detail))
        self._last_event_id += 1
        record = EventRecord(
            id=self._last_event_id,
            saga_id=saga_id,
            at=now,
            kind=event.kind,
            step=event.step,
            attempt=event.attempt,
            epoch=epoch,
            detail=detail,
        )
        self._events.append(record)


def _saga_changes(change: Commit, now: float) -> dict[str, Any]:
    """The instance columns a commit sets, as the SQL store sets them.

    The lease is left alone (the heartbeat renews it) unless the commit
    releases it, which expires it at once (an unfinished saga shows as stuck) or
    ``release_for`` seconds later.
    """
    values: dict[str, Any] = {"updated_at": now}
    if change.release:
        values.update(owner=None, lease_expires_at=now + change.release_for)
    if change.status is not None:
        values["status"] = change.status
    if change.error is not None:
        values["error"] = change.error
    return values


def _step_changes(step: StepRecord) -> dict[str, Any]:
    """The step columns an update rewrites; the rest are fixed when the step is inserted."""
    return {
        "status": step.status,
        "attempt": step.attempt,
        "undo_attempt": step.undo_attempt,
        "result": step.result,
        "output_digest": step.output_digest,
        "error": step.error,
    }


def _must_stop(saga: SagaRecord, now: float) -> bool:
    """A cancel was requested, an operator paused it, or the deadline passed."""
    paused = saga.status is SagaStatus.PAUSED
    return saga.cancel_requested or paused or (saga.deadline is not None and saga.deadline < now)


def _free(saga: SagaRecord, now: float) -> bool:
    """A live lease is never taken, not even by its own owner (another of its threads may
    be executing the saga)."""
    expired = saga.lease_expires_at is not None and saga.lease_expires_at < now
    return saga.owner is None or expired


def _lease_remaining(saga: SagaRecord, now: float) -> float | None:
    """Seconds left on the saga's lease (``None`` for a lease without an end)."""
    return None if saga.lease_expires_at is None else saga.lease_expires_at - now
