"""saga's schema revisions, known without importing Alembic.

Opening a store compares the database's revision with :data:`HEAD` (one cheap
read: :func:`at_head`); ``saga db upgrade`` also compares the tables it finds with the
shape the recorded revision should have (:mod:`.shapes`), so that a database it does
not recognise is reported and left alone instead of half-migrated.
"""

from __future__ import annotations

from sqlalchemy import Connection, column, select, table
from sqlalchemy.exc import OperationalError, ProgrammingError

VERSION_TABLE = "saga_schema_revision"
"""Alembic's version table for saga's migrations (an application's own Alembic history
keeps ``alembic_version`` to itself)."""

LEGACY_TABLE = "saga_schema_version"
"""Releases before migrations recorded a schema version number here. It is kept, and
every revision adds its number, so that such a release refuses a newer database."""

REVISIONS: tuple[tuple[str, str], ...] = (
    ("0001", "the first release's tables"),
    ("0002", "saga_steps.commit_token"),
    ("0003", "saga versions; lighter step and event indexes"),
    ("0004", "saga_instances.trace_context"),
    ("0005", "saga_owners: how a claimer tells that an owner died"),
    ("0006", "a step's start and success events folded into its row"),
    ("0007", "a saga's start and completion events folded into its row"),
)
"""Every revision this release knows, oldest first, with what it does."""

HEAD = REVISIONS[-1][0]
KNOWN = tuple(revision for revision, _ in REVISIONS)
LEGACY_REVISION = {1: "0001", 2: "0002"}
"""The revision a database of a release before migrations is at, by the version it
recorded in ``saga_schema_version`` (1: the first release, 2: its commit-token fix)."""

SCHEMA_LOCK_KEY = 0x5A6A  # an arbitrary advisory-lock number reserved for saga's DDL
"""PostgreSQL's advisory lock that serialises schema changes."""
SCHEMA_LOCK_SQL = f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})"
"""The lock, as the SQL ``saga db upgrade --sql`` prints for a DBA (a fixed number)."""


def describe(revision: str) -> str:
    """The revision with what it does, as messages show it."""
    return next((f"{revision} ({what})" for rev, what in REVISIONS if rev == revision), revision)


def pending(revision: str | None) -> list[str]:
    """The revisions an upgrade from ``revision`` (None: an empty database) applies."""
    start = 0 if revision is None else KNOWN.index(revision) + 1
    return list(KNOWN[start:])


def at_head(connection: Connection) -> bool:
    """Whether the database records exactly this release's revision (reads only).

    The common case of opening a store, answered by one query without reflecting the
    tables; anything else (no version table, another revision, several) answers False
    and the caller runs the full check (:func:`.migrate.check`), which says what is wrong.
    """
    versions = table(VERSION_TABLE, column("version_num"))
    try:
        found = connection.execute(select(versions.c.version_num)).scalars().all()
    except (OperationalError, ProgrammingError):  # no such table: a new or foreign database
        return False
    return found == [HEAD]
