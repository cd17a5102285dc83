"""The decisions behind the coordinators' entry points, shared by sync and async.

Each function here is pure: it looks at a definition and a record and says
what to write, what to refuse, or which way to go. ``Coordinator`` and
``AsyncCoordinator`` only carry the answers out.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta

from saga._internal.codec import KEYLESS, MAX_KEY_BYTES, check_name
from saga._internal.definition import Saga
from saga._internal.engine import decisions, records
from saga._internal.errors import (
    ConfigurationError,
    InputMismatchError,
    OperationRefusedError,
    SagaHandedBack,
)
from saga._internal.failure import recorded_failure
from saga._internal.ports import ClaimGuard, Commit, Event, SagaRecord
from saga._internal.status import SagaStatus
from saga._internal.versions import record_version, started_with


def seconds(deadline: timedelta | float | None) -> float | None:
    """A deadline as seconds from now (``timedelta`` or a number of seconds)."""
    if deadline is None:
        return None
    value = deadline.total_seconds() if isinstance(deadline, timedelta) else float(deadline)
    if value <= 0:
        raise ConfigurationError(f"deadline must be in the future, not {deadline!r}")
    return value


def new_saga(
    saga: Saga,
    key: str | None,
    input_text: str,
    owner: str,
    deadline: timedelta | float | None = None,
) -> tuple[SagaRecord, Commit, list[decisions.RunStep]]:
    """A new declarative saga, its first commit (with its first steps started), those steps.

    ``deadline`` (else the definition's) bounds the saga's duration, counted
    from its creation by the database clock.
    """
    if key is not None:  # refused on every backend alike, before any write
        check_name(key, "key", MAX_KEY_BYTES, KEYLESS)
    record = SagaRecord(
        id=str(uuid.uuid4()),
        name=saga.name,
        key=key,
        kind="declarative",
        status=SagaStatus.RUNNING,
        input=input_text,
        version=str(saga.version),
        fingerprint=saga.fingerprint,
        owner=owner,
        epoch=1,
        deadline=seconds(deadline if deadline is not None else saga.deadline),
    )
    first = decisions.ready(saga, record, (), saga.max_concurrency)
    started = first if isinstance(first, list) else []
    writes, events = records.start_all(saga, record, started)
    # Where the definition lives, for an operator whose process lacks it (``saga recover``).
    started_event = Event("saga_started", detail={"module": saga.module} if saga.module else None)
    change = records.commit(record, writes, [started_event, *events])
    return record, change, started


def rerun(saga: Saga, existing: SagaRecord, input_text: str | None) -> bool:
    """For a second run with the same key: True if the recorded saga is simply returned.

    Raises the ``SagaFailed`` of a saga that failed again (its error rebuilt from the
    record), and refuses other input (``InputMismatchError``).
    False means the saga is unfinished: claim it and carry on.
    """
    if existing.input != input_text:
        raise InputMismatchError(
            existing.id,
            f"saga {saga.name!r} key {existing.key!r} was first run with other input; "
            "use a new key for new input",
        )
    if existing.status is SagaStatus.COMPLETED:
        return True
    if existing.status is SagaStatus.PAUSED:  # held for an operator: nothing runs
        raise SagaHandedBack(existing.id, SagaStatus.PAUSED, "found paused by a rerun")
    if existing.status.is_terminal:
        raise recorded_failure(existing)  # as the first run raised it, rebuilt from the record
    return False


def checked(saga: Saga, record: SagaRecord) -> Saga:
    """``saga`` if it is the definition ``record`` started with; refuse otherwise."""
    same = saga if record_version(record) == saga.version else None
    return started_with(record, same, [saga.version])


def turn(record: SagaRecord, why: str) -> Event:
    """The event of a running saga turning to compensation."""
    return records.moved(record, SagaStatus.COMPENSATING, reason=why)


def refuse_compensate(record: SagaRecord) -> None:
    """Refuse to unwind a finished saga, or one whose pivot may have acted."""
    if record.status.is_finished:
        raise OperationRefusedError(record.id, f"saga {record.id} is already {record.status.value}")
    if decisions.past_pivot(record):
        raise OperationRefusedError(
            record.id, f"saga {record.id} passed its pivot step; it can only go forward"
        )
    doubt = decisions.pivot_in_doubt(record)
    if doubt is not None:
        raise OperationRefusedError(
            record.id,
            f"saga {record.id}: pivot step {doubt.name!r} was given up without its outcome "
            "being learnt, so it may have acted; if it did not, record that first: "
            f"saga mark-step {record.id} --step {doubt.name} --did-not-happen --reason TEXT",
        )
    if decisions.pivot_may_have_acted(record):
        raise OperationRefusedError(
            record.id,
            f"saga {record.id} started its pivot step and never learnt how it ended; "
            "resume it (the pivot runs again and tells) instead of compensating",
        )


def declarative_only(record: SagaRecord, why: str) -> None:
    """Refuse an operator's forward verb on a context-manager saga, saying ``why``."""
    if record.kind != "declarative":
        raise OperationRefusedError(record.id, f"saga {record.id} is a context-manager saga: {why}")


def refuse_resume(record: SagaRecord) -> None:
    declarative_only(
        record,
        "only its own code can continue it (re-enter the same coord.saga(name, key=...)); "
        "an operator can compensate it",
    )
    if record.status not in (SagaStatus.RUNNING, SagaStatus.PAUSED):
        raise OperationRefusedError(
            record.id,
            f"saga {record.id} is {record.status.value}; only a running or paused saga resumes",
        )


def refuse_pause(record: SagaRecord) -> None:
    declarative_only(
        record,
        "only its own code can continue it, so it cannot be paused; "
        "an operator can cancel or compensate it",
    )
    if record.status is SagaStatus.PAUSED and record.owner is None:
        raise OperationRefusedError(record.id, f"saga {record.id} is paused already")
    # A paused saga still held (its owner hands it back at its next step boundary, or
    # an operator's pause died before its claim): pausing again hands it back if no
    # live process holds it.
    if record.status not in (SagaStatus.RUNNING, SagaStatus.PAUSED):
        raise OperationRefusedError(
            record.id, f"saga {record.id} is {record.status.value}; only a running saga pauses"
        )


def refuse_cancel(record: SagaRecord) -> None:
    if record.status is not SagaStatus.RUNNING:
        raise OperationRefusedError(
            record.id,
            f"saga {record.id} is {record.status.value}; only a running saga can be cancelled",
        )
    if decisions.past_pivot(record):
        raise OperationRefusedError(
            record.id, f"saga {record.id} passed its pivot step; it can only go forward"
        )
    if decisions.pivot_may_have_acted(record):  # started and never reported back
        raise OperationRefusedError(
            record.id,
            f"saga {record.id} started its pivot step, which may have acted; it can only go "
            "forward (resume it if it is stuck)",
        )


# What each verb's claim requires, checked by the store inside the claim itself: the
# refusals above only look at an earlier read, and the saga may move on before the claim.


def compensate_guard(record: SagaRecord) -> ClaimGuard:
    """Unwinding needs the saga as it was read: same status, nobody claimed it since,
    and no pivot that may have acted (the owner may pass its pivot meanwhile)."""
    return ClaimGuard(frozenset({record.status}), record.epoch, before_pivot=True)


def resume_guard(record: SagaRecord) -> ClaimGuard:
    """Resuming needs the saga as it was read: running (stuck) or paused, unclaimed since."""
    return ClaimGuard(frozenset({record.status}), record.epoch)


def pause_guard() -> ClaimGuard:
    """A pause holds a running saga wherever it stands (a pivot does not matter: nothing
    is undone). Whoever claimed it since the operator's read honours it just the same."""
    return ClaimGuard(frozenset({SagaStatus.RUNNING}))


def paused_guard() -> ClaimGuard:
    """The operator's claim of a saga it just paused, to hand it back itself when no
    live process holds it: still paused (nobody resumed or unwound it meanwhile)."""
    return ClaimGuard(frozenset({SagaStatus.PAUSED}))


def refuse_recover(record: SagaRecord) -> None:
    if record.status.is_terminal:
        hint = {
            SagaStatus.FAILED: ": see retry-compensation and mark-compensated",
            SagaStatus.PAUSED: ": resume or compensate it",
        }.get(record.status, "")
        raise OperationRefusedError(
            record.id,
            f"saga {record.id} is {record.status.value}; recovery takes running or "
            f"compensating sagas only{hint}",
        )


def recover_guard() -> ClaimGuard:
    return ClaimGuard(frozenset({SagaStatus.RUNNING, SagaStatus.COMPENSATING}))


def continue_guard() -> ClaimGuard:
    """A re-run of a key (or a re-entered block) carries on a saga that is running or
    compensating; one that ended ``failed`` between the read and the claim is left alone
    (a rerun raises its recorded failure instead of driving it)."""
    return ClaimGuard(frozenset({SagaStatus.RUNNING, SagaStatus.COMPENSATING}))


def cancel_guard() -> ClaimGuard:
    """A cancel unwinds a running saga whose pivot has not acted: the request itself is
    already recorded, so whoever claimed the saga since (and carries it on) honours it."""
    return ClaimGuard(frozenset({SagaStatus.RUNNING}), before_pivot=True)


def claimed(why: str) -> Event:
    return Event("lease_claimed", detail={"why": why})


def by_operator(action: str, who: Mapping[str, str]) -> Event:
    """The event of an operator's ``action``; ``who`` did it (a driver's answer to
    ``WhoAsks``: the engine reads no OS user or host itself)."""
    return Event("operator_action", detail={"action": action, **who})
