"""The storage port's contract, as tests every store runs (eventsourcing-style).

:class:`StoreContract` holds the tests of ``SagaStore``; a concrete subclass per
store supplies the ``store`` fixture (tests/unit/test_memory_store.py,
tests/integration/test_sql_stores.py). :class:`AsyncStoreContract` does the
same for the async form of the port. Nothing here is collected by itself: the
classes' names do not start with ``Test``.

Times come from the store's own clock (the database's, for SQL). Where a test
needs a lease that ran out, it creates or claims the saga with a lease that
is already over (:data:`EXPIRED`) rather than waiting; where it needs time to
pass, :meth:`StoreContract.wait` lets it (the in-memory store moves a clock
the test holds, the others sleep).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session

from saga import (
    LeaseLostError,
    OperationRefusedError,
    SagaBusyError,
    SagaChangedError,
    SagaStatus,
    StepKind,
    StepStatus,
    StorageError,
    UnknownSagaError,
)
from saga._internal.ports import (
    AsyncSagaStore,
    ClaimGuard,
    Commit,
    Deletable,
    Event,
    ListQuery,
    Renewal,
    Runnable,
    SagaRecord,
    SagaStore,
    StepRecord,
    StepWrite,
)
from saga._internal.record import current_step

TTL = 10.0
"""A lease that stays live for the length of any test."""
EXPIRED = -10.0
"""A lease that ran out before it was granted: claimable at once."""


def saga_record(
    name: str = "order", key: str | None = None, owner: str = "a", saga_id: str | None = None
) -> SagaRecord:
    return SagaRecord(
        id=saga_id or str(uuid.uuid4()),
        name=name,
        key=key,
        kind="declarative",
        status=SagaStatus.RUNNING,
        input='{"sku":"A1"}',
        version="v1",
        owner=owner,
        epoch=1,
    )


def running(name: str, seq: int, attempt: int = 1) -> StepRecord:
    return StepRecord(name, seq, StepStatus.RUNNING, attempt)


def create(store: SagaStore, ttl: float = TTL, **options: Any) -> SagaRecord:
    """A running saga with one running step ``reserve``, as the store holds it."""
    saga = saga_record(**options)
    first = Commit(saga.id, 1, steps=(StepWrite(running("reserve", 1), new=True, stamp="started"),))
    _, created = store.create(saga, first, ttl)
    assert created
    return loaded(store, saga.id)


def started(store: SagaStore, ttl: float, *before: Event) -> SagaRecord:
    """A saga created with step ``reserve`` started (attempt 1) and its ``step_started``
    event after ``before``: the commit PostgreSQL's writer folds the start into."""
    saga = saga_record()
    first = Commit(
        saga.id,
        1,
        steps=(StepWrite(running("reserve", 1), new=True, stamp="started"),),
        events=(*before, Event("step_started", "reserve", 1)),
    )
    store.create(saga, first, ttl)
    return saga


def loaded(store: SagaStore, saga_id: str) -> SagaRecord:
    record = store.load(saga_id)
    assert record is not None
    return record


def kinds(store: SagaStore, saga_id: str) -> list[str]:
    return [e.kind for e in store.events(saga_id)]


class StoreContract:
    """What every ``SagaStore`` does. Subclasses provide the ``store`` fixture."""

    tolerance = 0.5
    """How far apart, in seconds, two times the store takes in one transaction may be
    (PostgreSQL reads its clock afresh for each column: microseconds apart)."""
    gap = 0.2
    """Seconds between writes whose times a test must tell apart."""

    @pytest.fixture
    def store(self) -> Iterator[SagaStore]:
        raise NotImplementedError  # pragma: no cover - each backend's subclass says

    def wait(self, store: SagaStore, seconds: float) -> None:
        """Let ``seconds`` pass on the store's clock."""
        time.sleep(seconds)

    def near(self, a: float | None, b: float | None) -> bool:
        assert a is not None
        assert b is not None
        return abs(a - b) <= self.tolerance

    def session_expected(self, session: object) -> bool:
        """Whether ``session`` is what a transactional step gets from this store."""
        return isinstance(session, Session)

    # -- creation -----------------------------------------------------------------------

    def test_create_stamps_times_and_lease_from_the_store_clock(self, store: SagaStore) -> None:
        before = store.now()
        saga = create(store)
        after = store.now()
        assert saga.created_at is not None
        assert before <= saga.created_at <= after
        assert self.near(saga.updated_at, saga.created_at)
        assert self.near(saga.lease_expires_at, saga.created_at + TTL)
        assert self.near(saga.steps[0].started_at, saga.created_at)
        assert saga.steps[0].finished_at is None
        assert (saga.status, saga.owner, saga.epoch, saga.input) == (
            SagaStatus.RUNNING,
            "a",
            1,
            '{"sku":"A1"}',
        )

    def test_create_with_a_taken_key_returns_the_existing_saga(self, store: SagaStore) -> None:
        first = create(store, key="k")
        again, created = store.create(saga_record(key="k"), Commit("other", 1), TTL)
        assert not created
        assert again.id == first.id
        assert store.find("order", "k") == first

    def test_sagas_without_a_key_never_clash(self, store: SagaStore) -> None:
        create(store)
        create(store)
        assert len(store.list(ListQuery())) == 2

    def test_a_rejected_create_stores_nothing(self, store: SagaStore) -> None:
        saga = saga_record(key="k")
        twice = (StepWrite(running("a", 1), new=True), StepWrite(running("b", 1), new=True))
        with pytest.raises(StorageError):
            store.create(
                saga, Commit(saga.id, 1, steps=twice, events=(Event("saga_started"),)), TTL
            )
        assert store.load(saga.id) is None
        assert store.find("order", "k") is None
        assert store.events(saga.id) == []

    def test_a_deadline_is_kept_as_an_absolute_time_and_stops_the_saga(
        self, store: SagaStore
    ) -> None:
        saga = dataclasses.replace(saga_record(), deadline=5.0)  # seconds from now, at creation
        store.create(saga, Commit(saga.id, 1), TTL)
        stored = loaded(store, saga.id)
        assert stored.created_at is not None
        assert self.near(stored.deadline, stored.created_at + 5.0)
        assert store.commit(Commit(saga.id, 1)) is False
        late = dataclasses.replace(saga_record(), deadline=-1.0)  # passed already
        store.create(late, Commit(late.id, 1), TTL)
        assert store.commit(Commit(late.id, 1)) is True
        assert store.renew_many({late.id: 1, saga.id: 1}, TTL).stop == {late.id}

    # -- commits ------------------------------------------------------------------------

    def test_commit_writes_steps_status_and_events_but_leaves_the_lease(
        self, store: SagaStore
    ) -> None:
        saga = create(store)
        self.wait(store, self.gap)
        done = StepRecord("reserve", 1, StepStatus.SUCCEEDED, 1, result='{"id":1}')
        change = Commit(
            saga.id,
            1,
            status=SagaStatus.COMPENSATING,
            error="why",
            steps=(StepWrite(done, stamp="finished"),),
            events=(Event("step_succeeded", "reserve", 1, {"n": 1}),),
        )
        assert store.commit(change) is False
        after = loaded(store, saga.id)
        assert (after.status, after.error) == (SagaStatus.COMPENSATING, "why")
        assert after.updated_at is not None
        assert saga.updated_at is not None
        assert after.updated_at > saga.updated_at
        assert after.lease_expires_at == saga.lease_expires_at  # renewing is the heartbeat's job
        step = after.steps[0]
        assert (step.status, step.result, step.started_at) == (
            StepStatus.SUCCEEDED,
            '{"id":1}',
            saga.steps[0].started_at,
        )
        assert self.near(step.finished_at, after.updated_at)
        [event] = [e for e in store.events(saga.id) if e.kind == "step_succeeded"]
        assert (event.step, event.attempt, event.epoch, event.detail) == ("reserve", 1, 1, {"n": 1})
        assert self.near(event.at, after.updated_at)

    def test_an_update_rewrites_only_the_mutable_step_columns(self, store: SagaStore) -> None:
        saga = create(store)
        forged = StepRecord("renamed", 1, StepStatus.SUCCEEDED, 1, action_ref="os:system")
        store.commit(Commit(saga.id, 1, steps=(StepWrite(forged),)))
        step = loaded(store, saga.id).steps[0]
        assert (step.name, step.action_ref) == ("reserve", None)
        assert step.status is StepStatus.SUCCEEDED

    def test_an_update_of_an_unknown_step_changes_nothing(self, store: SagaStore) -> None:
        saga = create(store)
        ghost = StepRecord("ghost", 9, StepStatus.SUCCEEDED, 1)
        store.commit(Commit(saga.id, 1, steps=(StepWrite(ghost),)))
        assert loaded(store, saga.id).steps == saga.steps

    def test_a_stale_epoch_writes_nothing(self, store: SagaStore) -> None:
        saga = create(store, ttl=EXPIRED, owner="a")
        store.claim(saga.id, "b", TTL, Event("lease_claimed"))
        before = (store.load(saga.id), store.events(saga.id))
        stale = Commit(saga.id, 1, status=SagaStatus.COMPLETED, events=(Event("saga_completed"),))
        with pytest.raises(LeaseLostError) as caught:
            store.commit(stale)
        assert (caught.value.saga_id, caught.value.epoch) == (saga.id, 1)
        assert (store.load(saga.id), store.events(saga.id)) == before

    def test_commit_to_an_unknown_saga_is_a_lost_lease(self, store: SagaStore) -> None:
        with pytest.raises(LeaseLostError):
            store.commit(Commit("nope", 1))

    def test_a_duplicate_step_rolls_the_whole_commit_back(self, store: SagaStore) -> None:
        saga = create(store)
        change = Commit(
            saga.id,
            1,
            status=SagaStatus.COMPLETED,
            steps=(StepWrite(running("charge", 1), new=True),),  # seq 1 is reserve's
            events=(Event("saga_completed"),),
        )
        with pytest.raises(StorageError):
            store.commit(change)
        after = loaded(store, saga.id)
        assert after.status is SagaStatus.RUNNING
        assert [s.name for s in after.steps] == ["reserve"]
        assert "saga_completed" not in kinds(store, saga.id)

    def test_release_drops_owner_and_expires_the_lease_at_once(self, store: SagaStore) -> None:
        saga = create(store)
        store.commit(Commit(saga.id, 1, release=True))
        after = loaded(store, saga.id)
        assert after.owner is None
        assert self.near(after.lease_expires_at, after.updated_at)
        self.wait(store, 0.01)
        assert [s.id for s in store.list(ListQuery(stuck=True))] == [saga.id]

    def test_a_release_for_a_while_keeps_recoverers_off_until_then(self, store: SagaStore) -> None:
        saga = create(store)
        store.commit(
            Commit(saga.id, 1, status=SagaStatus.COMPENSATING, release=True, release_for=600)
        )
        after = loaded(store, saga.id)
        assert after.owner is None
        assert after.updated_at is not None
        assert self.near(after.lease_expires_at, after.updated_at + 600)
        assert store.claim_expired("r", TTL, limit=10) == []
        assert store.list(ListQuery(stuck=True)) == []
        # A claim of this very saga (a caller re-running its key) takes it all the same.
        assert store.claim(saga.id, "b", TTL, Event("lease_claimed")).epoch == 2

    # -- history --------------------------------------------------------------------------
    # PostgreSQL's writer folds a step's start and success events into the step row
    # (adapters/sql/folding.py); these tests hold every store to the same history.

    def test_history_keeps_every_start_and_success_in_order_across_attempts_and_claims(
        self, store: SagaStore
    ) -> None:
        saga = started(store, EXPIRED, Event("saga_started"))
        again = StepWrite(running("reserve", 1, attempt=2), stamp="started")
        failed = Event("attempt_failed", "reserve", 1, {"error": "boom"})
        store.commit(
            Commit(saga.id, 1, steps=(again,), events=(failed, Event("step_started", "reserve", 2)))
        )
        store.claim(saga.id, "b", TTL, Event("lease_claimed"))  # epoch 2, mid-attempt
        reserved = StepRecord("reserve", 1, StepStatus.SUCCEEDED, 2, result='"R"')
        store.commit(
            Commit(
                saga.id,
                2,
                steps=(
                    StepWrite(reserved, stamp="finished"),
                    StepWrite(running("charge", 2), new=True, stamp="started"),
                ),
                events=(Event("step_succeeded", "reserve", 2), Event("step_started", "charge", 1)),
            )
        )
        charged = StepRecord("charge", 2, StepStatus.SUCCEEDED, 1, result='"C"')
        store.commit(
            Commit(
                saga.id,
                2,
                status=SagaStatus.COMPLETED,
                steps=(StepWrite(charged, stamp="finished"),),
                events=(Event("step_succeeded", "charge", 1), Event("saga_completed")),
            )
        )
        history = store.events(saga.id)
        assert [(e.kind, e.step, e.attempt, e.epoch) for e in history] == [
            ("saga_started", None, None, 1),
            ("step_started", "reserve", 1, 1),
            ("attempt_failed", "reserve", 1, 1),
            ("step_started", "reserve", 2, 1),
            ("lease_claimed", None, None, 2),
            ("step_succeeded", "reserve", 2, 2),
            ("step_started", "charge", 1, 2),
            ("step_succeeded", "charge", 1, 2),
            ("saga_completed", None, None, 2),
        ]
        assert [e.id for e in history] == sorted({e.id for e in history})
        assert history[2].detail == {"error": "boom"}
        steps = loaded(store, saga.id).steps
        assert self.near(history[3].at, steps[0].started_at)
        assert self.near(history[5].at, steps[0].finished_at)

    def test_history_keeps_a_success_a_later_reset_rewrote_the_step_over(
        self, store: SagaStore
    ) -> None:
        saga = create(store)
        store.commit(Commit(saga.id, 1, events=(Event("step_started", "reserve", 1),)))
        done = StepRecord("reserve", 1, StepStatus.SUCCEEDED, 1, result='"R"')
        succeeded = Event("step_succeeded", "reserve", 1)
        store.commit(
            Commit(saga.id, 1, steps=(StepWrite(done, stamp="finished"),), events=(succeeded,))
        )
        reset = StepRecord("reserve", 1, StepStatus.PENDING, 0)
        store.commit(
            Commit(
                saga.id, 1, steps=(StepWrite(reset),), events=(Event("step_reset", "reserve", 0),)
            )
        )
        rerun = StepWrite(running("reserve", 1), stamp="started")
        store.commit(
            Commit(saga.id, 1, steps=(rerun,), events=(Event("step_started", "reserve", 1),))
        )
        assert [(e.kind, e.attempt) for e in store.events(saga.id)] == [
            ("step_started", 1),
            ("step_succeeded", 1),
            ("step_reset", 0),
            ("step_started", 1),
        ]

    def test_history_keeps_both_starts_of_an_attempt_started_twice(self, store: SagaStore) -> None:
        saga = started(store, TTL)
        again = StepWrite(running("reserve", 1), stamp="started")
        store.commit(
            Commit(saga.id, 1, steps=(again,), events=(Event("step_started", "reserve", 1),))
        )
        assert [(e.kind, e.attempt) for e in store.events(saga.id)] == [("step_started", 1)] * 2

    def test_history_keeps_the_start_of_a_step_a_transaction_then_finished(
        self, store: SagaStore
    ) -> None:
        saga = started(store, TTL)
        done = StepRecord("reserve", 1, StepStatus.SUCCEEDED, 1, result='"R1"')
        finished = Commit(
            saga.id,
            1,
            steps=(StepWrite(done, stamp="finished"),),
            events=(Event("step_succeeded", "reserve", 1),),
        )
        store.transact(lambda session: "R1", lambda result: finished)
        assert [(e.kind, e.attempt, e.epoch) for e in store.events(saga.id)] == [
            ("step_started", 1, 1),
            ("step_succeeded", 1, 1),
        ]

    # -- transactional steps --------------------------------------------------------------

    def test_transact_applies_the_change_built_from_the_work_result(self, store: SagaStore) -> None:
        saga = create(store)
        done = StepRecord("reserve", 1, StepStatus.SUCCEEDED, 1, result='"R1"')

        def change_for(result: str) -> Commit:
            assert result == "R1"
            return Commit(saga.id, 1, steps=(StepWrite(done, stamp="finished"),))

        def work(session: object) -> str:
            return "R1" if self.session_expected(session) else "?"

        assert store.transact(work, change_for) == ("R1", False)
        assert loaded(store, saga.id).steps[0].status is StepStatus.SUCCEEDED

    def test_transact_applies_nothing_when_the_work_raises(self, store: SagaStore) -> None:
        saga = create(store)
        before = store.load(saga.id)

        def work(session: object) -> str:
            raise ValueError("constraint violated")

        with pytest.raises(ValueError, match="constraint"):
            store.transact(work, lambda result: Commit(saga.id, 1, status=SagaStatus.FAILED))
        assert store.load(saga.id) == before

    # -- leases -------------------------------------------------------------------------

    def test_renew_many_extends_the_leases_still_held_and_reports_the_lost(
        self, store: SagaStore
    ) -> None:
        saga = create(store, ttl=1.0)
        taken = create(store, ttl=EXPIRED)
        store.claim(taken.id, "rival", TTL, Event("lease_claimed"))  # epoch 2 now
        self.wait(store, self.gap)
        before = store.now()
        renewal = store.renew_many({saga.id: 1, taken.id: 1, "gone": 1}, TTL)
        after = store.now()
        assert renewal == Renewal(stop=frozenset(), lost=frozenset({taken.id, "gone"}))
        lease = loaded(store, saga.id).lease_expires_at
        assert lease is not None
        assert before + TTL <= lease <= after + TTL
        assert loaded(store, taken.id).owner == "rival"
        assert store.renew_many({saga.id: 2}, TTL) == Renewal(lost=frozenset({saga.id}))
        assert store.renew_many({}, TTL) == Renewal()

    def test_a_renewal_leaves_a_lease_given_up_free_and_does_not_call_it_lost(
        self, store: SagaStore
    ) -> None:
        """The heartbeat may renew between a saga's hand-back (or final) commit and its
        holder letting go: the lease must stay free for the next owner to claim at once."""
        saga = create(store)
        store.commit(Commit(saga.id, 1, release=True))
        released = loaded(store, saga.id)
        assert released.owner is None
        assert store.renew_many({saga.id: 1}, 3600.0) == Renewal()
        assert loaded(store, saga.id).lease_expires_at == released.lease_expires_at
        claimed = store.claim(saga.id, "next", TTL, Event("lease_claimed"))
        assert (claimed.owner, claimed.epoch) == ("next", 2)

    def test_claim_is_refused_while_another_owner_lease_is_live(self, store: SagaStore) -> None:
        live = create(store, owner="a")
        with pytest.raises(SagaBusyError, match="held by a"):
            store.claim(live.id, "b", TTL, Event("lease_claimed"))
        assert loaded(store, live.id).epoch == 1
        expired = create(store, ttl=EXPIRED, owner="a")
        claimed = store.claim(expired.id, "b", TTL, Event("lease_claimed"))
        assert (claimed.owner, claimed.epoch) == ("b", 2)
        assert store.events(expired.id)[-1].epoch == 2
        assert store.events(expired.id)[-1].detail == {"owner": "b"}

    def test_a_refused_claim_says_how_long_the_lease_has_left(self, store: SagaStore) -> None:
        live = create(store, owner="a")
        with pytest.raises(SagaBusyError) as refused:
            store.claim(live.id, "b", TTL, Event("lease_claimed"))
        left = refused.value.lease_remaining
        assert left is not None
        assert 0 < left <= TTL + self.tolerance

    def test_a_live_lease_is_not_taken_even_by_its_owner(self, store: SagaStore) -> None:
        saga = create(store, owner="a")
        with pytest.raises(SagaBusyError):
            store.claim(saga.id, "a", TTL, Event("lease_claimed"))

    def test_a_released_saga_can_be_claimed_at_once(self, store: SagaStore) -> None:
        saga = create(store, owner="a")
        store.commit(Commit(saga.id, 1, status=SagaStatus.FAILED, release=True))
        assert store.claim(saga.id, "b", TTL, Event("operator_action")).epoch == 2

    def test_a_finished_saga_is_not_claimed(self, store: SagaStore) -> None:
        saga = create(store)
        store.commit(Commit(saga.id, 1, status=SagaStatus.COMPLETED, release=True))
        with pytest.raises(OperationRefusedError, match="already completed"):
            store.claim(saga.id, "b", TTL, Event("operator_action"))

    def test_claiming_an_unknown_saga_raises(self, store: SagaStore) -> None:
        with pytest.raises(UnknownSagaError):
            store.claim("nope", "a", TTL, Event("lease_claimed"))

    def test_a_claim_whose_guard_fails_changes_nothing(self, store: SagaStore) -> None:
        saga = create(store, ttl=EXPIRED)
        pivot = StepRecord("charge", 2, StepStatus.SUCCEEDED, 1, kind=StepKind.PIVOT)
        store.commit(Commit(saga.id, 1, steps=(StepWrite(pivot, new=True),)))
        running_only = frozenset({SagaStatus.RUNNING})
        broken = (
            ClaimGuard(frozenset({SagaStatus.FAILED})),
            ClaimGuard(running_only, epoch=7),
            ClaimGuard(running_only, before_pivot=True),
        )
        before = (store.load(saga.id), store.events(saga.id))
        for guard in broken:
            with pytest.raises(SagaChangedError):
                store.claim(saga.id, "op", TTL, Event("operator_action"), guard)
        assert (store.load(saga.id), store.events(saga.id)) == before
        held = ClaimGuard(running_only, epoch=1)
        assert store.claim(saga.id, "op", TTL, Event("operator_action"), held).epoch == 2

    def test_claim_expired_takes_only_active_sagas_whose_lease_ran_out(
        self, store: SagaStore
    ) -> None:
        older = create(store, ttl=2 * EXPIRED)
        newer = create(store, ttl=EXPIRED)
        create(store)  # live
        renewed = create(store, ttl=EXPIRED)
        store.renew_many({renewed.id: 1}, TTL)
        finished = create(store, ttl=EXPIRED)
        store.commit(Commit(finished.id, 1, status=SagaStatus.COMPLETED, release=True))
        assert store.claim_expired("r", TTL, limit=1) == [older.id]
        assert store.claim_expired("r", TTL, limit=10) == [newer.id]
        assert store.claim_expired("r", TTL, limit=10) == []
        claimed = loaded(store, newer.id)
        assert (claimed.owner, claimed.epoch) == ("r", 2)
        [event] = [e for e in store.events(newer.id) if e.kind == "lease_claimed"]
        assert (event.epoch, event.detail) == (2, {"owner": "r"})

    def test_claim_expired_takes_only_what_the_runnable_admits(self, store: SagaStore) -> None:
        runnable = Runnable(frozenset({("order", "1", "f1")}), ("app",), frozenset({"k.m:fn"}))
        declared = [("1", "f1"), ("1", "f0"), ("2", "f2"), (None, None), ("2", None)]
        records = [
            dataclasses.replace(saga_record(), version=version, fingerprint=fingerprint)
            for version, fingerprint in declared
        ]
        records.append(dataclasses.replace(saga_record("other"), version="1", fingerprint="f1"))
        undo = [  # a context-manager saga's one step: (compensation, status, kind, transactional)
            ("app.undo:refund", StepStatus.SUCCEEDED, StepKind.COMPENSATABLE, False),
            ("app.sub:refund", StepStatus.RUNNING, StepKind.COMPENSATABLE, False),
            ("app_x:refund", StepStatus.SUCCEEDED, StepKind.COMPENSATABLE, False),
            ("evil:f", StepStatus.COMPENSATED, StepKind.COMPENSATABLE, False),
            ("evil:f", StepStatus.IN_DOUBT, StepKind.COMPENSATABLE, False),
            ("evil:f", StepStatus.FAILED, StepKind.COMPENSATABLE, True),
            ("evil:f", StepStatus.SUCCEEDED, StepKind.PIVOT, False),
            ("k.m:fn", StepStatus.SUCCEEDED, StepKind.COMPENSATABLE, False),
            ("k.m:fn2", StepStatus.SUCCEEDED, StepKind.COMPENSATABLE, False),
        ]
        steps = {}
        for ref, status, kind, transactional in undo:
            record = dataclasses.replace(saga_record(), kind="imperative", version=None)
            records.append(record)
            steps[record.id] = StepRecord(
                "s", 1, status, 1, kind, transactional, compensation_ref=ref
            )
        for record in records:
            step = steps.get(record.id, running("reserve", 1))
            store.create(record, Commit(record.id, 1, steps=(StepWrite(step, new=True),)), EXPIRED)
        admitted = {r.id for r in records if runnable.admits(loaded(store, r.id))}
        expected = [1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0]
        assert [int(r.id in admitted) for r in records] == expected  # the rule, spelled out
        assert sorted(store.claim_expired("r", TTL, 100, runnable)) == sorted(admitted)
        assert all(loaded(store, r.id).epoch == 1 for r in records if r.id not in admitted)
        assert sorted(store.claim_expired("r", TTL, 100)) == sorted(
            r.id for r in records if r.id not in admitted
        )

    def test_concurrent_recoverers_never_claim_a_saga_twice(self, store: SagaStore) -> None:
        ids = {create(store, ttl=EXPIRED).id for _ in range(50)}
        claimed: list[str] = []
        barrier = threading.Barrier(4)

        def recoverer(owner: str) -> None:
            barrier.wait()
            while batch := store.claim_expired(owner, TTL, limit=3):
                claimed.extend(batch)

        _all_at_once(recoverer, [(f"w{n}",) for n in range(4)])
        assert sorted(claimed) == sorted(ids)

    def test_concurrent_creates_with_one_key_make_one_saga(self, store: SagaStore) -> None:
        outcomes: list[bool] = []
        barrier = threading.Barrier(8)

        def racer() -> None:
            saga = saga_record(key="same")
            barrier.wait()
            outcomes.append(store.create(saga, Commit(saga.id, 1), TTL)[1])

        _all_at_once(racer, [() for _ in range(8)])
        assert sorted(outcomes) == [False] * 7 + [True]

    # -- cancel requests and events -------------------------------------------------------

    def test_cancel_request_is_reported_by_the_next_commit(self, store: SagaStore) -> None:
        saga = create(store)
        store.request_cancel(saga.id, Event("operator_action", detail={"action": "cancel"}))
        assert loaded(store, saga.id).cancel_requested
        assert store.commit(Commit(saga.id, 1)) is True
        assert store.renew_many({saga.id: 1}, TTL).stop == {saga.id}
        assert kinds(store, saga.id).count("operator_action") == 1
        store.request_cancel(saga.id, Event("operator_action"))  # recorded already: left
        assert kinds(store, saga.id).count("operator_action") == 1
        with pytest.raises(UnknownSagaError):
            store.request_cancel("nope", Event("operator_action"))

    def test_a_cancel_request_checks_its_guard_unless_the_saga_finished(
        self, store: SagaStore
    ) -> None:
        saga = create(store)
        with pytest.raises(SagaChangedError):
            store.request_cancel(
                saga.id, Event("operator_action"), ClaimGuard(frozenset({SagaStatus.RUNNING}), 2)
            )
        assert not loaded(store, saga.id).cancel_requested
        store.commit(Commit(saga.id, 1, status=SagaStatus.COMPLETED, release=True))
        store.request_cancel(
            saga.id, Event("operator_action"), ClaimGuard(frozenset({SagaStatus.RUNNING}), 2)
        )
        assert not loaded(store, saga.id).cancel_requested
        assert "operator_action" not in kinds(store, saga.id)

    def test_a_pause_turns_a_running_saga_paused_and_its_commits_say_stop(
        self, store: SagaStore
    ) -> None:
        saga = create(store)
        store.request_pause(saga.id, Event("operator_action", detail={"action": "pause"}))
        assert loaded(store, saga.id).status is SagaStatus.PAUSED
        assert store.commit(Commit(saga.id, 1)) is True  # the owner hands it back
        assert store.renew_many({saga.id: 1}, TTL).stop == {saga.id}
        store.request_pause(saga.id, Event("operator_action"))  # paused already: left
        assert kinds(store, saga.id).count("operator_action") == 1
        assert store.claim_expired("b", TTL, 10) == []  # never a recoverer's, even expired
        store.commit(Commit(saga.id, 1, release=True))
        assert store.claim_expired("b", TTL, 10) == []
        claimed = store.claim(
            saga.id, "op", TTL, Event("lease_claimed"), ClaimGuard(frozenset({SagaStatus.PAUSED}))
        )
        assert (claimed.status, claimed.epoch) == (SagaStatus.PAUSED, 2)
        with pytest.raises(UnknownSagaError):
            store.request_pause("nope", Event("operator_action"))

    def test_a_pause_checks_that_the_saga_still_runs(self, store: SagaStore) -> None:
        saga = create(store)
        store.commit(Commit(saga.id, 1, status=SagaStatus.COMPLETED, release=True))
        running = ClaimGuard(frozenset({SagaStatus.RUNNING}))
        with pytest.raises(SagaChangedError, match="completed"):
            store.request_pause(saga.id, Event("operator_action"), running)
        assert loaded(store, saga.id).status is SagaStatus.COMPLETED
        assert "operator_action" not in kinds(store, saga.id)

    def test_events_are_numbered_in_order_and_detail_is_copied(self, store: SagaStore) -> None:
        saga = create(store)
        detail = {"by": "alice"}
        store.record_event(saga.id, Event("operator_action", detail=detail))
        detail["by"] = "mallory"
        events = store.events(saga.id)
        assert [e.id for e in events] == sorted(e.id for e in events)
        assert (events[-1].detail, events[-1].epoch) == ({"by": "alice"}, 1)

    def test_an_event_for_an_unknown_saga_is_kept_without_an_epoch(self, store: SagaStore) -> None:
        store.record_event("nope", Event("recovery_refused"))
        [event] = store.events("nope")
        assert (event.kind, event.epoch) == ("recovery_refused", None)

    def test_a_fenced_event_is_written_only_under_the_current_epoch(self, store: SagaStore) -> None:
        saga = create(store, ttl=EXPIRED)
        assert store.claim_expired("rival", TTL, 1) == [saga.id]  # epoch 2 now
        assert store.record_fenced_event(saga.id, 1, Event("recovery_refused")) is False
        assert store.record_fenced_event(saga.id, 2, Event("recovery_refused")) is True
        assert store.record_fenced_event("nope", 1, Event("recovery_refused")) is False
        refused = [e for e in store.events(saga.id) if e.kind == "recovery_refused"]
        assert [e.epoch for e in refused] == [2]
        assert store.events("nope") == []

    # -- lists ----------------------------------------------------------------------------

    def test_sagas_made_back_to_back_list_in_the_order_made(self, store: SagaStore) -> None:
        # Made faster than SQLite's clock ticks (a millisecond): several share a tick.
        ids = [create(store).id for _ in range(200)]
        newest_first = list(reversed(ids))
        assert [s.id for s in store.list(ListQuery(limit=500))] == newest_first
        paged: list[str] = []
        while page := store.list(ListQuery(limit=70, before=paged[-1] if paged else None)):
            paged += [s.id for s in page]
        assert paged == newest_first

    def test_list_is_newest_first_with_filters_and_keyset_pages(self, store: SagaStore) -> None:
        made = []
        for n in range(5):
            made.append(create(store, name="even" if n % 2 == 0 else "odd"))
            self.wait(store, self.gap)
        ids = [saga.id for saga in made]
        newest_first = list(reversed(ids))
        assert [s.id for s in store.list(ListQuery())] == newest_first
        assert [s.id for s in store.list(ListQuery(limit=2))] == newest_first[:2]
        assert [s.id for s in store.list(ListQuery(before=newest_first[1]))] == newest_first[2:]
        assert [s.id for s in store.list(ListQuery(name="odd"))] == [ids[3], ids[1]]
        first, second = (made[0].created_at, made[1].created_at)
        assert first is not None
        assert second is not None
        older_than = store.now() - (first + second) / 2  # a cut-off between the first two
        before = store.now()
        older = [s.id for s in store.list(ListQuery(older_than=older_than))]
        after = store.now()
        # The store cuts off at its own now less older_than, read between before and after:
        # a stalled machine may move the cut-off past later sagas, never before the first.
        cut_off = [sum(s.created_at < now - older_than for s in made) for now in (before, after)]
        assert ids[0] in older
        assert older in [newest_first[len(ids) - k :] for k in range(cut_off[0], cut_off[1] + 1)]
        assert store.list(ListQuery(before="unknown")) == []
        store.commit(Commit(ids[2], 1, status=SagaStatus.COMPLETED))
        done = store.list(ListQuery(status=(SagaStatus.COMPLETED,)))
        assert [s.id for s in done] == [ids[2]]
        assert [s.id for s in store.list(ListQuery(key="nope"))] == []

    def test_a_key_prefix_matches_exactly_what_was_typed(self, store: SagaStore) -> None:
        keys = ["ord-1", "ORD-2", "or%d", "o_d-3", "order"]
        made = {key: create(store, key=key).id for key in keys}
        create(store)  # no key: matches no prefix

        def listed(prefix: str) -> set[str]:
            return {s.id for s in store.list(ListQuery(key_prefix=prefix))}

        assert listed("ord") == {made["ord-1"], made["order"]}
        assert listed("ORD") == {made["ORD-2"]}  # not SQLite's case-blind LIKE
        assert listed("or%") == {made["or%d"]}  # a wildcard is a character
        assert listed("o_") == {made["o_d-3"]}
        assert listed("x") == set()
        older = ListQuery(key_prefix="ord", name="order", status=(SagaStatus.RUNNING,))
        assert {s.id for s in store.list(older)} == {made["ord-1"], made["order"]}

    def test_a_step_filter_matches_the_current_step(self, store: SagaStore) -> None:
        """The newest step in flight (running, in doubt, compensating), else the newest."""
        charging = create(store)  # reserve running
        self._write(store, charging, ("reserve", 1, StepStatus.SUCCEEDED), ("charge", 2, None))
        undoing = create(store)  # charge compensating below a compensated ship
        self._write(
            store,
            undoing,
            ("reserve", 1, StepStatus.SUCCEEDED),
            ("charge", 2, StepStatus.COMPENSATING),
            ("ship", 3, StepStatus.COMPENSATED),
        )
        done = create(store)
        self._write(store, done, ("reserve", 1, StepStatus.SUCCEEDED), ("pack", 2, None))
        store.commit(
            Commit(done.id, 1, steps=(StepWrite(self._step("pack", 2, StepStatus.SUCCEEDED)),))
        )
        reserving = create(store)

        def listed(step: str) -> set[str]:
            return {s.id for s in store.list(ListQuery(step=step))}

        assert listed("charge") == {charging.id, undoing.id}
        assert listed("pack") == {done.id}
        assert listed("reserve") == {reserving.id}
        assert listed("ship") == set()
        for record in store.list(ListQuery()):
            current = current_step(record)
            assert current is not None
            assert record.id in listed(current.name)

    def _step(self, name: str, seq: int, status: StepStatus) -> StepRecord:
        return dataclasses.replace(running(name, seq), status=status)

    def _write(
        self, store: SagaStore, saga: SagaRecord, *steps: tuple[str, int, StepStatus | None]
    ) -> None:
        """Rewrite or add (``None``: running, new) the saga's steps in one commit."""
        writes = tuple(
            StepWrite(running(name, seq), new=True, stamp="started")
            if status is None
            else StepWrite(self._step(name, seq, status), new=seq > 1, stamp="started")
            for name, seq, status in steps
        )
        store.commit(Commit(saga.id, 1, steps=writes))

    def test_list_returns_each_saga_with_its_steps(self, store: SagaStore) -> None:
        saga = create(store, key="k")
        [listed] = store.list(ListQuery(key="k"))
        assert listed == loaded(store, saga.id)
        assert [s.name for s in listed.steps] == ["reserve"]

    def test_a_list_without_payloads_leaves_out_only_the_payloads(self, store: SagaStore) -> None:
        saga = create(store, key="k")
        step = dataclasses.replace(
            running("reserve", 1), status=StepStatus.SUCCEEDED, args='{"a":1}', result='"r"'
        )
        failed = dataclasses.replace(running("charge", 2), error="E: boom")
        undoing = dataclasses.replace(
            running("ship", 3), status=StepStatus.COMPENSATING, args="[1]", error="U: refused"
        )
        writes = (
            StepWrite(step),
            StepWrite(failed, new=True, stamp="started"),
            StepWrite(undoing, new=True, stamp="started"),
        )
        store.commit(Commit(saga.id, 1, error="saga error", steps=writes))
        full = loaded(store, saga.id)
        [light] = store.list(ListQuery(key="k", payloads=False))
        assert (light.input, light.error, light.trace_context) == (None, "saga error", None)
        # Errors are what a list shows: the saga's, and a compensating step's (a headline).
        assert [(s.args, s.result, s.error) for s in light.steps] == [
            (None, None, None),
            (None, None, None),
            (None, None, "U: refused"),
        ]
        expected = dataclasses.replace(
            full,
            input=None,
            trace_context=None,
            steps=tuple(
                dataclasses.replace(
                    s, args=None, result=None, error=s.error if s is full.steps[2] else None
                )
                for s in full.steps
            ),
        )
        assert light == expected  # everything a listing shows, as loaded
        assert store.list(ListQuery(key="k")) == [full]

    def test_stuck_means_active_with_an_expired_lease(self, store: SagaStore) -> None:
        create(store)  # live
        done = create(store, ttl=EXPIRED)
        store.commit(Commit(done.id, 1, status=SagaStatus.COMPLETED, release=True))
        assert store.list(ListQuery(stuck=True)) == []
        stuck = create(store, ttl=EXPIRED)
        assert [s.id for s in store.list(ListQuery(stuck=True))] == [stuck.id]
        assert store.stuck_count() == 1  # the same sagas, counted

    def test_status_counts_count_every_status_present(self, store: SagaStore) -> None:
        assert store.status_counts() == {}
        create(store)
        create(store)
        done = create(store)
        store.commit(Commit(done.id, 1, status=SagaStatus.COMPLETED, release=True))
        assert store.status_counts() == {SagaStatus.RUNNING: 2, SagaStatus.COMPLETED: 1}
        capped = {SagaStatus.RUNNING: 2, SagaStatus.COMPLETED: 1}  # "more than 1": 2
        assert store.status_counts(cap=1) == capped
        assert store.status_counts(cap=2) == {SagaStatus.RUNNING: 2, SagaStatus.COMPLETED: 1}
        create(store)
        assert store.status_counts(cap=1)[SagaStatus.RUNNING] == 2  # 3 running, counted to 2

    def test_status_counts_of_some_statuses_leave_the_others_out(self, store: SagaStore) -> None:
        create(store)
        done = create(store)
        store.commit(Commit(done.id, 1, status=SagaStatus.COMPLETED, release=True))
        unfinished = (SagaStatus.RUNNING, SagaStatus.FAILED)
        assert store.status_counts(statuses=unfinished) == {SagaStatus.RUNNING: 1}
        assert store.status_counts(cap=5, statuses=unfinished) == {SagaStatus.RUNNING: 1}
        finished = [SagaStatus.COMPLETED]
        assert store.status_counts(statuses=finished) == {SagaStatus.COMPLETED: 1}
        assert store.status_counts(statuses=()) == {}

    def test_delete_removes_sagas_steps_events_and_keys(self, store: SagaStore) -> None:
        assert isinstance(store, Deletable)  # every store saga ships can
        saga = create(store, key="k")
        kept = create(store)
        assert store.delete([saga.id, "unknown"]) == 1
        assert store.load(saga.id) is None
        assert store.find("order", "k") is None
        assert store.events(saga.id) == []
        assert store.load(kept.id) is not None
        assert create(store, key="k").key == "k"  # the key is free again


def _all_at_once(target: Any, arguments: list[tuple[Any, ...]]) -> None:
    threads = [threading.Thread(target=target, args=args) for args in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class AsyncStoreContract:
    """What every ``AsyncSagaStore`` does. Subclasses provide the ``store`` fixture (an
    async store over a fresh sync store); each test runs on an event loop of its own."""

    @pytest.fixture
    def store(self) -> Iterator[AsyncSagaStore]:
        raise NotImplementedError  # pragma: no cover - each backend's subclass says

    def test_create_then_load_returns_the_stored_saga(self, store: AsyncSagaStore) -> None:
        async def scenario() -> None:
            saga = saga_record(key="k")
            first = Commit(saga.id, 1, steps=(StepWrite(running("reserve", 1), new=True),))
            _, created = await store.create(saga, first, TTL)
            assert created
            stored = await store.load(saga.id)
            assert stored is not None
            assert stored == store.sync.load(saga.id)
            assert [s.name for s in stored.steps] == ["reserve"]
            again, created = await store.create(saga_record(key="k"), Commit("x", 1), TTL)
            assert (again.id, created) == (saga.id, False)
            assert await store.load("nope") is None
            await store.close()

        asyncio.run(scenario())

    def test_commit_is_fenced_and_says_when_to_stop(self, store: AsyncSagaStore) -> None:
        async def scenario() -> None:
            saga = saga_record()
            await store.create(saga, Commit(saga.id, 1), EXPIRED)
            assert await store.commit(Commit(saga.id, 1, events=(Event("note"),))) is False
            store.sync.request_cancel(saga.id, Event("operator_action"))
            assert await store.commit(Commit(saga.id, 1)) is True
            await store.call(store.sync.claim, saga.id, "b", TTL, Event("lease_claimed"))
            before = store.sync.events(saga.id)
            with pytest.raises(LeaseLostError):
                await store.commit(Commit(saga.id, 1, status=SagaStatus.COMPLETED))
            assert store.sync.events(saga.id) == before
            assert (await store.load(saga.id) or saga).status is SagaStatus.RUNNING
            await store.close()

        asyncio.run(scenario())

    def test_call_runs_any_sync_store_method(self, store: AsyncSagaStore) -> None:
        async def scenario() -> None:
            assert await store.call(store.sync.list, ListQuery()) == []
            assert await store.call(store.sync.find, "order", "k") is None
            await store.close()

        asyncio.run(scenario())
