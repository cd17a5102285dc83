"""Prometheus metrics: counters and histograms from the events, gauges from the store."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from saga import RetryPolicy, Saga, SagaEvent, SagaFailed, StepContext
from saga.metrics import MetricsListener
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import expire_lease


def _saga(name: str) -> Saga:
    """pay (fails once, retried) -> ship (fails: pay is refunded)."""
    saga = Saga(name)

    @saga.step(retry=RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0))
    def pay(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("reset")
        return "paid"

    @pay.compensation
    def refund(ctx: StepContext) -> None:
        pass

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def ship(ctx: StepContext) -> None:
        raise ValueError("no courier")

    return saga


def test_counters_and_histograms_follow_the_events(make_coord: MakeCoordinator) -> None:
    metrics = MetricsListener()
    coord = make_coord(listeners=[metrics])
    for _ in range(2):
        with pytest.raises(SagaFailed):
            coord.run(_saga("metered"))
    value = metrics.registry.get_sample_value
    assert value("saga_sagas_started_total", {"saga": "metered"}) == 2
    assert value("saga_sagas_ended_total", {"saga": "metered", "outcome": "compensated"}) == 2
    attempts = "saga_step_attempts_total"
    assert value(attempts, {"saga": "metered", "step": "pay", "outcome": "retried"}) == 2
    assert value(attempts, {"saga": "metered", "step": "pay", "outcome": "succeeded"}) == 2
    assert value(attempts, {"saga": "metered", "step": "ship", "outcome": "failed"}) == 2
    assert value("saga_retries_total", {"saga": "metered", "step": "pay", "of": "step"}) == 2
    done = {"saga": "metered", "step": "pay", "outcome": "done"}
    assert value("saga_compensations_total", done) == 2
    assert value("saga_step_duration_seconds_count", {"saga": "metered", "step": "pay"}) == 4
    assert (
        value("saga_saga_duration_seconds_count", {"saga": "metered", "outcome": "compensated"})
        == 2
    )
    text = generate_latest(metrics.registry).decode()
    saga_id = coord.list(limit=1)[0].id
    assert saga_id not in text  # ids never become labels


def test_gauges_count_what_the_store_holds_and_the_listeners_errors(
    make_coord: MakeCoordinator,
) -> None:
    saga = Saga("metered-crash")

    @saga.step()
    def only(ctx: StepContext) -> None:
        raise Crash("dies")

    dead = make_coord(lease_ttl=600)
    with pytest.raises(Crash):
        dead.run(saga)
    saga_id = dead.list(limit=1)[0].id
    metrics = MetricsListener()
    watcher = make_coord()
    metrics.watch(watcher, every=0)  # no cache: each scrape reads the store

    def broken(event: SagaEvent) -> None:
        raise RuntimeError("bug")

    watcher.add_listener(broken, inline=True)
    value = metrics.registry.get_sample_value
    assert value("saga_in_flight") == 1
    assert value("saga_stuck") == 0  # its lease is live
    expire_lease(watcher, saga_id)
    assert value("saga_stuck") == 1
    with pytest.raises(SagaFailed):
        watcher.run(_saga("metered-other"))
    assert value("saga_listener_errors_total") == watcher.listeners.errors > 0


def test_gauges_are_cached_between_reads(make_coord: MakeCoordinator) -> None:
    metrics = MetricsListener()
    coord = make_coord()
    metrics.watch(coord, every=3600)
    value = metrics.registry.get_sample_value
    assert value("saga_in_flight") == 0
    dead = make_coord(lease_ttl=600)
    saga = Saga("metered-cached")

    @saga.step()
    def only(ctx: StepContext) -> None:
        raise Crash("dies")

    with pytest.raises(Crash):
        dead.run(saga)
    assert value("saga_in_flight") == 0  # read an hour ago, as far as the cache knows
