"""The engine of one coordinator: its flows and verbs, one object the drivers run.

``Engine`` holds what a coordinator's flows are bound to (owner id,
payload limit, resolver, definitions) and gives each flow as a public method:
carrying a saga forward, unwinding it, a context-manager saga's calls
(:meth:`Engine.scope`), and the verbs (rerun a key, recover, compensate,
resume, cancel, retry, skip; pause: :mod:`.pausing`). One copy for
``Coordinator`` and ``AsyncCoordinator``: each verb reads the saga, decides
(``saga._internal.engine.rules``), claims it with the decision's condition
checked inside the claim (a ``ClaimGuard``), and carries it forward or unwinds
it while its lease is kept alive. The store calls an operator makes go out as
plain-data effects (``Claim``, ``ClaimStuck``, ``Release``, ``NoteFenced``,
``ReadHistory``, ``RequestCancel``, ``RequestPause``); the drivers make them
(the asyncio one in a thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from saga._internal.codec import encode, encode_result
from saga._internal.definition import Saga
from saga._internal.engine import pausing, records, reopening, rules, unwind
from saga._internal.engine.decisions import RunStep, failed_step, recovery_route
from saga._internal.engine.effects import (
    DRAINING,
    WHO_ASKS,
    Claim,
    ClaimStuck,
    CodeRefs,
    Create,
    Flow,
    Load,
    NoteFenced,
    ReadHistory,
    Release,
    RequestCancel,
    Tell,
    holding,
    write,
)
from saga._internal.engine.fault_points import fault
from saga._internal.engine.forward import Forward, retried_budgets
from saga._internal.errors import (
    ConfigurationError,
    LeaseLostError,
    OperationRefusedError,
    SagaBusyError,
    SagaChangedError,
    SagaFailed,
    SagaHandedBack,
    UnknownSagaError,
)
from saga._internal.ports import ClaimGuard, Event, Runnable, SagaRecord
from saga._internal.status import SagaStatus

if TYPE_CHECKING:
    from saga._internal.engine.scope_flows import ScopeFlows
    from saga._internal.recovery import RecoveryOutcome, RecoveryReport

T = TypeVar("T")


class Definitions(Protocol):
    """Which definition a recorded saga runs with (the coordinator's registry)."""

    def started_with(self, record: SagaRecord) -> Saga: ...

    def saga_for(self, record: SagaRecord) -> Saga | None: ...

    def saga_if_known(self, record: SagaRecord) -> Saga | None: ...

    def runnable(self) -> Runnable: ...


class Engine:
    """The flows of one coordinator (its owner id, payload limit, resolver and
    definitions); a driver runs each: ``driver.run(engine.recover(...))``."""

    def __init__(
        self,
        owner: str,
        payload_limit: int,
        resolver: CodeRefs,
        definitions: Definitions,
    ) -> None:
        self.owner = owner
        self.payload_limit = payload_limit
        self.resolver = resolver
        self.definitions = definitions

    def scope(self, name: str, key: str | None, deadline: float | None) -> ScopeFlows:
        """The flows of a new context-manager saga (``.core`` plans its calls)."""
        # Imported here: a program that only runs declarative sagas never loads the
        # block's machinery (five modules; see tests/unit/test_import_graph.py).
        from saga._internal.engine.scope import ScopeCore
        from saga._internal.engine.scope_flows import ScopeFlows

        core = ScopeCore(self.owner, self.resolver, self.payload_limit, name, key, deadline)
        return ScopeFlows(core, self.resolver)

    def enter(self, scope: ScopeFlows) -> Flow[None]:
        """Entering a context-manager saga's block. If a crash left the saga its key
        names compensating, that unwinding is finished and ``SagaFailed`` raised."""
        unwinding = yield from scope.enter()
        if unwinding is None:
            return
        done = yield from self.unwind(unwinding, None)  # raises SagaFailed if it failed
        raise SagaFailed(done.id, done.status, failed_step(unwinding))

    def check_compensations(self, record: SagaRecord, saga: Saga | None) -> None:
        """Refuse (``UnsafeReferenceError``) before anything changes if a compensation
        still to run cannot be resolved safely."""
        unwind.check_compensations(self.resolver, record, saga)

    # -- a new declarative saga --------------------------------------------------------------

    def run(
        self, saga: Saga, data: Any, key: str | None, deadline: timedelta | float | None
    ) -> Flow[SagaRecord]:
        """Start ``saga`` and carry it to its end. With a key already used: the recorded
        outcome (``SagaFailed`` again if it failed), or the saga continued."""
        payload = encode(data, "input", self.payload_limit)
        if key is not None:  # a NUL byte or an oversized key is refused on every backend
            encode(key, "key", self.payload_limit)
        # No lookup by key first: creation clashes on (name, key) and returns
        # the existing saga, so a new saga costs no read-only round trip.
        record, change, started = rules.new_saga(saga, key, payload.text, self.owner, deadline)
        first_name = started[0].name if started else None
        yield from fault("before_start_commit", first_name)
        stored, created = yield Create(record, change)
        if not created:
            return (yield from self.rerun(saga, stored, payload.text))
        yield from fault("after_start_commit", first_name)
        return (yield from self.forward(saga, records.apply(record, change), started))

    # -- carrying a held saga on ------------------------------------------------------------

    def forward(
        self,
        saga: Saga,
        record: SagaRecord,
        started: Sequence[RunStep] = (),
    ) -> Flow[SagaRecord]:
        """Carry ``record`` forward while its lease is kept alive (and watched for a stop)."""
        budgets = {} if started else (yield from retried_budgets(saga, record))
        run = Forward(saga, record, self.payload_limit, self.resolver, budgets)
        return (yield from holding(record, run.run(list(started)), watch=True))

    def unwind(
        self, record: SagaRecord, saga: Saga | None, fresh: bool = False
    ) -> Flow[SagaRecord]:
        """Compensate what is left; ``SagaFailed(FAILED)`` if a compensation fails for good."""
        return (yield from holding(record, unwind.unwind(self.resolver, record, saga, fresh)))

    def turn(self, record: SagaRecord, why: str) -> Flow[SagaRecord]:
        event = rules.turn(record, why)
        return (yield from write(record, [], [event], SagaStatus.COMPENSATING))

    def load(self, saga_id: str) -> Flow[SagaRecord]:
        record: SagaRecord | None = yield Load(saga_id)
        if record is None:
            raise UnknownSagaError(f"no saga with id {saga_id!r}")
        return record

    def _claim(self, saga_id: str, event: Event, guard: ClaimGuard | None) -> Flow[SagaRecord]:
        """Claim the saga (``guard`` checked inside the claim); the listeners are told."""
        record: SagaRecord = yield Claim(saga_id, self.owner, event, guard)
        yield Tell(record, (event,))
        return record

    # -- a run that found its key taken ------------------------------------------------------

    def rerun(self, saga: Saga, existing: SagaRecord, input_text: str | None) -> Flow[SagaRecord]:
        """``run`` with a key already used: the recorded outcome, or the saga continued."""
        if rules.rerun(saga, existing, input_text):
            return existing
        try:
            record = yield from self._claim(
                existing.id, rules.claimed("rerun"), rules.continue_guard()
            )
        except SagaBusyError:
            raise
        except OperationRefusedError:  # it finished (or failed) between our read and our claim
            latest = yield from self.load(existing.id)
            return (yield from self.rerun(saga, latest, input_text))
        started = self.definitions.started_with(record)  # the version it began with
        if record.status is SagaStatus.COMPENSATING:
            done = yield from self.unwind(record, started)
            raise SagaFailed(done.id, done.status, failed_step(record))
        return (yield from self.forward(started, record))

    # -- recovery ---------------------------------------------------------------------------

    def recover(self, compensate: bool, limit: int | None) -> Flow[RecoveryReport]:
        """Claim every saga whose lease expired and finish it; one failure never stops the rest."""
        from saga._internal.recovery import RecoveryReport  # a recoverer's, not a run's

        report = RecoveryReport()
        seen: set[str] = set()
        while limit is None or len(report.outcomes) < limit:
            if (yield DRAINING):  # stopping: claim nothing more
                break
            # Every stuck saga, runnable here or not: one this process cannot run is
            # refused in the report and its history (a worker's loop uses claim_stuck).
            claimed = yield ClaimStuck(self.owner, 1)
            if not claimed:
                break
            saga_id = claimed[0]
            if saga_id in seen:  # everything older was handled; this one is refused again
                yield from self.release(saga_id)
                break
            seen.add(saga_id)
            report.outcomes.append((yield from self.recover_one(saga_id, compensate, swept=True)))
        return report

    def claim_stuck(self, limit: int) -> Flow[list[str]]:
        """Claim up to ``limit`` stuck sagas this process can run (none while draining);
        a saga it cannot run is left untouched for a process that can: what a loop that
        looks again every few seconds must do, or it would claim and refuse the same
        saga on every pass."""
        if (yield DRAINING):  # stopping: claim nothing more
            return []
        runnable = self.definitions.runnable()
        claimed: list[str] = yield ClaimStuck(self.owner, limit, runnable)
        return claimed

    def recover_saga(self, saga_id: str, compensate: bool) -> Flow[RecoveryOutcome]:
        """Claim this one saga (only a running or compensating one) and finish it."""
        detail = {"why": "operator recover", **(yield WHO_ASKS)}
        claim = self._claim(saga_id, Event("lease_claimed", detail=detail), rules.recover_guard())
        yield from self.guarded(claim, saga_id, rules.refuse_recover)
        return (yield from self.recover_one(saga_id, compensate))

    def recover_one(
        self, saga_id: str, compensate: bool, swept: bool = False
    ) -> Flow[RecoveryOutcome]:
        """Finish a saga this process claimed (``swept``: by ``claim_expired``, whose
        claim the listeners are told of once the saga is read)."""
        from saga._internal.recovery import RecoveryOutcome  # a recoverer's, not a run's

        record: SagaRecord | None = None
        try:
            record = yield from self.load(saga_id)
            if record.owner != self.owner:  # claimed by another since our claim
                return RecoveryOutcome.lost_to_another(saga_id, record.name)
            if swept:  # told with when its last owner last wrote: about when it died
                detail = {"owner": self.owner, "last_written_at": record.updated_at}
                yield Tell(record, (Event("lease_claimed", detail=detail),))
            done = yield from self.finish(record, compensate)
            return RecoveryOutcome(saga_id, record.name, done.status, None)
        except SagaFailed as failure:
            return RecoveryOutcome(saga_id, _name(record), failure.status, None)
        except LeaseLostError:
            # This process stalled past its lease and another claimed the saga: the
            # history is that process's now, so not even a refusal is written here.
            return RecoveryOutcome.lost_to_another(saga_id, _name(record))
        except SagaHandedBack as handed:  # stopping, or waiting: another goes on
            return RecoveryOutcome.given_back(saga_id, _name(record), handed.status, handed.why)
        except Exception as error:  # one saga's problem never stops the others
            yield from self.refused(saga_id, record, error)
            return RecoveryOutcome(saga_id, _name(record), None, str(error))

    def finish(self, record: SagaRecord, compensate: bool) -> Flow[SagaRecord]:
        """Carry a claimed saga to its end: forward or unwinding, as the rules say."""
        saga = self.definitions.saga_for(record)
        route = recovery_route(record, saga, compensate)
        if route == "forward":
            assert saga is not None
            return (yield from self.forward(saga, record))
        if route == "turn":
            self.check_compensations(record, saga)  # refuse before changing anything
            record = yield from self.turn(record, "recovery")
        return (yield from self.unwind(record, saga))

    def release(self, saga_id: str) -> Flow[None]:
        """Give up a claimed saga untouched, so that a better-equipped process can take it."""
        record = yield Load(saga_id)
        if record is not None and record.owner == self.owner:
            yield Release(records.release(record))

    def refused(self, saga_id: str, record: SagaRecord | None, error: BaseException) -> Flow[None]:
        """Record why a claimed saga was not finished, and release it; both fenced by the
        epoch of our claim, so nothing is written once another process has claimed it."""
        event = Event(
            "recovery_refused", detail={"error": records.describe(error), "owner": self.owner}
        )
        try:
            epoch = record.epoch if record is not None else (yield from self._claim_epoch(saga_id))
            if epoch is None:
                return
            noted = yield NoteFenced(saga_id, epoch, event)
            if noted and record is not None:
                yield Tell(record, (event,))
            if noted:
                yield from self.release(saga_id)
        except Exception:  # noqa: S110 - reporting must not hide the first error
            pass

    def _claim_epoch(self, saga_id: str) -> Flow[int | None]:
        """The epoch of our claim, from the history: for a row that could not be read."""
        history = yield ReadHistory(saga_id)
        for event in reversed(history):
            if event.epoch is not None and (event.detail or {}).get("owner") == self.owner:
                return int(event.epoch)  # every event naming us as owner is under our claim
        return None

    # -- operator verbs -----------------------------------------------------------------------

    def compensate(self, saga_id: str, action: str) -> Flow[SagaRecord]:
        """Unwind a stuck or failed saga now (refused past a pivot or once finished)."""
        record = yield from self.load(saga_id)
        rules.refuse_compensate(record)
        saga = self.definitions.saga_for(record)
        self.check_compensations(record, saga)  # refuse before changing anything
        who = yield WHO_ASKS
        claim = self._claim(saga_id, rules.by_operator(action, who), rules.compensate_guard(record))
        record = yield from self.guarded(claim, saga_id, rules.refuse_compensate)
        fresh = record.status is SagaStatus.FAILED
        if record.status is not SagaStatus.COMPENSATING:
            record = yield from self.turn(record, "operator compensate")
        return (yield from self.unwind(record, saga, fresh))

    def resume(self, saga_id: str) -> Flow[SagaRecord]:
        """Carry a stuck or paused declarative saga forward now. A paused one turns
        ``running`` first, and each step it runs again gets its retry policy's attempts
        again (their numbers keep counting)."""
        record = yield from self.load(saga_id)
        rules.refuse_resume(record)
        saga = self.definitions.saga_for(record)
        assert saga is not None
        who = yield WHO_ASKS
        claim = self._claim(saga_id, rules.by_operator("resume", who), rules.resume_guard(record))
        record = yield from self.guarded(claim, saga_id, rules.refuse_resume)
        if record.status is SagaStatus.PAUSED:  # its parked steps again, fresh budgets
            return (yield from self._reopen(saga, record, reopening.reopened(record, saga)))
        return (yield from self.forward(saga, record))

    def pause(self, saga_id: str) -> Flow[SagaRecord]:
        """Hold a running declarative saga at its next step boundary, nothing compensated
        (see :mod:`saga._internal.engine.pausing`)."""
        return (yield from pausing.pause(self, saga_id))

    def retry(self, saga_id: str, from_step: str | None = None) -> Flow[SagaRecord]:
        """Run forward again a saga that failed past its pivot (a fix deployed): its
        failed steps once more, each with its whole retry budget, then the rest; with
        ``from_step``, that step and every step after it (see :mod:`.reopening`)."""
        record = yield from self.load(saga_id)
        reopening.refuse_retry(record)
        saga = self.definitions.saga_for(record)  # refused if its definition changed
        assert saga is not None

        def refuse(found: SagaRecord) -> None:
            if from_step is None:
                reopening.refuse_retry(found)
            else:
                reopening.run_again_from(saga, found, from_step)

        refuse(record)
        who = yield WHO_ASKS
        asked = who if from_step is None else {**who, "from_step": from_step}
        event = rules.by_operator("retry", asked)
        claim = self._claim(saga_id, event, reopening.retry_guard(record))
        record = yield from self.guarded(claim, saga_id, refuse)
        again = reopening.reopened(record, saga, from_step=from_step)
        return (yield from self._reopen(saga, record, again))

    def skip(self, saga_id: str, step: str, result: Any, reason: str) -> Flow[SagaRecord]:
        """Record that an operator did step ``step`` of a saga failed past its pivot by
        hand, with ``result`` as if it had returned it; then go on as ``retry`` does."""
        if not reason.strip():
            raise ConfigurationError("skip: the reason must say what was done by hand")
        record = yield from self.load(saga_id)
        reopening.refuse_skip(record, step)
        saga = self.definitions.saga_for(record)
        assert saga is not None
        encoded = encode_result(result, f"result of step {step!r}", self.payload_limit)
        who = yield WHO_ASKS
        event = rules.by_operator("skip", {**who, "step": step, "reason": reason})
        claim = self._claim(saga_id, event, reopening.retry_guard(record))
        record = yield from self.guarded(claim, saga_id, lambda r: reopening.refuse_skip(r, step))
        done = reopening.skipped(record, step, encoded, reason, who)
        return (yield from self._reopen(saga, record, reopening.reopened(record, saga, done)))

    def _reopen(
        self, saga: Saga, record: SagaRecord, reopening: reopening.Reopening
    ) -> Flow[SagaRecord]:
        """Commit the turn of a failed (or paused) saga back to ``running``, then carry it
        forward."""
        writes, events, runs = reopening
        yield from fault("before_retry_commit", runs[0].name if runs else None)
        record = yield from write(record, writes, events, SagaStatus.RUNNING)
        return (yield from self.forward(saga, record, runs))

    def cancel(self, saga_id: str) -> Flow[SagaRecord]:
        """Ask a running saga to stop at its next step boundary and unwind.

        The request is recorded first, whatever follows: a live owner honours it at
        its next step boundary; a stuck saga is unwound here if this process knows its
        definition, else by the recovery of a process that does.
        """
        record = yield from self.load(saga_id)
        rules.refuse_cancel(record)
        guard, event = rules.cancel_guard(), rules.by_operator("cancel", (yield WHO_ASKS))
        yield from self.guarded(
            self._request_cancel(record, event, guard), saga_id, rules.refuse_cancel
        )
        saga = self.definitions.saga_if_known(record)
        if saga is None and record.kind == "declarative":
            return (yield from self.load(saga_id))  # recorded; one with the definition unwinds it
        try:
            record = yield from self._claim(saga_id, rules.claimed("cancel"), guard)
        except OperationRefusedError:  # busy, or its owner honoured the request meanwhile
            return (yield from self.load(saga_id))
        record = yield from self.turn(record, "cancel requested")
        return (yield from self.unwind(record, saga))

    def claim_guarded(
        self, saga_id: str, event: Event, guard: ClaimGuard, refuse: Callable[[SagaRecord], object]
    ) -> Flow[SagaRecord]:
        """Claim the saga for an operator's verb, on the condition the verb was decided
        under (``guard``, checked inside the claim). If the saga moved on since it was
        read, the verb's own refusal of its new state says why, else ``SagaChangedError``."""
        return (yield from self.guarded(self._claim(saga_id, event, guard), saga_id, refuse))

    def _request_cancel(self, record: SagaRecord, event: Event, guard: ClaimGuard) -> Flow[None]:
        yield RequestCancel(record.id, event, guard)
        yield Tell(record, (event,))

    def guarded(
        self, call: Flow[T], saga_id: str, refuse: Callable[[SagaRecord], object]
    ) -> Flow[T]:
        """Run the guarded store ``call``; if its guard no longer held, the verb's own
        refusal of the saga's new state says why, else ``SagaChangedError`` does."""
        try:
            return (yield from call)
        except SagaChangedError:
            refuse((yield from self.load(saga_id)))
            raise


def _name(record: SagaRecord | None) -> str:
    return record.name if record is not None else "?"
