"""The matrix catches what a plain test run misses, and names the point (pytester: a user's
project of its own, with the plugin loaded by its entry point)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.crash

SHOP = """
from saga import RetryPolicy, Saga, StepContext
from saga.testing import Ledger

book = Ledger()
shop = Saga("buggy-shop")

@shop.step()
def charge(ctx: StepContext) -> dict:
    book.apply("charge", ctx.idempotency_key)
    return {"charge_id": "ch_1"}

@charge.compensation(retry=RetryPolicy(max_attempts=2, initial_delay=0.0))
def refund(ctx: StepContext) -> None:
    BUG

@shop.step()
def notify(ctx: StepContext) -> None:
    book.apply("notify", ctx.idempotency_key)
"""

NON_IDEMPOTENT = "book.record('refund', ctx.idempotency_key)  # no key sent: refunds twice"
NONE_RESULT = "book.revert('charge', ctx.result['charge_id'])  # None if charge never returned"

TEST = """
from saga.testing import crash_matrix
from shop import book, shop

def refunded_once(view):
    assert book.count("refund", saga=view.id, op="record") <= 1, "refunded twice"

def test_shop(crash_matrix):
    report = crash_matrix(shop, check=refunded_once, fail=["notify"], modes=["recover"])
    assert report.ok, report.table()

def test_plain_run_passes(saga_coordinator, saga_ledger):
    from saga.testing import assert_compensated, fail_step
    import pytest
    from saga import SagaFailed
    with fail_step(shop, "notify"), pytest.raises(SagaFailed) as failed:
        saga_coordinator.run(shop)
    assert_compensated(saga_coordinator.get(failed.value.saga_id), steps=["charge"])
"""


def _project(pytester: pytest.Pytester, bug: str) -> pytest.RunResult:
    pytester.makepyfile(shop=SHOP.replace("BUG", bug), test_shop=TEST)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")


def test_a_compensation_that_is_not_idempotent_is_caught(pytester: pytest.Pytester) -> None:
    result = _project(pytester, NON_IDEMPOTENT)
    result.assert_outcomes(passed=1, failed=1)  # the plain test cannot see it
    # A crash after the refund, before it is recorded: recovery refunds again.
    result.stdout.fnmatch_lines(
        ["*after_undo:charge*notify fails*recover*FAIL: check: refunded twice*"]
    )
    result.stdout.no_fnmatch_line("*before_undo:charge*FAIL*")


def test_a_compensation_that_forgets_a_missing_result_is_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        shop=SHOP.replace("BUG", NONE_RESULT),
        test_shop=TEST.replace(
            'fail=["notify"], modes=["recover"]', 'fail=[], modes=["compensate"]'
        ),
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    # Killed after charge acted but before its result was recorded: ctx.result is None.
    result.stdout.fnmatch_lines(
        [
            "*inside_action:charge*ok*compensate*failed*"
            "FAIL: saga ended failed (a compensation kept failing)*"
        ]
    )
    result.stdout.fnmatch_lines(["*after_action:charge*compensate*FAIL*"])
    result.stdout.no_fnmatch_line("*after_start_commit:notify*FAIL*")  # result recorded by then


def test_the_matrix_runs_under_pytest_xdist(pytester: pytest.Pytester) -> None:
    """A user's suite run with ``-n 2``: each xdist worker has its own fork servers and
    stores, and the matrix finds the same bug, naming the same point."""
    pytester.makepyfile(shop=SHOP.replace("BUG", NON_IDEMPOTENT), test_shop=TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*created: 2/2 workers*"])
    result.stdout.fnmatch_lines(
        ["*after_undo:charge*notify fails*recover*FAIL: check: refunded twice*"]
    )
