"""Operator verbs on many sagas at once: a selection, and one runner for any verb.

:func:`select_sagas` reads the sagas a :class:`Selection` matches through the
listing ``saga list`` uses (:func:`~saga.admin.list_sagas`), newest first, a
page at a time. :func:`act_on_many` applies one single-saga verb
(:data:`VERBS`: ``compensate``, ``resume``, ``pause``, ``cancel``, ``retry``,
``retry-compensation``;
or any function of a coordinator and a saga id) to each, in bounded batches,
and reports per saga. Each verb claims its saga with its condition checked in
the claim, so a saga that moved since it was read is refused, changing
nothing, and the others go on.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from saga._internal.coordinator import Coordinator
from saga._internal.errors import (
    ConfigurationError,
    OperationRefusedError,
    SagaError,
    SagaFailed,
    SagaHandedBack,
    StorageUnavailableError,
    UnknownSagaError,
)
from saga._internal.explanation import explain
from saga._internal.status import SagaStatus
from saga._internal.views import SagaView
from saga.admin.actions import cancel, compensate, pause, resume, retry, retry_compensation
from saga.admin.facts import current_step, json_value
from saga.admin.inputs import SagaRef, parse_duration, parse_statuses
from saga.admin.reads import list_sagas
from saga.admin.waiting import waiting_after

Verb = Callable[[Coordinator, SagaRef], SagaView]
"""A single-saga operator verb: acts on the saga named and returns where it now stands."""

VERBS: Mapping[str, Verb] = {
    "compensate": compensate,
    "resume": resume,
    "pause": pause,
    "cancel": cancel,
    "retry": retry,
    "retry-compensation": retry_compensation,
}
"""The verbs the ``saga`` command applies to a selection, by command name."""

CANCEL_PENDING = (
    "cancel requested: its owner stops at its next step boundary, or the next recovery "
    "by a process that knows its definition unwinds it"
)
"""Why a cancelled saga is still running: the request waits for whoever runs it."""

PAUSE_PENDING = "paused: its owner hands it back at its next step boundary"
"""Why a paused saga still has an owner: the step in flight ends first."""

DEFAULT_BATCH = 100
"""Sagas read, then acted on, at a time."""


@dataclasses.dataclass(frozen=True, slots=True)
class Selection:
    """Which sagas to act on: those matching every filter given (at least one).

    ``key_prefix`` matches the start of a key exactly; ``step`` the current step,
    as ``saga list`` shows it; ``older_than`` is seconds since creation, by the
    database clock. ``limit`` caps how many are acted on (the newest that match).
    """

    statuses: tuple[SagaStatus, ...] = ()
    name: str | None = None
    key_prefix: str | None = None
    step: str | None = None
    older_than: float | None = None
    stuck: bool = False
    limit: int | None = None

    @classmethod
    def parse(
        cls,
        *,
        statuses: Sequence[str] = (),
        name: str | None = None,
        key_prefix: str | None = None,
        step: str | None = None,
        older_than: str | None = None,
        stuck: bool = False,
        limit: int | None = None,
    ) -> Selection:
        """A selection from what an operator typed (``--status failed,cancelled``,
        ``--older-than 1h``), checked: bad input is a ``ConfigurationError`` naming it."""
        age = None if older_than is None else parse_duration(older_than, "--older-than")
        selection = cls(parse_statuses(statuses), name, key_prefix, step, age, stuck, limit)
        selection.check()
        return selection

    @property
    def given(self) -> bool:
        """Whether any filter is given (``limit`` is none)."""
        values = (self.name, self.key_prefix, self.step, self.older_than)
        return bool(self.statuses) or self.stuck or any(v is not None for v in values)

    def check(self) -> None:
        """Refuse a selection of every saga, or one that cannot be meant."""
        if not self.given:
            raise ConfigurationError(
                "select sagas with at least one filter: --status, --name, --key-prefix, "
                "--step, --older-than or --stuck"
            )
        if self.limit is not None and self.limit < 1:
            raise ConfigurationError(f"--limit must be at least 1, not {self.limit}")
        if self.key_prefix == "":
            raise ConfigurationError("--key-prefix needs at least one character")
        if self.older_than is not None and self.older_than < 0:
            raise ConfigurationError("--older-than must not be negative")

    def describe(self) -> str:
        """The filters as options, each value quoted for a shell: ``--status failed
        --name transfer --older-than 1h``."""
        words: list[str] = []
        if self.statuses:
            words += ["--status", ",".join(s.value for s in self.statuses)]
        for option, value in (
            ("--name", self.name),
            ("--key-prefix", self.key_prefix),
            ("--step", self.step),
        ):
            if value is not None:
                words += [option, shlex.quote(value)]
        if self.older_than is not None:
            words += ["--older-than", duration_words(self.older_than)]
        words += ["--stuck"] if self.stuck else []
        return " ".join(words)

    def as_json(self) -> dict[str, Any]:
        return {
            "statuses": [s.value for s in self.statuses],
            "name": self.name,
            "key_prefix": self.key_prefix,
            "step": self.step,
            "older_than_seconds": self.older_than,
            "stuck": self.stuck,
            "limit": self.limit,
        }


def duration_words(seconds: float) -> str:
    """``3600`` as ``1h``, ``5400`` as ``1h30m``, ``0.5`` as ``0.5s``: what
    ``parse_duration`` reads back."""
    if seconds != int(seconds) or seconds == 0:
        return f"{seconds:g}s"
    left, words = int(seconds), ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        words += f"{count}{unit}" if count else ""
    return words


def select_sagas(
    coord: Coordinator, selection: Selection, *, page: int = DEFAULT_BATCH
) -> Iterator[SagaView]:
    """The sagas ``selection`` matches, newest first (as ``saga list`` shows them), at
    most ``selection.limit``: read ``page`` at a time, each page when the one before is
    used up. The views carry no payloads (as a listing's). Nothing is changed.

    The selection is checked at once; the database is read as the iterator is used."""
    selection.check()
    if page < 1:
        raise ConfigurationError(f"--batch-size must be at least 1, not {page}")
    return _pages(coord, selection, page)


def _pages(coord: Coordinator, selection: Selection, page: int) -> Iterator[SagaView]:
    left, before = selection.limit, None
    while left is None or left > 0:
        size = page if left is None else min(page, left)
        found = list_sagas(
            coord,
            statuses=selection.statuses,
            name=selection.name,
            key_prefix=selection.key_prefix,
            step=selection.step,
            stuck=selection.stuck,
            older_than=selection.older_than,
            limit=size,
            before=before,
        )
        yield from found.sagas
        left = None if left is None else left - len(found.sagas)
        before = found.next_before
        if before is None:
            return


class Outcome(enum.StrEnum):
    """How acting on one saga of a selection ended."""

    DONE = "done"  # the verb returned: the saga stands as ``status`` says
    WAITING = "waiting"  # its compensation failed again and waits for its next attempt
    REFUSED = "refused"  # busy, moved on since it was read, finished, past its pivot, ...
    FAILED = "failed"  # the verb ran and the saga failed, or an error stopped it
    PLANNED = "planned"  # a dry run: nothing was done


_OK = (Outcome.DONE, Outcome.WAITING, Outcome.PLANNED)


@dataclasses.dataclass(frozen=True, slots=True)
class BulkItem:
    """One saga of a bulk action: as it was selected, and how acting on it ended."""

    saga_id: str
    name: str
    key: str | None
    was: SagaStatus
    """Its status when it was selected."""
    step: str | None
    """Its current step when it was selected."""
    outcome: Outcome
    status: SagaStatus | None = None
    """Its status after the action (None: not acted on, or unknown)."""
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """Done, planned, or waiting for a worker to make its compensation's next attempt."""
        return self.outcome in _OK

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.saga_id,
            "name": self.name,
            "key": self.key,
            "status_before": self.was.value,
            "current_step": self.step,
            "result": self.outcome.value,
            "status": json_value(self.status),
            "reason": self.reason,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class BulkReport:
    """What a bulk action did (or, ``dry_run``, would do) to each saga, in order."""

    action: str
    dry_run: bool
    items: tuple[BulkItem, ...]
    stopped: str | None = None
    """Why the run stopped before the end of its selection (the database became
    unreachable), else None."""

    def count(self, outcome: Outcome) -> int:
        return sum(1 for item in self.items if item.outcome is outcome)

    @property
    def ok(self) -> bool:
        """Every saga was acted on (or waits for a worker); none refused or failed."""
        return self.stopped is None and all(item.ok for item in self.items)

    def as_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "sagas": [item.as_json() for item in self.items],
            "summary": {outcome.value: self.count(outcome) for outcome in Outcome},
            "ok": self.ok,
            "total": len(self.items),
            "stopped": self.stopped,
        }


BulkProgress = Callable[[BulkItem, int], None]
"""Called after each saga with (its item, how many are done so far)."""


def act_on_many(
    coord: Coordinator,
    targets: Iterable[SagaView],
    action: str | Verb,
    *,
    batch_size: int = DEFAULT_BATCH,
    progress: BulkProgress | None = None,
    dry_run: bool = False,
) -> BulkReport:
    """Apply ``action`` (a name in :data:`VERBS`, or a verb) to each saga of ``targets``,
    ``batch_size`` taken from them at a time (a lazy :func:`select_sagas` then reads one
    page per batch), one saga after another; with ``dry_run`` only list them.

    A saga the verb refuses, or on which it fails, is reported as such and the rest go
    on; only an unreachable database stops the run (``BulkReport.stopped``)."""
    name, verb = _verb(action)
    if batch_size < 1:
        raise ConfigurationError(f"--batch-size must be at least 1, not {batch_size}")
    items: list[BulkItem] = []
    chosen = iter(targets)
    try:
        while batch := list(itertools.islice(chosen, batch_size)):
            for view in batch:
                item, lost = (_planned(view), None) if dry_run else _act_on(coord, view, verb)
                items.append(item)
                if progress is not None:
                    progress(item, len(items))
                if lost is not None:  # every saga after it would fail the same way
                    return BulkReport(name, dry_run, tuple(items), lost)
    except StorageUnavailableError as error:  # reading the next batch
        return BulkReport(name, dry_run, tuple(items), explain(error)[1])
    return BulkReport(name, dry_run, tuple(items))


def verb_with(name: str, options: Mapping[str, str]) -> Verb:
    """The verb ``name`` of :data:`VERBS`, given its own options (``retry``'s
    ``from_step``); refused for a verb that takes none of them."""
    verb = _verb(name)[1]
    if not options:
        return verb
    if name != "retry" or set(options) != {"from_step"}:
        given = ", ".join(sorted(options))
        raise ConfigurationError(f"{name} takes no {given}; --from goes with retry")

    def with_options(coord: Coordinator, saga_id: SagaRef) -> SagaView:
        return retry(coord, saga_id, options["from_step"])

    with_options.__name__ = name
    return with_options


def _verb(action: str | Verb) -> tuple[str, Verb]:
    if not isinstance(action, str):
        return getattr(action, "__name__", "action").replace("_", "-"), action
    if action not in VERBS:
        raise ConfigurationError(f"no verb {action!r}; use one of: {', '.join(VERBS)}")
    return action, VERBS[action]


def _planned(view: SagaView) -> BulkItem:
    step = current_step(view)
    name = None if step is None else step.name
    return BulkItem(view.id, view.name, view.key, view.status, name, Outcome.PLANNED)


def _act_on(coord: Coordinator, view: SagaView, verb: Verb) -> tuple[BulkItem, str | None]:
    """Apply ``verb`` to one saga; its refusal or failure becomes the item's outcome. The
    second value says why the run must stop (the database is unreachable), else None."""
    item = _planned(view)
    try:
        after = verb(coord, view.id)
    except SagaHandedBack as handed:
        if not handed.waiting:
            return _ended(item, Outcome.FAILED, handed.status, str(handed)), None
        reason = f"waiting: {waiting_after(coord, handed).text}"
        return _ended(item, Outcome.WAITING, handed.status, reason), None
    except (OperationRefusedError, UnknownSagaError) as refused:
        return _ended(item, Outcome.REFUSED, None, str(refused)), None
    except StorageUnavailableError as lost:
        reason = explain(lost)[1]
        return _ended(item, Outcome.FAILED, None, reason), reason
    except SagaFailed as failed:
        return _ended(item, Outcome.FAILED, failed.status, explain(failed)[1]), None
    except SagaError as error:
        return _ended(item, Outcome.FAILED, None, f"{type(error).__name__}: {error}"), None
    if after.status is SagaStatus.FAILED:
        reason = "a compensation failed for good; see `saga show` and `saga history`"
        return _ended(item, Outcome.FAILED, after.status, reason), None
    return _ended(item, Outcome.DONE, after.status, pending(after)), None


def pending(after: SagaView) -> str | None:
    """What the saga still waits for after a verb that only asks its owner (cancel, pause)."""
    if after.status is SagaStatus.RUNNING and after.cancel_requested:
        return CANCEL_PENDING
    return PAUSE_PENDING if after.status is SagaStatus.PAUSED and after.owner else None


def _ended(
    item: BulkItem, outcome: Outcome, status: SagaStatus | None, why: str | None
) -> BulkItem:
    return dataclasses.replace(item, outcome=outcome, status=status, reason=why)
