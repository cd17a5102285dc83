"""``ctx.resources``: what a coordinator gives its steps, on every path a step runs by,
and closed with the coordinator."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from saga import (
    AsyncCoordinator,
    Resources,
    RetryPolicy,
    Saga,
    SagaFailed,
    StepContext,
    current_step,
)
from tests.integration.conftest import MakeCoordinator

ONCE = RetryPolicy(max_attempts=1)


class Declined(Exception):
    pass


class Bank:
    """A client a step calls: records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closed = False

    def charge(self, key: str) -> str:
        self.calls.append(f"charge {key}")
        return f"ch-{len(self.calls)}"

    def refund(self, charge: str) -> None:
        self.calls.append(f"refund {charge}")

    def close(self) -> None:
        self.closed = True


order = Saga("resources-order")


@order.step()
def charge(ctx: StepContext) -> str:
    return str(ctx.resources["bank"].charge(ctx.idempotency_key))


@charge.compensation
def refund(ctx: StepContext) -> None:
    ctx.resources.bank.refund(ctx.result)  # attribute access reads the same values


@order.step(transactional=True)
def record(ctx: StepContext) -> int:
    ctx.session.execute(text("SELECT 1"))
    return int(ctx.resources["settings"]["limit"])


@order.step(retry=ONCE)
def ship(ctx: StepContext) -> None:
    if ctx.data.get("declined"):
        raise Declined("no courier")


def test_every_step_and_compensation_reaches_the_coordinators_resources(
    make_coord: MakeCoordinator,
) -> None:
    bank = Bank()
    coord = make_coord(resources={"bank": bank, "settings": {"limit": 5}})
    view = coord.run(order, data={}, key="r-1")
    assert view.results["record"] == 5  # a transactional step has them beside its session
    with pytest.raises(SagaFailed):
        coord.run(order, data={"declined": True}, key="r-2")
    assert bank.calls == [
        f"charge {view.id}:charge",
        "charge " + coord.get(key="r-2").id + ":charge",
        "refund ch-2",
    ]


def pay(amount: int) -> str:
    return str(current_step().resources["bank"].charge(f"{amount}"))


def test_a_context_manager_saga_reaches_them_through_current_step(
    make_coord: MakeCoordinator,
) -> None:
    coord = make_coord(resources={"bank": Bank()})
    with coord.saga("resources-cm", key="cm-1") as s:
        assert s.step(pay, 12) == "ch-1"


def test_resources_added_later_are_given_too_and_closed_last_first(
    make_coord: MakeCoordinator,
) -> None:
    closed: list[str] = []
    kept = Bank()
    coord = make_coord(resources={"bank": kept})
    coord.resources.add("ledger", "L", close=lambda value: closed.append(value))

    @contextlib.contextmanager
    def pool() -> Iterator[str]:
        yield "P"
        closed.append("pool")

    assert coord.resources.enter("pool", pool()) == "P"
    late = Saga("resources-late")

    @late.step()
    def look(ctx: StepContext) -> list[str]:
        return sorted(ctx.resources)

    assert coord.run(late).results["look"] == ["bank", "ledger", "pool"]
    coord.close()
    assert closed == ["pool", "L"]
    assert kept.closed is False  # given as a plain value: the application closes it


def test_a_closer_that_fails_is_logged_and_the_others_still_close(
    make_coord: MakeCoordinator, caplog: pytest.LogCaptureFixture
) -> None:
    closed: list[str] = []
    coord = make_coord()
    coord.resources.add("first", 1, close=lambda _: closed.append("first"))
    coord.resources.add("broken", 2, close=lambda _: 1 / 0)
    with caplog.at_level(logging.ERROR, logger="saga.resources"):
        coord.close()
    assert closed == ["first"]
    assert "closing resource 'broken' failed" in caplog.text


def test_a_missing_resource_is_named_with_what_there_is(make_coord: MakeCoordinator) -> None:
    coord = make_coord(resources={"bank": Bank()})
    missing = Saga("resources-missing")

    @missing.step(retry=ONCE)
    def use(ctx: StepContext) -> None:
        ctx.resources["mailer"].send()

    with pytest.raises(SagaFailed) as failed:
        coord.run(missing)
    error = coord.get(failed.value.saga_id).step("use").error or ""
    assert "no resource named 'mailer' (this coordinator has: bank)" in error
    assert "resources={'mailer': ...}" in error


def test_a_name_is_given_once() -> None:
    resources = Resources({"bank": 1})
    with pytest.raises(Exception, match="resource 'bank' is already given"):
        resources.add("bank", 2)
    with pytest.raises(Exception, match="needs a name"):
        resources.add("", 2)
    assert resources["bank"] == 1
    with pytest.raises(AttributeError, match="no resource named 'mail'"):
        _ = resources.mail
    assert repr(Resources({"token": "s3cr3t"})) == "Resources(token)"  # names, never values


def test_a_step_is_a_plain_function_testable_with_fakes() -> None:
    bank = Bank()
    context = StepContext(
        "id-1", "resources-order", "charge", 1, 1, resources=Resources({"bank": bank})
    )
    assert charge(context) == "ch-1"
    assert bank.calls == ["charge id-1:charge"]


def test_an_async_step_reaches_them_and_async_closers_are_awaited_on_the_loop(
    db_url: str,
) -> None:
    flow = Saga("resources-async")

    @flow.step()
    async def fetch(ctx: StepContext) -> str:
        await asyncio.sleep(0)
        return str(ctx.resources["client"].name)

    class Client:
        name = "http"
        loop: asyncio.AbstractEventLoop | None = None

        async def aclose(self) -> None:
            self.loop = asyncio.get_running_loop()

    client = Client()

    async def main() -> asyncio.AbstractEventLoop:
        coord = AsyncCoordinator(db_url)
        coord.resources.add("client", client, close=Client.aclose)
        try:
            assert (await coord.run(flow)).results["fetch"] == "http"
        finally:
            await coord.close()
        return asyncio.get_running_loop()

    assert asyncio.run(main()) is client.loop
