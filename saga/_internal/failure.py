"""The ``SagaFailed`` a saga's records say it ended with.

A compensation that fails for good ends the saga ``failed``; what is raised
names that compensation's step and carries its error. A rerun with the key
of a saga that failed raises its ``SagaFailed`` again, rebuilt from the
records alone: the failing step (its error is also the saga's), the
compensation that gave up (still ``compensating``, its error on its row),
and their errors, stored as ``"TypeName: message"`` by ``describe_error``.

The database is not trusted to name code: nothing is imported. A stored
name that is exactly a builtin exception class gives that class again (when
it reads back exactly as recorded); any other gives a ``RecordedError``.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator
from typing import Any, NoReturn

from saga._internal.errors import RecordedError, SagaFailed, describe_error
from saga._internal.ports import SagaRecord, StepRecord
from saga._internal.status import SagaStatus, StepStatus

_DESCRIBED = re.compile(r"([A-Za-z_]\w*): (.*)", re.DOTALL)
_FAILED_ONCE = (
    StepStatus.FAILED,
    StepStatus.IN_DOUBT,
    StepStatus.COMPENSATING,
    StepStatus.COMPENSATED,
)


def compensation_failed(
    record: SagaRecord, name: str, text: str, error: BaseException | None
) -> SagaFailed:
    """What to raise once step ``name``'s compensation failed for good (``text`` is what
    was recorded; ``error`` what it raised, if it raised anything)."""
    if error is None:  # its attempts were used up without an exception to show
        step = record.step(name)
        attempt = None if step is None else step.undo_attempt
        error = RecordedError(None, text, saga_id=record.id, step=name, attempt=attempt)
    return SagaFailed(
        record.id, SagaStatus.FAILED, failed_compensation=name, compensation_error=error
    )


def raise_from_block(failure: SagaFailed, error: BaseException | None) -> NoReturn:
    """Raise ``failure`` from ``error``, the error a ``with coord.saga(...)`` block left
    with, chained as ``run()`` chains it: a compensation's error that ended it as the
    ``__context__`` (the participant's own exception, found by walking the chain).

    Raised in ``__exit__`` as such, the block's error being handled would become the
    context in its place; so ``failure`` is raised while the compensation's is."""
    undo = failure.compensation_error
    if undo is None or undo is error:
        raise failure from error
    context, traceback = undo.__context__, undo.__traceback__
    try:
        raise undo
    except BaseException:
        # Raising it again chained it to the block's error and grew its traceback by this
        # frame: put both back, it is reported as it was raised.
        undo.__context__, undo.__traceback__ = context, traceback
        raise failure from error


def recorded_failure(record: SagaRecord) -> SagaFailed:
    """The ``SagaFailed`` the first run of this finished saga raised, rebuilt from its
    record: the same message, ``failed_step``, failed compensation, and a ``__cause__``
    rebuilt from the error that made it unwind."""
    failing = failing_step(record)
    undo = compensation_step(record)
    failure = SagaFailed(
        record.id,
        record.status,
        None if failing is None else failing.name,
        failed_compensation=None if undo is None else undo.name,
        compensation_error=None if undo is None else _undo_error(record, undo),
    )
    cause = _cause(record, failing)
    if cause is not None:
        failure.__cause__ = cause
    return failure


def failing_step(record: SagaRecord) -> StepRecord | None:
    """The step whose failure made the saga unwind (or end ``failed``), if a step's did.

    The commit recording a step's failure gives the saga the same error text, so
    it is the newest step that never succeeded with that error. If its own
    compensation failed, that wrote its error over the step's: then it is the
    step still compensating, or else the newest that failed.
    """
    failed = [
        s
        for s in reversed(record.steps)
        if s.result is None and s.error is not None and s.status in _FAILED_ONCE
    ]
    if record.error is None:  # written by no failing commit: the newest failure, if any
        return next((s for s in failed if s.status is not StepStatus.COMPENSATING), None)
    same = [s for s in failed if s.error == record.error]
    undoing = [s for s in failed if s.status is StepStatus.COMPENSATING]
    return next(iter(same or undoing or failed), None)


def compensation_step(record: SagaRecord) -> StepRecord | None:
    """The step whose compensation failed for good: still compensating in a failed saga."""
    if record.status is not SagaStatus.FAILED:
        return None
    undoing = (s for s in reversed(record.steps) if s.status is StepStatus.COMPENSATING)
    return next((s for s in undoing if s.error is not None), None)


def rebuilt_error(
    text: str, *, saga_id: str | None = None, step: str | None = None, attempt: int | None = None
) -> Exception:
    """The error a stored ``"TypeName: message"`` describes (``saga_id``, ``step`` and
    ``attempt`` go on a ``RecordedError``); text without a type name is a reason, kept as
    a ``RecordedError`` whose ``type_name`` is None."""
    described = _DESCRIBED.fullmatch(text)
    if described is None:
        return RecordedError(None, text, saga_id=saga_id, step=step, attempt=attempt)
    name, message = described.groups()
    builtin = _builtin(name, message, text)
    if builtin is not None:
        return builtin
    return RecordedError(name, message, saga_id=saga_id, step=step, attempt=attempt)


def _builtin(name: str, message: str, text: str) -> Exception | None:
    """The builtin exception class called exactly ``name``, made again, if it reads back
    exactly as ``text``; None for any other name (nothing is imported or looked up
    anywhere but in the builtins module's own names)."""
    cls = vars(builtins).get(name)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    for args in _arguments(cls, message):
        error = _made(cls, args)
        if error is not None and describe_error(error) == text:
            return error
    return None


def _arguments(cls: type[Exception], message: str) -> Iterator[tuple[Any, ...]]:
    yield (message,)
    if issubclass(cls, KeyError):  # str(KeyError(key)) is repr(key): read the key back
        try:
            yield (ast.literal_eval(message),)  # literals only: no code runs
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return


def _made(cls: type[Exception], args: tuple[Any, ...]) -> Exception | None:
    try:
        return cls(*args)
    except Exception:  # noqa: BLE001 - a class that wants other arguments is not rebuilt
        return None


def _undo_error(record: SagaRecord, step: StepRecord) -> Exception:
    """The error of ``step``'s compensation, which gave up at its last undo attempt."""
    assert step.error is not None
    return rebuilt_error(step.error, saga_id=record.id, step=step.name, attempt=step.undo_attempt)


def _cause(record: SagaRecord, failing: StepRecord | None) -> Exception | None:
    """The error that made the saga unwind, rebuilt; None if none was raised (no error,
    or a reason such as attempts that never returned: the first run had no cause)."""
    if record.error is None:
        return None
    step, attempt = (None, None) if failing is None else (failing.name, failing.attempt)
    error = rebuilt_error(record.error, saga_id=record.id, step=step, attempt=attempt)
    if isinstance(error, RecordedError) and error.type_name is None:
        return None
    return error
