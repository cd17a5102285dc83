"""The outbox: messages commit with their transactional step; the relay publishes them in order."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from saga.adapters.integrations.outbox import (
    OutboxMessage,
    Relay,
    create_outbox_table,
    put,
)

from saga import ConfigurationError, Coordinator, Saga, SagaFailed, StepContext

announcing = Saga("tx-outbox")


@announcing.step(transactional=True)
def reserve(ctx: StepContext) -> None:
    put("stock", {"event": "reserved", "order": ctx.data["order"]})


@reserve.compensation
def unreserve(ctx: StepContext) -> None:
    put("stock", {"event": "released", "order": ctx.data["order"]})


@announcing.step(transactional=True)
def charge(ctx: StepContext) -> None:
    put("payments", {"event": "charged", "order": ctx.data["order"]})
    put("mail", {"event": "receipt", "order": ctx.data["order"]})
    if ctx.data.get("decline"):
        raise ValueError("card declined")  # its messages roll back with it


@pytest.fixture
def coordinator(db_url: str) -> Iterator[Coordinator]:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        create_outbox_table(coord)
        yield coord


def _events(messages: list[OutboxMessage], order: int | None = None) -> list[str]:
    return [m.payload["event"] for m in messages if order is None or m.payload["order"] == order]


def test_messages_commit_with_their_steps_and_are_published_once_in_order(
    coordinator: Coordinator,
) -> None:
    published: list[OutboxMessage] = []
    relay = Relay(coordinator, published.append)
    first = coordinator.run(announcing, data={"order": 1})
    with pytest.raises(SagaFailed):
        coordinator.run(announcing, data={"order": 2, "decline": True})

    assert relay.pending() == 5
    assert relay.drain() == 5
    assert relay.run_once() == 0

    assert _events(published, 1) == ["reserved", "charged", "receipt"]
    assert _events(published, 2) == ["reserved", "released"]  # charge's messages rolled back
    assert [m.key for m in published[:3]] == [
        f"{first.id}:reserve:do:1",
        f"{first.id}:charge:do:1",
        f"{first.id}:charge:do:2",
    ]
    assert published[2].topic == "mail"
    assert published[0].saga_id == first.id


def test_failed_publish_holds_back_that_sagas_later_messages_only(
    coordinator: Coordinator,
) -> None:
    published: list[OutboxMessage] = []
    failures = {"reserved-1": 1}

    def publish(message: OutboxMessage) -> None:
        name = f"{message.payload['event']}-{message.payload['order']}"
        if failures.get(name):
            failures[name] -= 1
            raise ConnectionError("broker unavailable")
        published.append(message)

    relay = Relay(coordinator, publish)
    coordinator.run(announcing, data={"order": 1})
    coordinator.run(announcing, data={"order": 2})

    assert relay.run_once() == 3  # order 1 waits behind its first message
    assert _events(published, 1) == []
    assert relay.run_once() == 3
    assert _events(published, 1) == ["reserved", "charged", "receipt"]
    assert _events(published, 2) == ["reserved", "charged", "receipt"]


def test_relay_that_dies_before_its_commit_publishes_again(coordinator: Coordinator) -> None:
    seen: list[str] = []

    def dies_after_publishing(message: OutboxMessage) -> None:
        seen.append(message.key)
        if len(seen) == 2:
            raise SystemExit("killed")  # not an Exception: the batch is never marked

    coordinator.run(announcing, data={"order": 1})
    with pytest.raises(SystemExit):
        Relay(coordinator, dies_after_publishing).run_once()
    again: list[OutboxMessage] = []
    Relay(coordinator, again.append).drain()

    assert [m.key for m in again] == [*seen, again[-1].key]  # at least once, in order
    assert len(again) == 3


def test_put_outside_a_transactional_step_is_refused(coordinator: Coordinator) -> None:
    saga = Saga("tx-outbox-plain")

    @saga.step()
    def plain(ctx: StepContext) -> None:
        put("t", {"x": 1})

    with pytest.raises(SagaFailed) as failed:
        coordinator.run(saga)

    assert isinstance(failed.value.__cause__, ConfigurationError)
    assert "transactional" in str(failed.value.__cause__)


def test_relay_needs_a_sql_store() -> None:
    with Coordinator("memory://") as coord, pytest.raises(ConfigurationError, match="SQL"):
        Relay(coord, print)


@pytest.mark.postgres
def test_concurrent_relays_never_take_a_saga_another_relay_is_publishing(pg_url: str) -> None:
    with Coordinator(pg_url, lease_ttl=5.0) as coord:
        create_outbox_table(coord)
        coord.run(announcing, data={"order": 1})
        coord.run(announcing, data={"order": 2})
        inside, release = threading.Event(), threading.Event()
        slow: list[OutboxMessage] = []

        def publish_slowly(message: OutboxMessage) -> None:
            slow.append(message)
            inside.set()
            assert release.wait(30)

        first = Relay(coord, publish_slowly, batch_size=1)
        worker = threading.Thread(target=first.run_once)
        worker.start()
        assert inside.wait(30)
        other: list[OutboxMessage] = []
        second = Relay(coord, other.append)
        published_meanwhile = second.run_once()
        release.set()
        worker.join(30)
        rest = second.drain()

    held = slow[0].saga_id
    assert published_meanwhile == 3  # the other saga's three, none of the held one's
    assert all(m.saga_id != held for m in other[:3])
    assert rest == 2
    assert _events(other[3:]) == ["charged", "receipt"]
