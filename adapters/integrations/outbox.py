"""The transactional outbox: messages that commit with a step, published afterwards.

A saga that must tell a broker "order 42 was paid" cannot write its database
and then publish (a crash in between loses the message) nor publish and
then write (a crash in between announces what never happened). Instead a
transactional step writes the message into the ``saga_outbox`` table with
:func:`put`, in the very transaction that records the step's success; a
:class:`Relay` later publishes what is pending and marks it published::

    @order.step(transactional=True)
    def record_payment(ctx):
        ctx.session.add(Payment(...))
        put("payments", {"order": ctx.data["order"], "amount": 42})

    relay = Relay(coord, publish=lambda message: broker.send(message.topic, message.payload))
    relay.run_once()        # or relay.run(stop_event) in a worker thread

Delivery is at least once: a relay that dies after publishing and before
its commit publishes those messages again, so consumers deduplicate by
``message.key`` (unique, stable: ``<saga id>:<step>:do:<n>`` by default).
Messages of one saga are published in the order they were written: a relay
locks a saga's oldest pending message before it takes any of that saga's
messages, and a message that fails to publish holds back the saga's later
ones until it goes through. On PostgreSQL several relays share the work
(``FOR UPDATE SKIP LOCKED``); on SQLite one relay at a time holds the write
lock while it publishes, so keep ``publish`` quick there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    DateTime,
    Engine,
    Index,
    Integer,
    MetaData,
    Row,
    String,
    Table,
    Text,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from saga._internal.codec import encode
from saga._internal.context import current_step
from saga._internal.errors import ConfigurationError, StorageError, StorageUnavailableError

from ..sql.messages import first_line
from ..sql.transactions import SqlTransactions

__all__ = ["OutboxMessage", "Relay", "create_outbox_table", "outbox_table", "put"]

_log = logging.getLogger("saga.outbox")
_COUNTER = "saga_outbox_messages"  # per-session message count, in Session.info

metadata = MetaData()
outbox_table = Table(
    "saga_outbox",
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("saga_id", String(36), nullable=False),
    Column("step", String(200), nullable=False),
    Column("topic", String(200), nullable=False),
    Column("key", String(400), nullable=False, unique=True),
    Column("payload", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("published_at", DateTime(timezone=True)),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
)
# The relay's scans: a saga's pending messages in order.
Index("ix_saga_outbox_saga", outbox_table.c.saga_id, outbox_table.c.id)


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxMessage:
    """A message to publish: ``payload`` is the decoded JSON value given to :func:`put`."""

    id: int
    saga_id: str
    step: str
    topic: str
    key: str
    payload: Any
    attempts: int


def put(topic: str, payload: Any, *, key: str | None = None, session: Any = None) -> str:
    """Write a message into the outbox, inside the running transactional step's
    transaction (``session`` defaults to ``current_step().session``); return its key."""
    ctx = current_step()
    session = session if session is not None else ctx.session
    if session is None:
        raise ConfigurationError(
            f"step {ctx.step!r}: outbox.put needs a transactional step "
            "(@saga.step(transactional=True)), whose ctx.session commits with it"
        )
    count = int(session.info.get(_COUNTER, 0)) + 1
    session.info[_COUNTER] = count
    direction = "undo" if ctx.compensating else "do"
    key = key if key is not None else f"{ctx.idempotency_key}:{direction}:{count}"
    text = encode(payload, f"outbox message {key!r}").text
    row = {"saga_id": ctx.saga_id, "step": ctx.step, "topic": topic, "key": key, "payload": text}
    session.execute(insert(outbox_table).values(row))
    return key


def create_outbox_table(target: Any) -> None:
    """Create ``saga_outbox`` in the saga store's database if it is missing.

    ``target`` is a ``Coordinator``, an ``AsyncCoordinator`` or an ``Engine``.
    """
    with _translated():
        metadata.create_all(_engine_of(target), tables=[outbox_table])


class Relay:
    """Publishes pending outbox messages with ``publish`` and marks them published."""

    def __init__(
        self,
        target: Any,
        publish: Callable[[OutboxMessage], object],
        *,
        batch_size: int = 100,
        create_table: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError("Relay batch_size must be at least 1")
        self.engine = _engine_of(target)
        self.publish = publish
        self.batch_size = batch_size
        self._locks = self.engine.dialect.name == "postgresql"
        if create_table:
            create_outbox_table(self.engine)

    def run_once(self) -> int:
        """Publish one batch of pending messages; return how many were published."""
        with _translated(), self.engine.begin() as connection:
            rows = self._batch(connection)
            published, failed = self._publish_all(rows)
            o = outbox_table.c
            if published:
                connection.execute(
                    update(outbox_table).where(o.id.in_(published)).values(published_at=func.now())
                )
            for message_id, error in failed.items():
                connection.execute(
                    update(outbox_table)
                    .where(o.id == message_id)
                    .values(attempts=o.attempts + 1, last_error=error)
                )
        return len(published)

    def drain(self, max_rounds: int = 1000) -> int:
        """``run_once`` until a round publishes nothing; return how many were published."""
        total = 0
        for _ in range(max_rounds):
            count = self.run_once()
            total += count
            if count == 0:
                break
        return total

    def run(self, stop: threading.Event, *, interval: float = 0.5) -> None:
        """Relay until ``stop`` is set, resting ``interval`` seconds when idle.

        A database that cannot be reached is waited for, not fatal.
        """
        while not stop.is_set():
            try:
                busy = self.run_once() > 0
            except StorageUnavailableError as error:
                _log.warning("outbox relay: database unavailable (%s); retrying", error)
                busy = False
            if not busy:
                stop.wait(interval)

    def pending(self) -> int:
        """How many messages wait to be published."""
        query = select(func.count()).where(outbox_table.c.published_at.is_(None))
        with _translated(), self.engine.connect() as connection:
            return int(connection.execute(query).scalar_one())

    def _batch(self, connection: Connection) -> Sequence[Row[Any]]:
        """Pending messages of the sagas whose oldest pending message this relay locked."""
        o = outbox_table.c
        earlier = outbox_table.alias("earlier")
        is_head = ~exists().where(
            earlier.c.saga_id == o.saga_id, earlier.c.id < o.id, earlier.c.published_at.is_(None)
        )
        heads = select(o.saga_id).where(o.published_at.is_(None), is_head)
        heads = heads.order_by(o.id).limit(self.batch_size)
        if self._locks:  # heads another relay holds are skipped: their sagas are its
            heads = heads.with_for_update(skip_locked=True)
        sagas = list(connection.execute(heads).scalars())
        if not sagas:
            return []
        rows = select(outbox_table).where(o.published_at.is_(None), o.saga_id.in_(sagas))
        rows = rows.order_by(o.id).limit(self.batch_size)
        if self._locks:
            rows = rows.with_for_update()
        return connection.execute(rows).all()

    def _publish_all(self, rows: Sequence[Row[Any]]) -> tuple[list[int], dict[int, str]]:
        """Publish in order; after a failure, that saga's later messages wait their turn."""
        published: list[int] = []
        failed: dict[int, str] = {}
        held_back: set[str] = set()
        for row in rows:
            if row.saga_id in held_back:
                continue
            try:
                self.publish(_message(row))
            except Exception as error:  # one message's failure never stops the others
                _log.warning("outbox relay: publishing %s failed: %s", row.key, error)
                failed[row.id] = f"{type(error).__name__}: {error}"
                held_back.add(row.saga_id)
                continue
            published.append(row.id)
        return published, failed


def _message(row: Row[Any]) -> OutboxMessage:
    return OutboxMessage(
        id=row.id,
        saga_id=row.saga_id,
        step=row.step,
        topic=row.topic,
        key=row.key,
        payload=json.loads(row.payload),
        attempts=row.attempts,
    )


def _engine_of(target: Any) -> Engine:
    if isinstance(target, Engine):
        return target
    store = getattr(getattr(target, "sync", target), "store", None)  # (Async)Coordinator
    if not isinstance(store, SqlTransactions):
        raise ConfigurationError(
            f"the outbox lives in the saga store's SQL database; {target!r} has none "
            "(pass a Coordinator on PostgreSQL or SQLite, or its store's Engine)"
        )
    return store.engine


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Driver errors become saga's: unreachable -> StorageUnavailableError, else StorageError."""
    try:
        yield
    except OperationalError as error:
        raise StorageUnavailableError(f"outbox: {first_line(error)}") from error
    except SQLAlchemyError as error:
        raise StorageError(f"outbox: {first_line(error)}") from error
