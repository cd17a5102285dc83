"""A listener never changes a saga's outcome, whichever of its hooks raises (issue 28,
defect 3).

A tracer-like listener whose step scope raised on exit failed every step and
compensation, one whose exit answered True swallowed a step's error, and one whose
``wants()`` raised aborted ``coord.run`` with the saga left ``running``. Each hook of a
broken listener here raises on every call; the saga must go exactly as it goes
without the listener, and the error be logged once per listener and hook, and counted.
"""

from __future__ import annotations

import logging
from types import TracebackType

import pytest

from saga import Coordinator, RetryPolicy, Saga, SagaEvent, SagaFailed, SagaStatus, StepContext
from saga._internal.listening import HOOKS
from tests.integration.conftest import MakeCoordinator

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay=0, jitter=0)


class Broken:
    """A listener with every hook; the one named ``hook`` raises each time it is called
    (``"swallow"``: its scope's exit answers True, which would swallow a step's error)."""

    inline = True

    def __init__(self, hook: str, inline: bool = True) -> None:
        self.hook = hook
        self.inline = inline
        self.heard: list[str] = []

    def _maybe(self, hook: str) -> None:
        if self.hook == hook:
            raise RuntimeError(f"the listener's {hook} is broken")

    def wants(self, kind: str) -> bool:
        self._maybe("wants")
        return True

    def step_scope(self, context: StepContext) -> Scope:
        return Scope(self)

    def trace_context(self, saga_id: str, name: str, key: str | None) -> str:
        self._maybe("trace_context")
        return "{}"

    def discard(self, saga_id: str) -> None:
        self._maybe("discard")

    def __call__(self, event: SagaEvent) -> None:
        self._maybe("event")
        self.heard.append(event.kind)

    def __repr__(self) -> str:
        return f"Broken({self.hook!r})"


class Scope:
    """A step scope as a tracer's is: entered before the step, exited after it."""

    def __init__(self, listener: Broken) -> None:
        self.listener = listener

    def __enter__(self) -> None:
        self.listener._maybe("step_scope enter")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self.listener._maybe("step_scope exit")
        return self.listener.hook == "swallow"


def _order(name: str) -> Saga:
    """reserve -> charge (async; fails once, retried) -> ship (fails if the input says
    so); reserve's compensation fails once, so every hook is called around retries too."""
    saga = Saga(name)

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "R-1"

    @reserve.compensation(retry=FAST_RETRY)
    def release(ctx: StepContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("stock service blinked")

    @saga.step(retry=FAST_RETRY)
    async def charge(ctx: StepContext) -> str:  # awaited on the loop by AsyncCoordinator
        if ctx.attempt == 1:
            raise ConnectionError("card network reset")
        return "C-1"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        pass

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def ship(ctx: StepContext) -> str:
        if ctx.data["fail"]:
            raise ValueError("no courier")
        return "S-1"

    return saga


Story = tuple[SagaStatus, list[tuple[str, str | None, int | None]]]


def _runs(coord: Coordinator, saga: Saga, prefix: str) -> list[Story]:
    """A saga that completes and one that compensates, each run twice with its key (the
    second run answers the recorded outcome): their statuses and histories."""
    stories = []
    for fail in (False, True):
        key = f"{prefix}-{fail}"
        for _ in range(2):
            try:
                saga_id = coord.run(saga, data={"fail": fail}, key=key).id
            except SagaFailed as failure:
                saga_id = failure.saga_id
        history = [(e.kind, e.step, e.attempt) for e in coord.history(saga_id)]
        stories.append((coord.get(saga_id).status, history))
    return stories


@pytest.mark.parametrize("hook", [*HOOKS, "swallow"])
def test_a_listener_raising_in_any_hook_changes_no_outcome(
    make_coord: MakeCoordinator, hook: str, caplog: pytest.LogCaptureFixture
) -> None:
    saga = _order(f"isolated-{hook.replace(' ', '-')}")
    expected = _runs(make_coord(), saga, "bare")  # no listener of ours at all
    assert [status for status, _ in expected] == [SagaStatus.COMPLETED, SagaStatus.COMPENSATED]
    broken = Broken(hook)
    coord = make_coord(listeners=[broken])
    with caplog.at_level(logging.ERROR, logger="saga.listeners"):
        assert _runs(coord, saga, "broken") == expected
    counts = coord.listeners.errors_by_hook()
    if hook == "swallow":  # answering True is no error: it is ignored, not counted
        assert coord.listeners.errors == 0
        return
    assert counts[hook] >= 2  # called, and failing, more than once...
    assert coord.listeners.errors == counts[hook]
    assert coord.listeners.failures() == [(broken, hook, counts[hook])]
    logged = [r for r in caplog.records if r.name == "saga.listeners"]
    assert [r.getMessage() for r in logged] == [  # ...logged once, with its traceback
        f"listener {broken!r}: {hook} raised (later errors of its {hook} are only counted)"
    ]
    assert logged[0].exc_info is not None
    if hook != "event":  # the listener's other hooks still work
        assert "saga_compensated" in broken.heard


def test_a_queued_listener_that_raises_changes_no_outcome_either(
    make_coord: MakeCoordinator, caplog: pytest.LogCaptureFixture
) -> None:
    saga = _order("isolated-queued")
    expected = _runs(make_coord(), saga, "bare")
    broken = Broken("event", inline=False)  # told from a thread of its own
    coord = make_coord(listeners=[broken])
    with caplog.at_level(logging.ERROR, logger="saga.listeners"):
        assert _runs(coord, saga, "broken") == expected
        assert coord.listeners.flush(timeout=30)
    assert coord.listeners.errors_by_hook()["event"] >= 2
    assert len([r for r in caplog.records if r.name == "saga.listeners"]) == 1


def _lookup(sku: str) -> str:
    if not sku:
        raise LookupError("no such sku")
    return f"found {sku}"


@pytest.mark.parametrize("hook", ["step_scope enter", "step_scope exit", "swallow"])
def test_a_broken_scope_around_a_context_manager_step_changes_nothing(
    make_coord: MakeCoordinator, hook: str
) -> None:
    coord = make_coord(listeners=[Broken(hook)])
    with coord.saga("isolated-scope", key="found") as s:
        assert s.step(_lookup, "mug") == "found mug"
    with pytest.raises(SagaFailed) as failure, coord.saga("isolated-scope") as s:
        s.step(_lookup, "")
    assert failure.value.status is SagaStatus.COMPENSATED
    assert isinstance(failure.value.__cause__, LookupError)  # the step's own error
