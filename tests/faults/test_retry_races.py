"""``retry`` (and ``skip``) racing another operator's ``retry``, on SQLite and PostgreSQL.

The saga is ``charge -> ship (pivot) -> stamp (idempotent) -> invoice``; ``invoice``
fails until the test fixes it, so the saga ends ``failed`` past its pivot. Then the fix
is deployed and:

* two operators retry it at once (or the first records ``invoice`` done by hand with
  ``skip``, or retries ``--from stamp``, while the second retries): for every free
  statement boundary k of the first up to and including its claim (counted by a dry
  run on the same starting state),
  it pauses before k, the second runs its retry to the end (the saga completes), and
  the first goes on. The first is refused and changes no row after its pause; the
  fixed step ran exactly once more.
* the first operator's retry is paused just before it records the saga completed
  (running, its lease held); a second retry is refused and changes nothing, and the
  first then completes the saga.
"""

from __future__ import annotations

import pytest

from saga import OperationRefusedError, Saga, SagaFailed, SagaStatus, StepContext
from tests.crash.invariants import check_history
from tests.faults.conftest import FreshUrl
from tests.faults.dump import dump
from tests.integration.support import fast
from tests.interleave import Actor, Boundary, Interleaving, free_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

NAME = "retry-race-order"
INVOICES: list[int] = []
FIXED = {"invoice": False}


def _act(ctx: StepContext) -> str:
    if ctx.step == "invoice":
        INVOICES.append(ctx.attempt)
        if not FIXED["invoice"]:
            raise RuntimeError("invoice service down")
    return ctx.step


def _declare() -> Saga:
    saga = Saga(NAME)
    saga.step(name="charge", retry=fast(1))(_act).compensation()(_act)
    saga.step(name="ship", pivot=True, retry=fast(1))(_act)
    saga.step(name="stamp", idempotent=True, retry=fast(1))(_act)
    saga.step(name="invoice", retry=fast(1, retry_on=(RuntimeError,)))(_act)
    return saga


ORDER = _declare()


def failed_past_pivot(run: Interleaving) -> str:
    """A saga of ORDER failed at ``invoice``; the fix deployed after."""
    FIXED["invoice"] = False
    with pytest.raises(SagaFailed) as raised:
        run.observer.run(ORDER)
    assert raised.value.status is SagaStatus.FAILED
    FIXED["invoice"] = True
    INVOICES.clear()
    return raised.value.saga_id


def retrying(run: Interleaving, name: str, saga_id: str, verb: str = "retry") -> Actor:
    """``coord.retry``, or ``coord.skip`` of ``invoice`` (done by hand), or ``coord.retry``
    from ``stamp``, as an actor."""
    coord = run.coordinator()
    if verb == "retry-from":
        return run.actor(name, lambda: coord.retry(saga_id, from_step="stamp"), coord)
    if verb == "skip":
        return run.actor(name, lambda: coord.skip(saga_id, step="invoice", reason="by hand"), coord)
    return run.actor(name, lambda: coord.retry(saga_id), coord)


def census(fresh_url: FreshUrl, verb: str) -> list[Boundary]:
    with Interleaving(fresh_url(), sagas=[ORDER]) as run:
        dry = retrying(run, "dry", failed_past_pivot(run), verb)
        dry.run_to_end()
        assert dry.outcome == "returned", dry
        found = free_until(dry.boundaries, lambda b: b.is_claim)
    assert found, "retry reached no free boundary before its claim"
    return found


@pytest.mark.parametrize("verb", ["retry", "skip", "retry-from"])
def test_two_operators_retrying_at_once_run_the_step_once(
    verb: str, backend: str, fresh_url: FreshUrl
) -> None:
    for target in census(fresh_url, verb):
        with Interleaving(fresh_url(), sagas=[ORDER]) as run:
            saga_id = failed_past_pivot(run)
            first = retrying(run, "first", saga_id, verb)
            at = first.run_until(target.index)
            assert at is not None, f"the first retry ended before {target}"
            assert at.sql == target.sql, f"census mismatch at {target}"
            second = retrying(run, "second", saga_id)
            second.run_to_end()
            assert second.outcome == "returned", second
            paused = dump(run.url, saga_id)
            first.run_to_end()
            where = f"{backend}: first {verb} paused at {target}"
            assert isinstance(first.error, OperationRefusedError), f"{where}: {first}"
            assert "completed" in str(first.error), where
            assert dump(run.url, saga_id) == paused, f"{where}: the refused retry wrote"
            assert INVOICES == [2], where
            assert run.observer.get(saga_id).status is SagaStatus.COMPLETED
            check_history(run.observer.get(saga_id), run.observer.store.events(saga_id))


def test_a_retry_while_another_carries_the_saga_is_refused(
    backend: str, fresh_url: FreshUrl
) -> None:
    with Interleaving(fresh_url(), sagas=[ORDER]) as run:
        saga_id = failed_past_pivot(run)
        first = retrying(run, "first", saga_id)
        first.hold_heartbeat()
        at = first.run_until(
            lambda b: b.change is not None and b.change.status is SagaStatus.COMPLETED
        )
        assert at is not None
        before = dump(run.url, saga_id)
        second = retrying(run, "second", saga_id)
        second.run_to_end()
        assert isinstance(second.error, OperationRefusedError), second
        assert "running" in str(second.error)
        assert dump(run.url, saga_id) == before
        first.release_heartbeat()
        first.run_to_end()
        assert first.outcome == "returned", first
        assert INVOICES == [2]
        check_history(run.observer.get(saga_id), run.observer.store.events(saga_id))
