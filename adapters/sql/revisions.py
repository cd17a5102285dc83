"""What each schema revision looks like, known without importing Alembic.

Opening a store compares the database's revision with :data:`HEAD` (one cheap
read); ``saga db upgrade`` also compares the tables it finds with the shape the
recorded revision should have, so that a database it does not recognise is
reported and left alone instead of half-migrated.
"""

from __future__ import annotations

from collections.abc import Mapping

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
)
"""Every revision this release knows, oldest first, with what it does."""

HEAD = REVISIONS[-1][0]
KNOWN = tuple(revision for revision, _ in REVISIONS)
LEGACY_REVISION = {1: "0001", 2: "0002"}
"""The revision a database of a release before migrations is at, by the version it
recorded in ``saga_schema_version`` (1: the first release, 2: its commit-token fix)."""

_INSTANCES_1 = frozenset(
    [
        "id",
        "name",
        "key",
        "kind",
        "status",
        "input",
        "version",
        "owner",
        "epoch",
        "lease_expires_at",
        "created_at",
        "updated_at",
        "error",
        "deadline",
        "cancel_requested",
        "commit_token",
    ]
)
_STEPS_1 = frozenset(
    [
        "saga_id",
        "seq",
        "name",
        "status",
        "attempt",
        "kind",
        "transactional",
        "action_ref",
        "compensation_ref",
        "args",
        "input_digest",
        "result",
        "output_digest",
        "error",
        "undo_attempt",
        "started_at",
        "finished_at",
    ]
)
_EVENTS = frozenset(["id", "saga_id", "at", "kind", "step", "attempt", "epoch", "detail"])
_LEGACY = frozenset({"version"})
_OWNERS = frozenset(
    [
        "owner",
        "host",
        "pid",
        "process_start",
        "backend_pid",
        "backend_start",
        "server_start",
        "registered_at",
        "suspected_at",
    ]
)

SHAPES: Mapping[str, Mapping[str, frozenset[str]]] = {
    "0001": {
        "saga_instances": _INSTANCES_1,
        "saga_steps": _STEPS_1,
        "saga_events": _EVENTS,
        LEGACY_TABLE: _LEGACY,
    },
    "0002": {
        "saga_instances": _INSTANCES_1,
        "saga_steps": _STEPS_1 | {"commit_token"},
        "saga_events": _EVENTS,
        LEGACY_TABLE: _LEGACY,
    },
    "0003": {
        "saga_instances": _INSTANCES_1 | {"fingerprint"},
        "saga_steps": _STEPS_1 | {"commit_token"},
        "saga_events": _EVENTS,
        LEGACY_TABLE: _LEGACY,
    },
    "0004": {
        "saga_instances": _INSTANCES_1 | {"fingerprint", "trace_context"},
        "saga_steps": _STEPS_1 | {"commit_token"},
        "saga_events": _EVENTS,
        LEGACY_TABLE: _LEGACY,
    },
    "0005": {
        "saga_instances": _INSTANCES_1 | {"fingerprint", "trace_context"},
        "saga_steps": _STEPS_1 | {"commit_token"},
        "saga_events": _EVENTS,
        LEGACY_TABLE: _LEGACY,
        "saga_owners": _OWNERS,
    },
}
"""The columns each revision's tables have: what ``saga db upgrade`` expects to find."""

SAGA_TABLES = frozenset(SHAPES[HEAD]) | {VERSION_TABLE}


def describe(revision: str) -> str:
    """The revision with what it does, as messages show it."""
    return next((f"{revision} ({what})" for rev, what in REVISIONS if rev == revision), revision)


def pending(revision: str | None) -> list[str]:
    """The revisions an upgrade from ``revision`` (None: an empty database) applies."""
    start = 0 if revision is None else KNOWN.index(revision) + 1
    return list(KNOWN[start:])
