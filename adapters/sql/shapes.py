"""What each schema revision's tables look like: the columns ``saga db upgrade`` expects
to find before it changes anything (a database it does not recognise is left alone)."""

from __future__ import annotations

from collections.abc import Mapping

from .revisions import HEAD, LEGACY_TABLE, VERSION_TABLE

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
    "0006": {
        "saga_instances": _INSTANCES_1 | {"fingerprint", "trace_context"},
        "saga_steps": _STEPS_1 | {"commit_token", "started_event", "finished_event", "fold_epoch"},
        "saga_events": _EVENTS,
        LEGACY_TABLE: _LEGACY,
        "saga_owners": _OWNERS,
    },
    "0007": {
        "saga_instances": _INSTANCES_1
        | {"fingerprint", "trace_context"}
        | {"started_event", "started_module", "finished_event", "finished_at"},
        "saga_steps": _STEPS_1 | {"commit_token", "started_event", "finished_event", "fold_epoch"},
        "saga_events": _EVENTS,
        LEGACY_TABLE: _LEGACY,
        "saga_owners": _OWNERS,
    },
}
"""The columns each revision's tables have: what ``saga db upgrade`` expects to find."""

SAGA_TABLES = frozenset(SHAPES[HEAD]) | {VERSION_TABLE}
