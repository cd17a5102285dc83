"""Fenced effects in a participant's own database: a zombie's late call changes nothing.

saga fences its own records with the saga's epoch, but the effect a step has on
another database is that database's to guard. A process frozen past its lease
(a long GC pause, a stopped VM) can wake after a recoverer took its saga over
and compensated it, and finish its old attempt: the row it inserts then outlives
the saga, with nothing left to undo it. Deleting by idempotency key in the
compensation does not help, since the late insert comes after the delete.

:class:`EffectFence` keeps one row per effect key in the participant's database,
written in the effect's own transaction: *applied*, or *undone* (a tombstone that
is never deleted), with the highest epoch of the saga seen for that key::

    fence = EffectFence()
    fence.create(engine)                                 # once: CREATE TABLE IF NOT EXISTS

    @order.step(compensate="release")
    def reserve(ctx):
        with engine.begin() as connection:
            if fence.forward(connection, ctx):           # first call: apply the effect
                connection.execute(insert(reservations).values(key=ctx.idempotency_key))

    def release(ctx):
        with engine.begin() as connection:
            if fence.undo(connection, ctx):              # it was applied: undo it now
                connection.execute(delete(reservations).where(...))

A forward call after the tombstone, or under an epoch older than one already
seen for the key, is refused: it returns a false :class:`Decision` whose
``reason`` says why, and logs it (logger ``saga.fencing``). A compensation that
finds nothing applied leaves the tombstone all the same, so the late forward
call that may still be on its way is refused too.

Every call first writes the key's row (an insert that leaves an existing row
alone), so it holds that row's lock until the caller's transaction ends: two
calls for one key, in two processes, take turns. It is plain SQLAlchemy Core on
PostgreSQL, MariaDB/MySQL and SQLite, and keys compare byte for byte on each
(:class:`EffectKey`: no collation may make two effects one). With an async driver, run it on the
connection's sync form: ``await connection.run_sync(fence.forward, ctx)``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import uuid
from typing import Any, Protocol

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Dialect,
    Engine,
    Insert,
    MetaData,
    String,
    Table,
    select,
    text,
    update,
)
from sqlalchemy.dialects.mysql import VARBINARY
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = ["Decision", "EffectFence", "EffectKey", "EffectState"]

_log = logging.getLogger("saga.fencing")

KEY_LENGTH = 255
"""The longest effect key (a step's idempotency key is a 36-character id, a colon
and the step's name; MariaDB indexes at most 3072 bytes, 255 characters of utf8mb4 fit)."""

_MYSQL = ("mysql", "mariadb")


class EffectKey(TypeDecorator[str]):
    """An effect key, compared byte for byte on every dialect.

    Two effects are one only if their keys are the same bytes: MariaDB's and MySQL's
    default collations would make ``"A"`` and ``"a"``, ``"k"`` and ``"k "``, ``"e"``
    and ``"\u00e9"`` one row, so that the second, distinct effect were answered
    "applied already" and never applied. There the key is the ``VARBINARY`` of its
    UTF-8 bytes (no collation, no padding). PostgreSQL's default collations are
    deterministic (equal means the same bytes) and SQLite's is ``BINARY``: a plain
    string column is exact there.
    """

    impl = String(KEY_LENGTH)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in _MYSQL:
            return dialect.type_descriptor(VARBINARY(4 * KEY_LENGTH))  # UTF-8: 4 bytes at most
        return dialect.type_descriptor(String(KEY_LENGTH))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        if value is not None and dialect.name in _MYSQL:
            return value.encode("utf-8")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:  # noqa: ARG002
        if isinstance(value, bytes | bytearray):
            return bytes(value).decode("utf-8")
        return None if value is None else str(value)


class EffectState(enum.Enum):
    APPLIED = "applied"
    UNDONE = "undone"


class Fenced(Protocol):
    """What a call needs of the step: :class:`saga.StepContext` has both."""

    @property
    def idempotency_key(self) -> str: ...

    @property
    def epoch(self) -> int: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """Whether to apply (forward) or undo (compensation) the effect now, and why.

    True only when the caller should act, in the same transaction.
    """

    go: bool
    reason: str
    state: EffectState
    epoch: int
    """The highest epoch recorded for the key, this call's included when accepted."""

    def __bool__(self) -> bool:
        return self.go


class EffectFence:
    """The effect table of one participant database (``name``, by default
    ``saga_effects``), and the two calls that consult it: :meth:`forward` and
    :meth:`undo`."""

    def __init__(self, name: str = "saga_effects", metadata: MetaData | None = None) -> None:
        self.table = Table(
            name,
            metadata if metadata is not None else MetaData(),
            Column("key", EffectKey(), primary_key=True),
            Column("state", String(16), nullable=False),
            Column("epoch", BigInteger, nullable=False),
            # Which call inserted the row: the upsert that leaves an existing row alone
            # reports no row count the three databases agree on; the token does.
            Column("token", String(32), nullable=False),
        )

    def create(self, engine: Engine) -> None:
        """Create the table if it is missing (an application with its own migrations
        can instead pass its ``MetaData`` to the constructor), and bring the key column
        of a MariaDB/MySQL table made by an earlier release to its binary form."""
        self.table.create(engine, checkfirst=True)
        if engine.dialect.name in _MYSQL:
            with engine.begin() as connection:
                _binary_key(connection, self.table)

    def forward(
        self, connection: Connection, ctx: Fenced | None = None, *, key: str = "", epoch: int = 0
    ) -> Decision:
        """Record the forward effect of ``ctx`` (or ``key`` under ``epoch``) as applied,
        unless it already is, it was compensated, or a newer epoch was seen."""
        key, epoch = _identity(ctx, key, epoch)
        inserted, row = self._take(connection, key, epoch, EffectState.APPLIED)
        if inserted:
            return Decision(True, "first call: apply the effect", EffectState.APPLIED, epoch)
        state, seen = EffectState(row.state), int(row.epoch)
        if state is EffectState.UNDONE:
            return _refused(key, epoch, state, seen, "it was compensated already")
        if seen > epoch:
            return _refused(key, epoch, state, seen, f"epoch {seen} was seen for it")
        self._raise_epoch(connection, key, epoch, seen)
        reason = "applied already: nothing to do"
        return Decision(False, reason, EffectState.APPLIED, max(seen, epoch))

    def undo(
        self, connection: Connection, ctx: Fenced | None = None, *, key: str = "", epoch: int = 0
    ) -> Decision:
        """Mark the effect undone (a tombstone); go only if it had been applied."""
        key, epoch = _identity(ctx, key, epoch)
        inserted, row = self._take(connection, key, epoch, EffectState.UNDONE)
        if inserted:
            reason = "nothing was applied: the tombstone refuses a late forward call"
            return Decision(False, reason, EffectState.UNDONE, epoch)
        state, seen = EffectState(row.state), int(row.epoch)
        if seen > epoch:
            return _refused(key, epoch, state, seen, f"epoch {seen} was seen for it")
        if state is EffectState.UNDONE:
            return Decision(False, "undone already: nothing to do", state, max(seen, epoch))
        c = self.table.c
        connection.execute(
            update(self.table)
            .where(c.key == key)
            .values(state=EffectState.UNDONE.value, epoch=max(seen, epoch))
        )
        return Decision(True, "applied: undo the effect", EffectState.UNDONE, max(seen, epoch))

    def state(self, connection: Connection, key: str) -> EffectState | None:
        """What is recorded for ``key`` (None: nothing yet)."""
        found = connection.execute(select(self.table.c.state).where(self.table.c.key == key))
        value = found.scalar()
        return None if value is None else EffectState(value)

    def _take(
        self, connection: Connection, key: str, epoch: int, state: EffectState
    ) -> tuple[bool, Any]:
        """Insert the key's row unless one exists, then read it under its lock; whether
        this call inserted it."""
        if len(key) > KEY_LENGTH:
            raise ValueError(f"effect key {key[:40]!r}... is longer than {KEY_LENGTH} characters")
        token = uuid.uuid4().hex
        values = {"key": key, "state": state.value, "epoch": epoch, "token": token}
        connection.execute(_insert_or_keep(connection, self.table).values(values))
        c = self.table.c
        row = connection.execute(
            select(c.state, c.epoch, c.token).where(c.key == key).with_for_update()
        ).one()
        return row.token == token, row

    def _raise_epoch(self, connection: Connection, key: str, epoch: int, seen: int) -> None:
        if epoch > seen:
            c = self.table.c
            connection.execute(update(self.table).where(c.key == key).values(epoch=epoch))


def _identity(ctx: Fenced | None, key: str, epoch: int) -> tuple[str, int]:
    if ctx is not None:
        return key or ctx.idempotency_key, epoch or ctx.epoch
    if not key or epoch < 1:
        raise ValueError("give the step's context, or key= and epoch= (1 or more)")
    return key, epoch


def _refused(key: str, epoch: int, state: EffectState, seen: int, why: str) -> Decision:
    reason = f"refused: a late call under epoch {epoch}; {why}"
    _log.warning("effect %s %s", key, reason)
    return Decision(False, reason, state, seen)


def _insert_or_keep(connection: Connection, table: Table) -> Insert:
    """``INSERT`` that leaves a row with the same key as it is (and locks it, in
    PostgreSQL and MariaDB; SQLite's writer holds the database)."""
    name = connection.dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing(index_elements=[table.c.key])
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).on_conflict_do_nothing(index_elements=[table.c.key])
    if name in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        statement = mysql_insert(table)
        # A no-op update of the key: the existing row is kept, and locked.
        return statement.on_duplicate_key_update(key=statement.inserted["key"])
    raise NotImplementedError(f"EffectFence does not know the {name!r} dialect")


def _binary_key(connection: Connection, table: Table) -> None:
    """Turn a character key column (an earlier release's, compared under the table's
    collation) into ``VARBINARY``. Safe: keys distinct under any collation are distinct
    as bytes, so no two rows become one; a non-UTF-8 column is refused, since its bytes
    are not the ones a call now looks for."""
    found = connection.execute(
        text(
            "SELECT data_type, character_set_name FROM information_schema.columns"
            " WHERE table_schema = COALESCE(:schema, DATABASE()) AND table_name = :table"
            " AND column_name = 'key'"
        ),
        {"schema": table.schema, "table": table.name},
    ).one()
    kind, charset = str(found[0]).lower(), str(found[1] or "").lower()
    if kind == "varbinary":
        return
    if not charset.startswith("utf8"):
        raise ValueError(
            f"effect table {table.name}: its key column is in the {charset} character set;"
            " convert it to utf8mb4, then call create() again to make it binary"
        )
    quoted = connection.dialect.identifier_preparer.format_table(table)
    # The table's name is the application's own (the constructor's), never input.
    connection.execute(
        text(f"ALTER TABLE {quoted} MODIFY `key` VARBINARY({4 * KEY_LENGTH}) NOT NULL")
    )
    _log.warning("effect table %s: key column made binary (byte-for-byte keys)", table.name)
