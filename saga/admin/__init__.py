"""Operator use cases: what the ``saga`` admin command does, as plain functions.

Every function here takes a :class:`~saga.Coordinator` and returns frozen
records; :mod:`saga.cli` only parses arguments, calls one of them and renders
what comes back. They work just as well from Python::

    from saga import admin

    with admin.application(apps=["shop.sagas:make_coordinator"]) as coord:
        for view in admin.list_sagas(coord, stuck=True).sagas:
            print(view.id, view.status)

The ``as_json()`` shapes are part of the contract: docs/operating.md
documents them, and fields are only ever added, never renamed or removed.

The modules behind this one::

    application  the coordinator: the application's factory (--app M:F), or --db and --app
    inputs       modules imported, and ids, statuses, durations checked
    facts        a saga's step in flight, pivot and lease; times as operators read them
    results      the read commands' records and their JSON
    reads        list, show, history, diff
    actions      compensate, resume, pause, cancel, retry-compensation, mark-compensated
    bulk         a verb on many sagas: a selection by filters, acted on in batches
    recovery     recover: plan, then carry out
    waiting      a compensation waiting for its next attempt, as callers are told it
    worker       the recovery loop
    maintenance  purge
    schema       the schema's revision: status, upgrade, downgrade
    versions     which saga versions the unfinished sagas need
"""

from saga.admin.actions import (
    cancel,
    compensate,
    mark_compensated,
    mark_step,
    parse_result,
    pause,
    resume,
    retry,
    retry_compensation,
    skip,
)
from saga.admin.application import application, split_apps
from saga.admin.bulk import (
    DEFAULT_BATCH,
    VERBS,
    BulkItem,
    BulkProgress,
    BulkReport,
    Outcome,
    Selection,
    Verb,
    act_on_many,
    select_sagas,
    verb_with,
)
from saga.admin.facts import (
    FINISHED,
    IN_DOUBT,
    current_step,
    human_duration,
    is_stuck,
    iso_time,
    lease_left,
    past_pivot,
)
from saga.admin.inputs import (
    CLI_STORE_RETRY,
    ByKey,
    SagaRef,
    get_saga,
    import_apps,
    open_coordinator,
    parse_duration,
    parse_saga_id,
    parse_statuses,
    saga_id_of,
    target,
)
from saga.admin.maintenance import purge
from saga.admin.reads import (
    describe_event,
    diff_sagas,
    list_sagas,
    saga_history,
    show_saga,
    show_with_history,
    status_counts,
    timeline,
)
from saga.admin.recovery import (
    Plan,
    Progress,
    RecoveryItem,
    RecoverySummary,
    Result,
    recover,
    stuck_ids,
)
from saga.admin.results import (
    RetryWait,
    SagaDetail,
    SagaDiff,
    SagaPage,
    StepDiff,
    Timeline,
    TimelineEntry,
    input_digest,
    saga_summary,
    total_duration,
)
from saga.admin.schema import (
    SchemaChange,
    SchemaStatus,
    downgrade_schema,
    schema_status,
    upgrade_schema,
    upgrade_sql,
)
from saga.admin.versions import VersionCheck, VersionInUse, check_versions
from saga.admin.waiting import Waiting, waiting, waiting_after
from saga.admin.worker import WorkerStats, run_worker, serve_worker_metrics

__all__ = [
    "CLI_STORE_RETRY",
    "DEFAULT_BATCH",
    "FINISHED",
    "IN_DOUBT",
    "VERBS",
    "BulkItem",
    "BulkProgress",
    "BulkReport",
    "ByKey",
    "Outcome",
    "Plan",
    "Progress",
    "RecoveryItem",
    "RecoverySummary",
    "Result",
    "RetryWait",
    "SagaDetail",
    "SagaDiff",
    "SagaPage",
    "SagaRef",
    "SchemaChange",
    "SchemaStatus",
    "Selection",
    "StepDiff",
    "Timeline",
    "TimelineEntry",
    "Verb",
    "VersionCheck",
    "VersionInUse",
    "Waiting",
    "WorkerStats",
    "act_on_many",
    "application",
    "cancel",
    "check_versions",
    "compensate",
    "current_step",
    "describe_event",
    "diff_sagas",
    "downgrade_schema",
    "get_saga",
    "human_duration",
    "import_apps",
    "input_digest",
    "is_stuck",
    "iso_time",
    "lease_left",
    "list_sagas",
    "mark_compensated",
    "mark_step",
    "open_coordinator",
    "parse_duration",
    "parse_result",
    "parse_saga_id",
    "parse_statuses",
    "past_pivot",
    "pause",
    "purge",
    "recover",
    "resume",
    "retry",
    "retry_compensation",
    "run_worker",
    "saga_history",
    "saga_id_of",
    "saga_summary",
    "schema_status",
    "select_sagas",
    "serve_worker_metrics",
    "show_saga",
    "show_with_history",
    "skip",
    "split_apps",
    "status_counts",
    "stuck_ids",
    "target",
    "timeline",
    "total_duration",
    "upgrade_schema",
    "upgrade_sql",
    "verb_with",
    "waiting",
    "waiting_after",
]
