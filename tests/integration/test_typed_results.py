"""Results that keep their type: a dataclass or a pydantic model comes back as itself in
``ctx.results``, ``view.results``, a compensation's ``ctx.result`` and on replay, for
declarative and context-manager steps alike."""

from __future__ import annotations

import dataclasses

import pydantic
import pytest
from saga.adapters.sql import tables
from sqlalchemy import update

from saga import (
    ResultTypeError,
    RetryPolicy,
    Saga,
    SagaFailed,
    StepContext,
)
from saga._internal import typed as typed_module
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease, sql_store


@dataclasses.dataclass(frozen=True)
class Money:
    amount: int
    currency: str


@dataclasses.dataclass(frozen=True)
class Quote:
    sku: str
    price: Money
    tags: list[str]


class Receipt(pydantic.BaseModel):
    charge_id: str
    total: Money


class Crash(BaseException):
    """Escapes every ``except Exception``: the saga is left as a crash leaves it."""


SEEN: list[object] = []

order = Saga("typed-order")


@order.step()
def quote(ctx: StepContext) -> Quote:
    return Quote(ctx.data["sku"], Money(12, "EUR"), ["new"])


@order.step(result_type=Receipt)  # no annotation: the declared type says it
def charge(ctx):  # type: ignore[no-untyped-def]
    got = ctx.results["quote"]
    SEEN.append(got)
    if ctx.data.get("crash") and ctx.attempt == 1:
        raise Crash("the process dies here")
    return Receipt(charge_id="ch-1", total=got.price)


@charge.compensation
def refund(ctx: StepContext) -> None:
    SEEN.append(ctx.result)


@order.step(retry=RetryPolicy(max_attempts=1))
def ship(ctx: StepContext) -> str:
    SEEN.append(ctx.results["charge"])
    if ctx.data.get("no_courier"):
        raise RuntimeError("no courier")
    return "shipped"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    SEEN.clear()


def test_a_declarative_steps_result_comes_back_as_its_type_everywhere(
    make_coord: MakeCoordinator,
) -> None:
    coord = make_coord()
    view = coord.run(order, data={"sku": "mug"}, key="t-1")
    expected = Quote("mug", Money(12, "EUR"), ["new"])
    assert [expected, Receipt(charge_id="ch-1", total=Money(12, "EUR"))] == SEEN
    assert view.results["quote"] == expected
    assert isinstance(view.results["charge"], Receipt)
    again = coord.run(order, data={"sku": "mug"}, key="t-1")  # the recorded outcome
    assert again.results["quote"] == expected
    assert make_coord().get(view.id).results["quote"] == expected  # another coordinator


def test_after_a_crash_the_recovering_process_reads_the_types_too(
    make_coord: MakeCoordinator,
) -> None:
    dead = make_coord()
    with pytest.raises(Crash):
        dead.run(order, data={"sku": "cup", "crash": True}, key="t-2")
    saga_id = dead.get(key="t-2").id
    expire_lease(dead, saga_id)
    SEEN.clear()
    recoverer = make_coord()
    recoverer.register(order)
    recoverer.recover()
    assert SEEN[0] == Quote("cup", Money(12, "EUR"), ["new"])  # decoded from the store
    assert isinstance(SEEN[1], Receipt)


def test_a_compensation_gets_its_steps_result_as_its_type(make_coord: MakeCoordinator) -> None:
    with pytest.raises(SagaFailed):
        make_coord().run(order, data={"sku": "pen", "no_courier": True}, key="t-3")
    assert SEEN[-1] == Receipt(charge_id="ch-1", total=Money(12, "EUR"))


def price(sku: str) -> Quote:
    return Quote(sku, Money(7, "EUR"), [])


def reserve(sku: str) -> dict[str, str]:
    return {"reservation": f"R-{sku}"}


def test_a_context_manager_steps_replay_returns_the_same_type_as_its_first_run(
    make_coord: MakeCoordinator,
) -> None:
    coord = make_coord()
    first: list[object] = []
    with pytest.raises(Crash), coord.saga("typed-cm", key="c-1") as s:  # noqa: PT012
        first.append(s.step(price, "mug"))
        first.extend(s.parallel(s.call(price, "cup"), s.call(reserve, "cup")))
        raise Crash("between steps")
    expire_lease(coord, coord.get(key="c-1").id)  # as if its process had died
    with make_coord().saga("typed-cm", key="c-1") as s:  # the block again: steps replay
        replayed = [s.step(price, "mug"), *s.parallel(s.call(price, "cup"), s.call(reserve, "cup"))]
    assert replayed == first
    assert isinstance(replayed[0], Quote)  # it was a dict on replay before
    assert replayed[2] == {"reservation": "R-cup"}  # plain JSON stays plain


def test_a_result_that_no_longer_matches_its_type_is_a_clear_error(
    make_coord: MakeCoordinator,
) -> None:
    coord = make_coord()
    dead = make_coord()
    with pytest.raises(Crash):
        dead.run(order, data={"sku": "mug", "crash": True}, key="t-4")
    saga_id = dead.get(key="t-4").id
    with sql_store(coord).engine.begin() as connection:  # a type that changed since
        connection.execute(
            update(tables.steps)
            .where(tables.steps.c.saga_id == saga_id, tables.steps.c.name == "quote")
            .values(result='{"sku":"mug","cost":12}')
        )
    view = coord.get(saga_id)
    assert view.results["quote"] == {"sku": "mug", "cost": 12}  # shown as stored
    expire_lease(dead, saga_id)
    coord.register(order)
    (outcome,) = coord.recover().outcomes
    error = coord.get(saga_id).step("charge").error or ""
    assert outcome.status is not None
    assert "result of step 'quote' does not match its type Quote" in error


def test_without_pydantic_dataclasses_are_built_field_by_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(typed_module, "_pydantic_adapter", lambda _type: None)
    stored = {"sku": "mug", "price": {"amount": 3, "currency": "EUR"}, "tags": ["a"]}
    assert typed_module.revive(stored, Quote, "x") == Quote("mug", Money(3, "EUR"), ["a"])
    assert typed_module.revive([stored], list[Quote], "x")[0].price == Money(3, "EUR")
    assert typed_module.revive(None, Quote | None, "x") is None
    with pytest.raises(ResultTypeError, match=r"x does not match its type Quote: unexpected"):
        typed_module.revive({**stored, "cost": 1}, Quote, "x")
    with pytest.raises(ResultTypeError, match=r"x.price does not match its type Money"):
        typed_module.revive({**stored, "price": 3}, Quote, "x")


def test_only_the_declared_type_is_ever_built() -> None:
    """The stored JSON names no class: a forged payload cannot pick what is made."""
    forged = {"__class__": "os:system", "sku": "x", "price": {"amount": 1, "currency": "E"}}
    with pytest.raises(ResultTypeError):
        typed_module.revive(forged, Quote, "result")
    assert typed_module.result_type_of(reserve) is None  # dict[str, str]: kept as JSON
