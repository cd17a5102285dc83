"""What must hold once the soak has settled, checked against the store, the bank and the logs.

* every saga is terminal, and every transfer the driver began exists exactly
  once, with the input its plan says;
* per saga, the crash tests' invariants (:func:`tests.crash.invariants.check_saga`
  with the bank's calls as the effect ledger): applied at most once, undone at
  most once, completed = every effect applied and nothing undone,
  compensated/cancelled = nothing left applied and every compensatable step
  compensated, compensations newest first, attempts within ``max_attempts``,
  epochs of the calls never going back; and its history replays to its status
  (:func:`tests.crash.invariants.check_history`);
* every bank call ran under an epoch the saga's history shows it was claimed with;
* a transfer planned to fail or to crash-loop never completed; a cancelled one
  was cancelled by the operator; a failed one is a pivot that never returned in
  all its attempts (it crash-looped, or kills kept landing in it), with nothing
  undone, or a compensation whose every attempt ended with its process or its
  lease (attempts count across crashes, as the crash tests check);
* money: the bank's total is what it opened with, no column is negative, and
  each account is its opening balance plus the moves of the effects applied.
"""

from __future__ import annotations

import collections
import dataclasses

from saga import Coordinator, SagaStatus, SagaView
from saga._internal.ports import EventRecord
from tests.crash.invariants import MAX_STEP_ATTEMPTS, check_history, check_saga
from tests.crash.ledger import Call, Ledger
from tests.soak import bank
from tests.soak.plan import ACCOUNTS, OPENING, Planned, planned


def all_sagas(coord: Coordinator) -> list[SagaView]:
    views: list[SagaView] = []
    before: str | None = None
    while True:
        page = coord.list(limit=500, before=before)
        views += page
        if len(page) < 500:
            return views
        before = page[-1].id


@dataclasses.dataclass
class Verdict:
    """What the checks counted."""

    sagas: int = 0
    statuses: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    calls: int = 0
    applied: int = 0
    undone: int = 0
    failed_by: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Failed transfers by what gave up: ``pivot`` or ``compensation``."""


def check_everything(
    coord: Coordinator,
    bank_url: str,
    seed: int,
    begun: list[int],
    cancelled_by_operator: set[str],
) -> Verdict:
    verdict = Verdict()
    views = all_sagas(coord)
    assert all(view.key for view in views), "a saga without a key: the driver sets one"
    by_key = collections.Counter(view.key or "" for view in views)
    twice = sorted(key for key, count in by_key.items() if count != 1)
    assert not twice, f"keys stored more than once: {twice[:10]}"
    keys = {f"t-{n}" for n in begun}
    stored = set(by_key)
    assert stored == keys, (
        f"begun but never stored: {sorted(keys - stored)[:10]}; "
        f"stored but never begun: {sorted(stored - keys)[:10]}"
    )
    book = bank.ledger(bank_url)
    calls: dict[str, list[Call]] = collections.defaultdict(list)
    for call in book.calls:
        calls[call.saga_id].append(call)
    applied: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
    for saga_id, step in book.applied:
        applied[saga_id].add((saga_id, step))
    for view in views:
        assert view.key is not None
        plan = planned(seed, int(view.key.removeprefix("t-")), bank_url)
        own = Ledger(tuple(calls.pop(view.id, [])), frozenset(applied.pop(view.id, set())))
        gave_up = check_one(coord, view, plan, own, cancelled_by_operator)
        verdict.statuses[view.status.value] += 1
        if gave_up is not None:
            verdict.failed_by[gave_up] += 1
    strays = sorted(set(calls) | set(applied))[:5]
    assert not strays, f"bank calls or effects of sagas that do not exist: {strays}"
    verdict.sagas = len(views)
    verdict.calls = len(book.calls)
    verdict.applied = sum(c.effective for c in book.calls if c.kind == "do")
    verdict.undone = sum(c.effective for c in book.calls if c.kind == "undo")
    check_money(bank_url)
    return verdict


def check_one(
    coord: Coordinator,
    view: SagaView,
    plan: Planned,
    book: Ledger,
    cancelled_by_operator: set[str],
) -> str | None:
    """The checks of one saga; a failure tells the saga's whole story. For a failed
    saga, what gave up (see :func:`_check_failed`)."""
    try:
        return _check_one(coord, view, plan, book, cancelled_by_operator)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{story(coord, view, book)}") from None


def story(coord: Coordinator, view: SagaView, book: Ledger) -> str:
    """The saga's steps, its history and its bank calls, for a failure message."""
    lines = [f"input {view.input}", f"error {view.error}"]
    lines += [
        f"  step {s.seq} {s.name} {s.status.value} attempt {s.attempt} "
        f"undo attempt {s.compensation_attempt} error {s.error}"
        for s in view.steps
    ]
    lines += [
        f"  event {e.at:.3f} epoch {e.epoch} {e.kind} {e.step or ''} {e.attempt or ''} "
        f"{e.detail or ''}"
        for e in coord.history(view.id)
    ]
    lines += [
        f"  bank call {c.id} {c.kind} {c.step} attempt {c.attempt} epoch {c.epoch} "
        f"pid {c.pid} effective {c.effective}"
        for c in book.calls
    ]
    return "\n".join(lines)


def _check_one(
    coord: Coordinator,
    view: SagaView,
    plan: Planned,
    book: Ledger,
    cancelled_by_operator: set[str],
) -> str | None:
    where = f"saga {view.id} ({view.key}, {view.status.value}, planned {plan.fault})"
    assert view.status.is_terminal, f"{where} is not terminal"
    assert (view.name, view.input) == (plan.saga, plan.data), f"{where}: not the planned input"
    check_saga(view, book, bank.STEPS, bank.kind_of)
    events = coord.history(view.id)
    check_history(view, events)
    # A claim is recorded as lease_claimed, or as the operator_action that took the saga.
    claimed = {e.epoch for e in events if e.epoch is not None}
    strays = sorted({c.epoch for c in book.of(view.id)} - claimed)
    assert not strays, f"{where}: bank calls under epochs {strays}, never claimed ({claimed})"
    if view.status is SagaStatus.COMPLETED:
        assert plan.may_complete, f"{where}: completed although it was planned to {plan.fault}"
    if view.status is SagaStatus.CANCELLED:
        assert view.id in cancelled_by_operator, f"{where}: cancelled, but nobody asked"
    return _check_failed(view, events, book, where) if view.status is SagaStatus.FAILED else None


def _check_failed(view: SagaView, events: list[EventRecord], book: Ledger, where: str) -> str:
    """A transfer ends ``failed`` only when every attempt of its pivot, or of one of its
    compensations, ended with its process or its lease (killed, or taken over): the
    attempts count across crashes (docs/reliability.md), and none of them raised."""
    given_up = [e for e in events if e.kind == "compensation_failed"]
    if given_up:  # kills kept landing in one compensation
        [event] = given_up
        assert (event.detail or {}).get("error") == "compensation attempts used up", where
        assert event.attempt == bank.UNDO_RETRY.max_attempts, f"{where}: {event}"
        return "compensation"
    started = [step.name for step in view.steps]
    assert bank.PIVOT in started, f"{where}: failed before its pivot ({started}): {view.error}"
    pivot = view.step(bank.PIVOT)
    assert "never returned" in (pivot.error or ""), f"{where}: {view.error}"
    assert pivot.attempt == MAX_STEP_ATTEMPTS, f"{where}: pivot attempt {pivot.attempt}"
    assert not any(c.effective for c in book.of(view.id, kind="undo")), f"{where}: undone"
    return "pivot"


def check_money(bank_url: str) -> None:
    books = bank.books(bank_url)
    opening_total = ACCOUNTS * OPENING
    assert books.total == opening_total, f"the bank holds {books.total}, not {opening_total}"
    assert not books.negatives(), f"negative columns: {books.negatives()}"
    expected = {account: [OPENING, 0, 0] for account in bank.accounts(ACCOUNTS)}
    expected[bank.FEES] = [0, 0, 0]
    for applied in books.applied.values():
        for account, column, delta in applied:
            expected[account][bank.COLUMNS.index(column)] += delta
    wrong = {
        account: (columns, tuple(expected[account]))
        for account, columns in books.accounts.items()
        if columns != tuple(expected[account])
    }
    assert not wrong, f"accounts that disagree with their applied effects: {wrong}"
