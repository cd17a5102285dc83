"""InMemorySagaStore keeps the SagaStore contract (tests/store_contract.py), on a clock
the tests move by hand; and what only the in-memory store does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from saga.adapters.memory import InMemorySagaStore
from saga.adapters.threaded_async import ThreadedAsyncStore

from saga import StorageError
from saga._internal.ports import (
    CREATION_TICK,
    AsyncSagaStore,
    Commit,
    ListQuery,
    SagaStore,
    StepWrite,
)
from saga._internal.store import async_store, open_store
from tests.store_contract import (
    TTL,
    AsyncStoreContract,
    StoreContract,
    create,
    kinds,
    running,
    saga_record,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TestInMemoryStore(StoreContract):
    tolerance = 0.0  # one clock, read once per change: times are exactly equal

    @pytest.fixture
    def store(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[SagaStore]:
        memory = InMemorySagaStore()
        monkeypatch.setattr(memory, "now", Clock())
        yield memory
        memory.close()

    def wait(self, store: SagaStore, seconds: float) -> None:
        store.now.advance(seconds)  # type: ignore[attr-defined]

    def session_expected(self, session: object) -> bool:
        return session is None  # no SQL session in memory: ctx.session is None

    def test_create_returns_the_stored_record(self, store: SagaStore) -> None:
        saga = saga_record()
        stored, created = store.create(saga, Commit(saga.id, 1), TTL)
        assert created
        assert stored == store.load(saga.id)
        assert stored.created_at == store.now()
        assert stored.lease_expires_at == store.now() + TTL
        again, created = store.create(saga, Commit(saga.id, 1), TTL)  # its own id: a lost ack
        assert (again, created) == (stored, True)

    def test_a_second_step_of_the_same_name_is_refused(self, store: SagaStore) -> None:
        """Stricter than the SQL tables (whose key is the seq only): names are unique too."""
        saga = create(store)
        change = Commit(saga.id, 1, steps=(StepWrite(running("reserve", 2), new=True),))
        with pytest.raises(StorageError, match="reserve"):
            store.commit(change)
        assert len(store.load(saga.id).steps) == 1  # type: ignore[union-attr]
        assert kinds(store, saga.id) == []

    def test_sagas_made_at_one_instant_are_a_tick_apart_in_the_order_made(
        self, store: SagaStore
    ) -> None:
        """Only this clock stands still: the store, not the ids' order, tells them apart."""
        made = [create(store, saga_id=f"id-{n}") for n in (1, 3, 2)]
        assert [s.id for s in store.list(ListQuery())] == ["id-2", "id-3", "id-1"]
        start = store.now()
        assert [s.created_at for s in made] == [start + n * CREATION_TICK for n in range(3)]


class TestThreadedAsyncOnMemory(AsyncStoreContract):
    @pytest.fixture
    def store(self) -> Iterator[AsyncSagaStore]:
        memory = InMemorySagaStore()
        yield async_store(memory)
        memory.close()

    def test_the_memory_store_has_no_native_async_form(self) -> None:
        assert type(async_store(InMemorySagaStore())) is ThreadedAsyncStore


def test_memory_url_opens_an_in_memory_store() -> None:
    opened = open_store("memory://")
    assert isinstance(opened, InMemorySagaStore)
    assert opened.url == "memory://"
    assert opened.schema_version() == "memory"
