"""Running saga's schema migrations: ``saga db upgrade / status / downgrade`` and the check
a store makes when it opens.

Alembic is configured here, in code: the scripts ship inside the package and users need
no ``alembic.ini``. Every change runs in one transaction holding the schema lock (an
advisory lock on PostgreSQL, the write lock on SQLite), so two deploys migrating at once
apply each revision once, and a failed migration leaves nothing behind. Before changing
anything the tables found are compared with the shape their recorded revision should
have: a database saga does not recognise is reported and left alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Engine, column, func, inspect, select, table

from saga._internal.errors import ConfigurationError, DatabaseNotFoundError, SchemaVersionError

from .revisions import (
    HEAD,
    KNOWN,
    LEGACY_REVISION,
    LEGACY_TABLE,
    SCHEMA_LOCK_SQL,
    VERSION_TABLE,
    describe,
    pending,
)
from .shapes import SAGA_TABLES, SHAPES

if TYPE_CHECKING:
    from alembic.config import Config

_SCRIPTS = Path(__file__).parent / "migrations"


class _Dialect(Protocol):
    name: str

    def lock_schema(self, connection: Any) -> None: ...


class Migratable(Protocol):
    """What migrating needs of a SQL store: its engine, dialect and error translation."""

    @property
    def url(self) -> str: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def dialect(self) -> _Dialect: ...

    def translated(self) -> contextlib.AbstractContextManager[None]: ...


class Verdict(enum.Enum):
    """How a database's schema compares with what this release knows."""

    EMPTY = "empty"  # no saga tables at all
    CURRENT = "current"
    BEHIND = "behind"  # an older revision, or a release before migrations
    AHEAD = "ahead"  # a revision from a newer release
    UNKNOWN = "unknown"  # saga's table names, but no version saga wrote


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """What a database holds of saga's: its tables and recorded versions."""

    tables: frozenset[str]
    revision: str | None  # from saga_schema_revision
    legacy: int | None  # from saga_schema_version (releases before migrations)

    @property
    def at(self) -> str | None:
        """The revision the database is at, a legacy version translated."""
        if self.revision is not None:
            return self.revision
        return None if self.legacy is None else LEGACY_REVISION.get(self.legacy)

    @property
    def state(self) -> str:
        """The verdict's name: empty, current, behind, ahead or unknown."""
        return self.verdict.value

    @property
    def verdict(self) -> Verdict:
        if not self.tables:
            return Verdict.EMPTY
        if self.revision is not None:
            if self.revision not in KNOWN:
                return Verdict.AHEAD
            return Verdict.CURRENT if self.revision == HEAD else Verdict.BEHIND
        if self.legacy in LEGACY_REVISION:
            return Verdict.BEHIND
        if self.legacy is not None and self.legacy > max(LEGACY_REVISION):
            return Verdict.AHEAD
        return Verdict.UNKNOWN


def read(connection: Connection) -> Found:
    """saga's tables in the database and the versions they record (reads only)."""
    names = frozenset(inspect(connection).get_table_names()) & SAGA_TABLES
    revision = legacy = None
    if VERSION_TABLE in names:
        versions = table(VERSION_TABLE, column("version_num"))
        rows = connection.execute(select(versions.c.version_num)).scalars().all()
        revision = ",".join(sorted(str(row) for row in rows)) or None
    if LEGACY_TABLE in names:
        numbers = table(LEGACY_TABLE, column("version"))
        found = connection.execute(select(func.max(numbers.c.version))).scalar()
        legacy = None if found is None else int(found)
    return Found(names, revision, legacy)


def check(store: Migratable) -> None:
    """Refuse a database whose schema is not this release's; create an empty one.

    Run once when a store is first used: one cheap read, nothing migrated, except
    that a database without any of saga's tables gets them (first use needs no setup).
    """
    with store.translated(), store.engine.connect() as connection:
        found = read(connection)
    if found.verdict is Verdict.CURRENT:
        return
    if found.verdict is Verdict.EMPTY:
        if not getattr(store, "creates_schema", True):
            raise DatabaseNotFoundError(
                f"no saga tables at {store.url}; check --db or $SAGA_DATABASE_URL "
                "(or run `saga db upgrade` to create them)"
            )
        upgrade(store)
        return
    raise refusal(store.url, found, "open it")


def refusal(url: str, found: Found, doing: str) -> SchemaVersionError:
    """The error for a database whose schema is not this release's, saying what to do."""
    at, head = found.at, describe(HEAD)
    if found.verdict is Verdict.BEHIND and found.revision is None:
        problem = (
            f"saga's schema there is version {found.legacy} of a release before migrations "
            f"(revision {at}), this release needs {head}; run `saga db upgrade` first"
        )
    elif found.verdict is Verdict.BEHIND:
        problem = (
            f"saga's schema there is at revision {describe(str(at))}, older than this "
            f"release's {head}; run `saga db upgrade` first"
        )
    elif found.verdict is Verdict.AHEAD:
        seen = found.revision or f"version {found.legacy}"
        problem = (
            f"saga's schema there is at {seen}, newer than this release of saga knows "
            f"(its newest is {head}); upgrade saga in this environment, or use another database"
        )
    else:
        problem = (
            f"it has tables named like saga's ({', '.join(sorted(found.tables))}) but no "
            "schema version saga recorded; saga does not recognise it and changed nothing"
        )
    return SchemaVersionError(f"{url}: cannot {doing}: {problem}", found.at, HEAD)


def shape_problems(connection: Connection, revision: str) -> list[str]:
    """How the tables differ from the shape ``revision`` gives them (missing parts only:
    columns a DBA added are left alone)."""
    inspector = inspect(connection)
    present = set(inspector.get_table_names())
    problems = []
    for name, columns in sorted(SHAPES[revision].items()):
        if name not in present:
            problems.append(f"table {name} is missing")
            continue
        missing = columns - {c["name"] for c in inspector.get_columns(name)}
        if missing:
            problems.append(f"table {name} lacks column(s) {', '.join(sorted(missing))}")
    return problems


def _startable(store: Migratable, connection: Connection, found: Found, doing: str) -> str:
    """The revision to start from; refuse what cannot be migrated, before any change."""
    if found.verdict in (Verdict.AHEAD, Verdict.UNKNOWN):
        raise refusal(store.url, found, doing)
    at = str(found.at)
    problems = shape_problems(connection, at)
    if problems:
        raise SchemaVersionError(
            f"{store.url}: cannot {doing}: the tables do not have the shape of revision "
            f"{describe(at)} that the database records: {'; '.join(problems)}. "
            "Nothing was changed; restore the missing parts or use another database",
            at,
            HEAD,
        )
    return at


def upgrade(store: Migratable) -> list[str]:
    """Bring the database to this release's revision; return the revisions applied.

    An empty database gets every table; one of a release before migrations is stamped
    with its revision first (no data changes), then migrated.
    """
    from alembic import command

    with store.translated(), store.engine.begin() as connection:
        store.dialect.lock_schema(connection)  # a concurrent upgrade waits here, then finds
        found = read(connection)  # the work done
        start = None
        if found.verdict is not Verdict.EMPTY:
            start = _startable(store, connection, found, "upgrade it")
        todo = pending(start)
        if todo:
            config = _config(connection=connection)
            if start is not None and found.revision is None:
                command.stamp(config, start)
            command.upgrade(config, HEAD)
        return todo


def downgrade(store: Migratable, target: str) -> list[str]:
    """Reverse the revisions after ``target``; return those reversed (newest first)."""
    from alembic import command

    if target not in KNOWN:
        raise ConfigurationError(f"unknown revision {target!r}; known: {', '.join(KNOWN)}")
    with store.translated(), store.engine.begin() as connection:
        store.dialect.lock_schema(connection)
        found = read(connection)
        if found.verdict is Verdict.EMPTY:
            raise ConfigurationError(f"{store.url}: no saga tables to downgrade")
        start = _startable(store, connection, found, "downgrade it")
        undo = [rev for rev in reversed(pending(target)) if KNOWN.index(rev) <= KNOWN.index(start)]
        if undo:
            config = _config(connection=connection)
            if found.revision is None:
                command.stamp(config, start)
            command.downgrade(config, target)
        return undo


def upgrade_sql(store: Migratable) -> str:
    """The SQL ``upgrade`` would run on this database, for a DBA to review and run."""
    from alembic import command

    with store.translated(), store.engine.connect() as connection:
        found = read(connection)
        start = None
        if found.verdict is not Verdict.EMPTY:
            start = _startable(store, connection, found, "write its upgrade")
    if not pending(start):
        return ""
    buffer = io.StringIO()
    config = _config(dialect=store.dialect.name, output_buffer=buffer)
    if start is not None and found.revision is None:
        command.stamp(config, start, sql=True)
    command.upgrade(config, HEAD if start is None else f"{start}:{HEAD}", sql=True)
    return buffer.getvalue()


def _config(**attributes: Any) -> Config:
    from alembic.config import Config

    config = Config(output_buffer=attributes.pop("output_buffer", None))
    # ConfigParser interpolates %: a path containing one must be escaped.
    config.set_main_option("script_location", str(_SCRIPTS).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    config.attributes.update(attributes)
    return config


def run_environment() -> None:
    """Alembic's env.py: run the migrations on the connection (or dialect) given."""
    from alembic import context

    options: dict[str, Any] = {"version_table": VERSION_TABLE, "transactional_ddl": True}
    attributes = context.config.attributes
    if context.is_offline_mode():
        dialect = attributes["dialect"]
        context.configure(dialect_name=dialect, literal_binds=True, **options)
        with context.begin_transaction():
            if dialect == "postgresql":  # as `saga db upgrade` does: one deploy at a time
                context.execute(SCHEMA_LOCK_SQL)
            context.run_migrations()
        return
    # The caller's transaction holds the schema lock: Alembic joins it.
    context.configure(connection=attributes["connection"], **options)
    with context.begin_transaction():
        context.run_migrations()
