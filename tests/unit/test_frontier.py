"""Frontier (the fan-out's incremental ``ready``) answers exactly as ``engine.ready`` does.

Hypothesis draws a saga shape (steps after the one before, after chosen
earlier steps, or roots), retry limits and attempts already recorded (as
after a crash), then walks the saga to its end: at every point, for a random
set of running steps and a random limit, both must give the same decision;
then one ready step succeeds, in the record and in the frontier.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from saga import RetryPolicy, Saga, StepContext
from saga._internal.engine import Complete, GiveUp, ready
from saga._internal.engine.frontier import Frontier
from saga._internal.ports import SagaRecord, StepRecord
from saga._internal.status import SagaStatus, StepStatus


def _noop(ctx: StepContext) -> None:
    del ctx


@st.composite
def sagas(draw: st.DrawFn) -> tuple[Saga, dict[str, int]]:
    """A saga of 1-12 steps, and attempts already recorded for some of them."""
    count = draw(st.integers(1, 12))
    saga = Saga("frontier", max_concurrency=draw(st.integers(1, 8)))
    recorded: dict[str, int] = {}
    for i in range(count):
        earlier = [f"s{j}" for j in range(i)]
        chosen = st.lists(st.sampled_from(earlier), unique=True) if earlier else st.just([])
        after = draw(st.none() | chosen)  # None: after the step declared before
        limit = draw(st.integers(1, 3))
        saga.step(name=f"s{i}", after=after, retry=RetryPolicy(max_attempts=limit))(_noop)
        if draw(st.integers(0, 4)) == 0:
            recorded[f"s{i}"] = draw(st.integers(1, 3))
    saga.validate()
    return saga, recorded


def _record(steps: dict[str, StepRecord]) -> SagaRecord:
    return SagaRecord(
        "id",
        "frontier",
        None,
        "declarative",
        SagaStatus.RUNNING,
        None,
        None,
        "me",
        1,
        steps=tuple(sorted(steps.values(), key=lambda s: s.seq)),
    )


@settings(max_examples=300, deadline=None)
@given(shape=sagas(), data=st.data())
def test_the_frontier_decides_as_ready_does(shape: tuple[Saga, dict[str, int]], data: Any) -> None:
    saga, attempts = shape
    steps = {
        name: StepRecord(name, seq, StepStatus.RUNNING, attempt)
        for seq, (name, attempt) in enumerate(attempts.items(), start=1)
    }
    frontier = Frontier(saga, _record(steps))
    names = [step.name for step in saga.steps]
    for _ in range(len(names) + 1):
        record = _record(steps)
        running = set(data.draw(st.lists(st.sampled_from(names), unique=True, max_size=3)))
        limit = data.draw(st.none() | st.integers(0, 5))
        expected = ready(saga, record, running, limit)
        assert frontier.ready(record, running, limit) == expected
        assert frontier.complete == isinstance(ready(saga, record, ()), Complete)
        choices = ready(saga, record, ())
        if isinstance(choices, (Complete, GiveUp)) or not choices:
            return
        chosen = data.draw(st.sampled_from(choices)).name
        seq = steps[chosen].seq if chosen in steps else len(steps) + 1
        steps[chosen] = StepRecord(chosen, seq, StepStatus.SUCCEEDED, 1)
        frontier.succeeded(chosen)
    raise AssertionError("every step succeeded and the saga never completed")
