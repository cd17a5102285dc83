"""The sans-I/O engine: decisions and records as pure functions of recorded state."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from saga import IllegalTransitionError, RetryPolicy, Saga, SagaStatus, StepKind, StepStatus
from saga._internal import engine
from saga._internal.codec import encode
from saga._internal.ports import Commit, SagaRecord, StepRecord, StepWrite

T = StepStatus


def record(*steps: StepRecord, status: SagaStatus = SagaStatus.RUNNING) -> SagaRecord:
    return SagaRecord(
        id="saga-1",
        name="order",
        key="k",
        kind="declarative",
        status=status,
        input=None,
        version=None,
        owner="me",
        epoch=3,
        steps=steps,
    )


def step(
    name: str,
    seq: int,
    status: StepStatus,
    attempt: int = 1,
    kind: StepKind = StepKind.COMPENSATABLE,
    transactional: bool = False,
) -> StepRecord:
    return StepRecord(name, seq, status, attempt, kind=kind, transactional=transactional)


def three_steps(retry: RetryPolicy | None = None) -> Saga:
    saga = Saga(f"engine-{uuid.uuid4().hex[:8]}")
    for name in ("reserve", "charge", "ship"):
        saga.step(name=name, retry=retry)(lambda ctx: None)
    return saga


# -- next_forward -----------------------------------------------------------------------


def test_a_new_saga_starts_with_its_first_step() -> None:
    assert engine.next_forward(three_steps(), record()) == engine.RunStep("reserve", 1)


def test_the_next_step_follows_the_last_success() -> None:
    done = record(step("reserve", 1, T.SUCCEEDED))
    assert engine.next_forward(three_steps(), done) == engine.RunStep("charge", 1)


def test_an_interrupted_step_resumes_with_its_next_attempt() -> None:
    interrupted = record(step("reserve", 1, T.SUCCEEDED), step("charge", 2, T.RUNNING, attempt=2))
    assert engine.next_forward(three_steps(), interrupted) == engine.RunStep("charge", 3)


def test_a_step_out_of_attempts_is_given_up() -> None:
    saga = three_steps(RetryPolicy(max_attempts=2))
    spent = record(step("reserve", 1, T.RUNNING, attempt=2))
    assert engine.next_forward(saga, spent) == engine.GiveUp("reserve", 2)


def test_every_step_done_means_complete() -> None:
    done = record(*(step(n, i, T.SUCCEEDED) for i, n in enumerate(["reserve", "charge", "ship"])))
    assert engine.next_forward(three_steps(), done) == engine.Complete()


def test_a_step_waits_for_all_its_dependencies() -> None:
    saga = Saga(f"engine-{uuid.uuid4().hex[:8]}")
    saga.step(name="a")(lambda ctx: None)
    saga.step(name="b", after=())(lambda ctx: None)
    saga.step(name="c", after=("a", "b"))(lambda ctx: None)
    assert engine.next_forward(saga, record(step("a", 1, T.SUCCEEDED))) == engine.RunStep("b", 1)


# -- undo_stack and past_pivot -------------------------------------------------------------


def test_undo_stack_is_newest_first() -> None:
    stack = engine.undo_stack(
        record(step("a", 1, T.SUCCEEDED), step("b", 2, T.SUCCEEDED), step("c", 3, T.RUNNING))
    )
    assert [s.name for s in stack] == ["c", "b", "a"]


def test_undo_stack_includes_every_step_that_may_have_acted() -> None:
    stack = engine.undo_stack(
        record(
            step("ok", 1, T.SUCCEEDED),
            step("half-undone", 2, T.COMPENSATING),
            step("in-flight", 3, T.RUNNING),
            step("failed", 4, T.FAILED),
        )
    )
    assert [s.name for s in stack] == ["failed", "in-flight", "half-undone", "ok"]


def test_undo_stack_leaves_out_what_is_done_or_never_undone() -> None:
    stack = engine.undo_stack(
        record(
            step("done", 1, T.COMPENSATED),
            step("pivot", 2, T.SUCCEEDED, kind=StepKind.PIVOT),
            step("retriable", 3, T.SUCCEEDED, kind=StepKind.RETRIABLE),
            step("rolled-back", 4, T.FAILED, transactional=True),
            step("never-committed", 5, T.RUNNING, transactional=True),
            step("kept", 6, T.SUCCEEDED, transactional=True),
        )
    )
    assert [s.name for s in stack] == ["kept"]


def test_undo_stack_orders_by_seq_not_by_storage_order() -> None:
    stack = engine.undo_stack(record(step("second", 2, T.SUCCEEDED), step("first", 1, T.SUCCEEDED)))
    assert [s.name for s in stack] == ["second", "first"]


def test_past_pivot_only_once_the_pivot_succeeded() -> None:
    assert not engine.past_pivot(record(step("ship", 1, T.RUNNING, kind=StepKind.PIVOT)))
    assert engine.past_pivot(record(step("ship", 1, T.SUCCEEDED, kind=StepKind.PIVOT)))
    assert not engine.past_pivot(record(step("charge", 1, T.SUCCEEDED)))


def test_unwound_status_depends_on_a_cancel_request() -> None:
    assert engine.unwound_status(record()) is SagaStatus.COMPENSATED
    cancelled = dataclasses.replace(record(), cancel_requested=True)
    assert engine.unwound_status(cancelled) is SagaStatus.CANCELLED


# -- records -------------------------------------------------------------------------------


def test_start_inserts_a_new_step_as_running() -> None:
    saga = record()
    template = engine.template(saga, "reserve", StepKind.COMPENSATABLE, False)
    write = engine.start(saga, template, 1)
    assert write.new
    assert write.stamp == "started"
    assert (write.step.status, write.step.attempt, write.step.seq) == (T.RUNNING, 1, 1)


def test_a_record_ahead_finds_its_new_steps_and_the_old_one_does_not() -> None:
    before = record(step("a", 1, T.SUCCEEDED))
    assert before.step("a") is not None  # its name index is built and then shared
    starts = [StepWrite(step(name, seq, T.RUNNING), new=True) for name, seq in (("b", 2), ("c", 3))]
    later = engine.ahead(before, starts)
    assert [(s.name, s.seq) for s in map(later.step, "abc") if s] == [("a", 1), ("b", 2), ("c", 3)]
    assert (before.step("b"), before.step("c")) == (None, None)


def test_template_places_a_new_step_after_every_recorded_one() -> None:
    saga = record(step("a", 1, T.SUCCEEDED), step("b", 4, T.SUCCEEDED))
    assert engine.template(saga, "c", StepKind.PIVOT, False).seq == 5
    assert engine.template(saga, "a", StepKind.PIVOT, False).seq == 1


def test_starting_a_compensated_step_is_illegal() -> None:
    saga = record(step("a", 1, T.COMPENSATED))
    with pytest.raises(IllegalTransitionError):
        engine.start(saga, saga.steps[0], 2)


def test_succeeded_stores_the_result_and_its_digest() -> None:
    saga = record(step("a", 1, T.RUNNING))
    write, event = engine.succeeded(saga, "a", encode({"id": 7}, "result"))
    assert write.step.status is T.SUCCEEDED
    assert write.step.result == '{"id":7}'
    assert write.step.output_digest == encode({"id": 7}, "r").digest
    assert (event.kind, event.step, event.attempt) == ("step_succeeded", "a", 1)


def test_a_compensated_step_cannot_succeed() -> None:
    with pytest.raises(IllegalTransitionError):
        engine.succeeded(record(step("a", 1, T.COMPENSATED)), "a", encode(1, "r"))


def test_undo_started_counts_compensation_attempts() -> None:
    saga = record(step("a", 1, T.SUCCEEDED))
    write, event = engine.undo_started(saga, "a")
    assert (write.step.status, write.step.undo_attempt) == (T.COMPENSATING, 1)
    assert (event.kind, event.attempt) == ("compensation_started", 1)


def test_moved_refuses_an_illegal_saga_move() -> None:
    with pytest.raises(IllegalTransitionError):
        engine.moved(record(status=SagaStatus.COMPLETED), SagaStatus.COMPENSATING)
    assert engine.moved(record(), SagaStatus.COMPLETED).kind == "saga_completed"


def test_describe_bounds_and_cleans_error_text() -> None:
    assert engine.describe(ValueError("bad\x00x")) == "ValueError: bad\\0x"
    assert len(engine.describe(ValueError("x" * 10_000))) == engine.MAX_ERROR_LENGTH


def test_commit_drops_the_lease_only_on_terminal_statuses() -> None:
    saga = record()
    assert not engine.commit(saga, status=SagaStatus.COMPENSATING).release
    assert engine.commit(saga, status=SagaStatus.COMPLETED).release
    assert engine.commit(saga).epoch == 3


def test_apply_shows_the_record_after_a_commit() -> None:
    saga = record(step("a", 1, T.RUNNING))
    new_step = step("b", 2, T.RUNNING)
    change = Commit(
        saga_id=saga.id,
        epoch=saga.epoch,
        status=SagaStatus.COMPLETED,
        error="why",
        steps=(StepWrite(step("a", 1, T.SUCCEEDED)), StepWrite(new_step, new=True)),
        release=True,
    )
    after = engine.apply(saga, change)
    assert [(s.name, s.status) for s in after.steps] == [("a", T.SUCCEEDED), ("b", T.RUNNING)]
    assert (after.status, after.error, after.owner) == (SagaStatus.COMPLETED, "why", None)


def test_apply_keeps_what_a_commit_does_not_mention() -> None:
    saga = record(step("a", 1, T.RUNNING))
    after = engine.apply(saga, Commit(saga_id=saga.id, epoch=saga.epoch))
    assert after == saga


def test_failed_step_names_the_newest_failure() -> None:
    failed = dataclasses.replace(step("charge", 2, T.FAILED), error="boom")
    assert engine.failed_step(record(step("reserve", 1, T.COMPENSATED), failed)) == "charge"
    assert engine.failed_step(record(step("reserve", 1, T.SUCCEEDED))) is None


def test_undo_stack_follows_completion_time_for_parallel_steps() -> None:
    slow = dataclasses.replace(step("slow", 1, T.SUCCEEDED), finished_at=20.0)
    fast = dataclasses.replace(step("fast", 2, T.SUCCEEDED), finished_at=10.0)
    in_flight = step("in-flight", 3, T.RUNNING)
    stack = engine.undo_stack(record(slow, fast, in_flight))
    assert [s.name for s in stack] == ["in-flight", "slow", "fast"]


def test_pivot_may_have_acted_once_it_started() -> None:
    assert engine.pivot_may_have_acted(record(step("ship", 1, T.RUNNING, kind=StepKind.PIVOT)))
    assert not engine.pivot_may_have_acted(record(step("ship", 1, T.FAILED, kind=StepKind.PIVOT)))


def test_ready_starts_independent_steps_together() -> None:
    saga = Saga(f"engine-{uuid.uuid4().hex[:8]}")
    for name in ("a", "b", "c"):
        saga.step(name=name, after=())(lambda ctx: None)
    saga.step(name="d", after=("a", "b", "c"))(lambda ctx: None)
    assert engine.ready(saga, record(), (), limit=2) == [
        engine.RunStep("a", 1),
        engine.RunStep("b", 1),
    ]
    assert engine.ready(saga, record(), ("a",), limit=None) == [
        engine.RunStep("b", 1),
        engine.RunStep("c", 1),
    ]


def test_a_failed_compensation_attempt_is_an_event_for_the_next_start() -> None:
    retried = dataclasses.replace(step("a", 1, T.COMPENSATING), undo_attempt=2)
    [event] = engine.undo_attempt_failed(record(retried), "a", "ConnectionError: down")
    assert (event.kind, event.step, event.attempt) == ("compensation_attempt_failed", "a", 2)
    assert event.detail == {"error": "ConnectionError: down"}
    assert engine.undo_attempt_failed(record(retried), "a", None) == ()


def test_compensating_a_step_keeps_its_action_s_finish_time() -> None:
    done = dataclasses.replace(step("a", 1, T.COMPENSATING), finished_at=10.0)
    write, event = engine.undone(record(done), "a")
    assert write.stamp is None  # no new finish time: 10.0 stays
    assert (write.step.status, write.step.finished_at) == (T.COMPENSATED, 10.0)
    assert event.kind == "compensation_done"


def test_steps_left_running_by_an_unwinding_have_nothing_to_undo() -> None:
    unwound = record(
        step("a", 1, T.COMPENSATED),
        step("notify", 2, T.RUNNING),  # no compensation: the unwinding left it alone
        step("write", 3, T.RUNNING, transactional=True),  # its transaction never committed
        step("ship", 4, T.RUNNING, kind=StepKind.PIVOT),  # a pivot is never said undone
        status=SagaStatus.COMPENSATING,
    )
    writes, events = engine.nothing_to_undo(unwound)
    assert [(w.step.name, w.step.status, w.stamp) for w in writes] == [
        ("notify", T.COMPENSATED, None),
        ("write", T.FAILED, None),  # nothing happened: its rows never committed
    ]
    assert writes[1].step.error is None  # it did not raise
    assert [(e.kind, e.step, e.detail) for e in events] == [
        ("compensation_done", "notify", {"reason": "nothing to undo: no compensation"}),
        (
            "step_failed",
            "write",
            {"reason": "its transaction never committed: nothing happened"},
        ),
    ]
