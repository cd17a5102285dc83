"""InMemorySagaStore keeps the SagaStore contract the SQL store keeps."""

from __future__ import annotations

import dataclasses
import threading
import uuid

import pytest
from saga.adapters.memory import InMemorySagaStore

from saga import (
    LeaseLostError,
    SagaBusyError,
    SagaStatus,
    StepStatus,
    StorageError,
    UnknownSagaError,
)
from saga.ports import Commit, Event, ListQuery, Renewal, SagaRecord, StepRecord, StepWrite
from saga.store import open_store

TTL = 10.0


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> InMemorySagaStore:
    memory = InMemorySagaStore()
    monkeypatch.setattr(memory, "now", clock)
    return memory


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


def create(store: InMemorySagaStore, **options: object) -> SagaRecord:
    saga = saga_record(**options)  # type: ignore[arg-type]
    first = Commit(saga.id, 1, steps=(StepWrite(running("reserve", 1), new=True, stamp="started"),))
    stored, created = store.create(saga, first, TTL)
    assert created
    return stored


def kinds(store: InMemorySagaStore, saga_id: str) -> list[str]:
    return [e.kind for e in store.events(saga_id)]


def test_memory_url_opens_an_in_memory_store() -> None:
    opened = open_store("memory://")
    assert isinstance(opened, InMemorySagaStore)
    assert opened.url == "memory://"
    assert opened.schema_version() == "memory"


def test_create_stamps_times_and_lease_from_its_clock(store: InMemorySagaStore) -> None:
    saga = create(store)
    assert (saga.created_at, saga.updated_at) == (1_000_000.0, 1_000_000.0)
    assert saga.lease_expires_at == 1_000_000.0 + TTL
    assert saga.steps[0].started_at == 1_000_000.0
    assert saga.steps[0].finished_at is None
    assert store.load(saga.id) == saga


def test_create_with_a_taken_key_returns_the_existing_saga(store: InMemorySagaStore) -> None:
    first = create(store, key="k")
    again, created = store.create(saga_record(key="k"), Commit("other", 1), TTL)
    assert not created
    assert again.id == first.id
    assert store.find("order", "k") == first


def test_sagas_without_a_key_never_clash(store: InMemorySagaStore) -> None:
    create(store)
    create(store)
    assert len(store.list(ListQuery())) == 2


def test_a_rejected_create_stores_nothing(store: InMemorySagaStore) -> None:
    saga = saga_record(key="k")
    twice = (StepWrite(running("a", 1), new=True), StepWrite(running("a", 2), new=True))
    with pytest.raises(StorageError):
        store.create(saga, Commit(saga.id, 1, steps=twice, events=(Event("saga_started"),)), TTL)
    assert store.load(saga.id) is None
    assert store.find("order", "k") is None
    assert store.events(saga.id) == []


def test_commit_writes_steps_status_and_events_but_leaves_the_lease(
    store: InMemorySagaStore, clock: Clock
) -> None:
    saga = create(store)
    clock.advance(5)
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
    loaded = store.load(saga.id)
    assert loaded is not None
    assert (loaded.status, loaded.error, loaded.updated_at) == (
        SagaStatus.COMPENSATING,
        "why",
        clock.now,
    )
    assert loaded.lease_expires_at == 1_000_000.0 + TTL  # renewing is the heartbeat's job
    step = loaded.steps[0]
    assert (step.status, step.result, step.started_at, step.finished_at) == (
        StepStatus.SUCCEEDED,
        '{"id":1}',
        1_000_000.0,
        clock.now,
    )
    [event] = [e for e in store.events(saga.id) if e.kind == "step_succeeded"]
    assert (event.step, event.attempt, event.epoch, event.detail, event.at) == (
        "reserve",
        1,
        1,
        {"n": 1},
        clock.now,
    )


def test_an_update_rewrites_only_the_mutable_step_columns(store: InMemorySagaStore) -> None:
    saga = create(store)
    forged = StepRecord("renamed", 1, StepStatus.SUCCEEDED, 1, action_ref="os:system")
    store.commit(Commit(saga.id, 1, steps=(StepWrite(forged),)))
    loaded = store.load(saga.id)
    assert loaded is not None
    assert (loaded.steps[0].name, loaded.steps[0].action_ref) == ("reserve", None)
    assert loaded.steps[0].status is StepStatus.SUCCEEDED


def test_a_stale_epoch_writes_nothing(store: InMemorySagaStore, clock: Clock) -> None:
    saga = create(store, owner="a")
    clock.advance(TTL + 1)
    store.claim(saga.id, "b", TTL, Event("lease_claimed"))
    before = (store.load(saga.id), store.events(saga.id))
    stale = Commit(saga.id, 1, status=SagaStatus.COMPLETED, events=(Event("saga_completed"),))
    with pytest.raises(LeaseLostError) as caught:
        store.commit(stale)
    assert (caught.value.saga_id, caught.value.epoch) == (saga.id, 1)
    assert (store.load(saga.id), store.events(saga.id)) == before


def test_commit_to_an_unknown_saga_is_a_lost_lease(store: InMemorySagaStore) -> None:
    with pytest.raises(LeaseLostError):
        store.commit(Commit("nope", 1))


def test_a_duplicate_step_rolls_the_whole_commit_back(store: InMemorySagaStore) -> None:
    saga = create(store)
    change = Commit(
        saga.id,
        1,
        status=SagaStatus.COMPLETED,
        steps=(StepWrite(running("reserve", 2), new=True),),
        events=(Event("saga_completed"),),
    )
    with pytest.raises(StorageError, match="reserve"):
        store.commit(change)
    loaded = store.load(saga.id)
    assert loaded is not None
    assert loaded.status is SagaStatus.RUNNING
    assert len(loaded.steps) == 1
    assert "saga_completed" not in kinds(store, saga.id)


def test_release_drops_owner_and_expires_the_lease_at_once(
    store: InMemorySagaStore, clock: Clock
) -> None:
    saga = create(store)
    store.commit(Commit(saga.id, 1, release=True))
    loaded = store.load(saga.id)
    assert loaded is not None
    assert (loaded.owner, loaded.lease_expires_at) == (None, clock.now)
    clock.advance(0.001)
    assert [s.id for s in store.list(ListQuery(stuck=True))] == [saga.id]


def test_renew_extends_the_lease_and_is_fenced(store: InMemorySagaStore, clock: Clock) -> None:
    saga = create(store)
    clock.advance(3)
    assert store.renew_many({saga.id: 1}, TTL) == Renewal()
    loaded = store.load(saga.id)
    assert loaded is not None
    assert loaded.lease_expires_at == clock.now + TTL
    assert store.renew_many({saga.id: 2}, TTL) == Renewal(lost=frozenset({saga.id}))


def test_claim_is_refused_while_another_owner_lease_is_live(
    store: InMemorySagaStore, clock: Clock
) -> None:
    saga = create(store, owner="a")
    with pytest.raises(SagaBusyError, match="held by a"):
        store.claim(saga.id, "b", TTL, Event("lease_claimed"))
    clock.advance(TTL + 1)
    claimed = store.claim(saga.id, "b", TTL, Event("lease_claimed"))
    assert (claimed.owner, claimed.epoch) == ("b", 2)
    assert store.events(saga.id)[-1].epoch == 2


def test_a_live_lease_is_not_taken_even_by_its_owner(store: InMemorySagaStore) -> None:
    saga = create(store, owner="a")
    with pytest.raises(SagaBusyError):
        store.claim(saga.id, "a", TTL, Event("lease_claimed"))


def test_a_released_saga_can_be_claimed_at_once(store: InMemorySagaStore) -> None:
    saga = create(store, owner="a")
    store.commit(Commit(saga.id, 1, status=SagaStatus.FAILED, release=True))
    assert store.claim(saga.id, "b", TTL, Event("operator_action")).epoch == 2


def test_claiming_an_unknown_saga_raises(store: InMemorySagaStore) -> None:
    with pytest.raises(UnknownSagaError):
        store.claim("nope", "a", TTL, Event("lease_claimed"))


def test_claim_expired_takes_only_active_sagas_whose_lease_ran_out(
    store: InMemorySagaStore, clock: Clock
) -> None:
    older = create(store)
    clock.advance(1)
    newer = create(store)
    live = create(store)
    finished = create(store)
    store.commit(Commit(finished.id, 1, status=SagaStatus.COMPLETED, release=True))
    clock.advance(TTL - 0.5)
    store.renew_many({live.id: 1}, TTL)
    clock.advance(1)
    assert store.claim_expired("r", TTL, limit=1) == [older.id]
    assert store.claim_expired("r", TTL, limit=10) == [newer.id]
    assert store.claim_expired("r", TTL, limit=10) == []
    claimed = store.load(newer.id)
    assert claimed is not None
    assert (claimed.owner, claimed.epoch) == ("r", 2)
    [event] = [e for e in store.events(newer.id) if e.kind == "lease_claimed"]
    assert (event.epoch, event.detail) == (2, {"owner": "r"})


def test_cancel_request_is_reported_by_the_next_commit(store: InMemorySagaStore) -> None:
    saga = create(store)
    store.request_cancel(saga.id, Event("operator_action", detail={"action": "cancel"}))
    assert store.commit(Commit(saga.id, 1)) is True
    assert store.renew_many({saga.id: 1}, TTL).stop == {saga.id}
    with pytest.raises(UnknownSagaError):
        store.request_cancel("nope", Event("operator_action"))


def test_events_are_numbered_in_order_and_detail_is_copied(store: InMemorySagaStore) -> None:
    saga = create(store)
    detail = {"by": "alice"}
    store.record_event(saga.id, Event("operator_action", detail=detail))
    detail["by"] = "mallory"
    events = store.events(saga.id)
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert events[-1].detail == {"by": "alice"}


def test_an_event_for_an_unknown_saga_is_kept_without_an_epoch(store: InMemorySagaStore) -> None:
    store.record_event("nope", Event("recovery_refused"))
    [event] = store.events("nope")
    assert (event.kind, event.epoch) == ("recovery_refused", None)


def test_a_fenced_event_is_written_only_under_the_current_epoch(
    store: InMemorySagaStore, clock: Clock
) -> None:
    saga = create(store)
    clock.advance(TTL + 1)
    assert store.claim_expired("rival", TTL, 1) == [saga.id]  # epoch 2 now
    assert store.record_fenced_event(saga.id, 1, Event("recovery_refused")) is False
    assert store.record_fenced_event(saga.id, 2, Event("recovery_refused")) is True
    assert store.record_fenced_event("nope", 1, Event("recovery_refused")) is False
    refused = [e for e in store.events(saga.id) if e.kind == "recovery_refused"]
    assert [e.epoch for e in refused] == [2]
    assert store.events("nope") == []


def test_list_is_newest_first_with_filters_and_keyset_pages(
    store: InMemorySagaStore, clock: Clock
) -> None:
    ids = []
    for n in range(5):
        ids.append(create(store, name="even" if n % 2 == 0 else "odd").id)
        clock.advance(1)
    newest_first = list(reversed(ids))
    assert [s.id for s in store.list(ListQuery())] == newest_first
    assert [s.id for s in store.list(ListQuery(limit=2))] == newest_first[:2]
    assert [s.id for s in store.list(ListQuery(before=newest_first[1]))] == newest_first[2:]
    assert [s.id for s in store.list(ListQuery(name="odd"))] == [ids[3], ids[1]]
    assert [s.id for s in store.list(ListQuery(older_than=4.5))] == [ids[0]]
    assert store.list(ListQuery(before="unknown")) == []
    store.commit(Commit(ids[2], 1, status=SagaStatus.COMPLETED))
    done = store.list(ListQuery(status=(SagaStatus.COMPLETED,)))
    assert [s.id for s in done] == [ids[2]]


def test_list_breaks_ties_on_id(store: InMemorySagaStore) -> None:
    ids = [create(store, saga_id=f"id-{n}").id for n in (1, 3, 2)]
    assert [s.id for s in store.list(ListQuery())] == sorted(ids, reverse=True)


def test_stuck_means_active_with_an_expired_lease(store: InMemorySagaStore, clock: Clock) -> None:
    stuck = create(store)
    done = create(store)
    store.commit(Commit(done.id, 1, status=SagaStatus.COMPLETED, release=True))
    assert store.list(ListQuery(stuck=True)) == []
    clock.advance(TTL + 1)
    assert [s.id for s in store.list(ListQuery(stuck=True))] == [stuck.id]


def test_delete_removes_sagas_steps_events_and_keys(store: InMemorySagaStore) -> None:
    saga = create(store, key="k")
    assert store.delete([saga.id, "unknown"]) == 1
    assert store.load(saga.id) is None
    assert store.find("order", "k") is None
    assert store.events(saga.id) == []


def test_concurrent_creates_with_one_key_make_one_saga(store: InMemorySagaStore) -> None:
    outcomes: list[bool] = []
    barrier = threading.Barrier(8)

    def racer() -> None:
        saga = saga_record(key="same")
        barrier.wait()
        outcomes.append(store.create(saga, Commit(saga.id, 1), TTL)[1])

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [False] * 7 + [True]


def test_concurrent_recoverers_never_claim_a_saga_twice(
    store: InMemorySagaStore, clock: Clock
) -> None:
    ids = {create(store).id for _ in range(50)}
    clock.advance(TTL + 1)
    claimed: list[str] = []
    barrier = threading.Barrier(4)

    def recoverer(owner: str) -> None:
        barrier.wait()
        while batch := store.claim_expired(owner, TTL, limit=3):
            claimed.extend(batch)

    threads = [threading.Thread(target=recoverer, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == sorted(ids)


def test_a_deadline_is_kept_as_an_absolute_time_and_stops_the_saga(
    store: InMemorySagaStore, clock: Clock
) -> None:
    saga = dataclasses.replace(saga_record(), deadline=5.0)  # seconds from now, at creation
    stored, _ = store.create(saga, Commit(saga.id, 1), TTL)
    assert stored.deadline == clock.now + 5.0
    assert store.commit(Commit(saga.id, 1)) is False
    clock.advance(6)
    assert store.commit(Commit(saga.id, 1)) is True
    assert store.renew_many({saga.id: 1}, TTL).stop == {saga.id}


def test_transact_applies_the_change_built_from_the_work_result(store: InMemorySagaStore) -> None:
    saga = create(store)
    done = StepRecord("reserve", 1, StepStatus.SUCCEEDED, 1, result='"R1"')

    def change_for(result: str) -> Commit:
        assert result == "R1"
        return Commit(saga.id, 1, steps=(StepWrite(done, stamp="finished"),))

    assert store.transact(lambda session: "R1" if session is None else "?", change_for, TTL) == (
        "R1",
        False,
    )
    loaded = store.load(saga.id)
    assert loaded is not None
    assert loaded.steps[0].status is StepStatus.SUCCEEDED


def test_transact_applies_nothing_when_the_work_raises(store: InMemorySagaStore) -> None:
    saga = create(store)
    before = store.load(saga.id)

    def work(session: object) -> str:
        raise ValueError("constraint violated")

    with pytest.raises(ValueError, match="constraint"):
        store.transact(work, lambda result: Commit(saga.id, 1, status=SagaStatus.FAILED), TTL)
    assert store.load(saga.id) == before
