"""No function crosses from the engine to a driver, checked on the effects themselves:
sagas of every kind run on a real SQLite file, both drivers record each effect they
answer, and no value in any of them (walked through every field, tuple and mapping)
is callable. ``test_effects_are_data`` checks the effects' declared types; this checks
what the engine really yields, closures and bound methods included."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saga import AsyncCoordinator, Coordinator, Reconciled, RetryPolicy, Saga, SagaFailed
from saga._internal.drivers.tasks import TaskDriver
from saga._internal.drivers.threads import ThreadDriver
from saga._internal.engine import effects as fx
from saga._internal.engine.targets import Declared, Target

ONCE = RetryPolicy(max_attempts=1)
undone: list[str] = []


def reserve(item: str) -> str:
    return f"held {item}"


def release(result: str, item: str) -> None:
    undone.append(f"{result} / {item}")


def refuse(item: str) -> None:
    raise ValueError(f"no {item}")


async def reserve_async(item: str) -> str:
    return f"held {item}"


def declared() -> Saga:
    saga = Saga("no-function-crosses")

    @saga.step
    def hold(ctx: Any) -> int:
        return 1

    @hold.compensation
    def unhold(ctx: Any) -> None:
        undone.append("unhold")

    @saga.step(retry=ONCE)
    def asked(ctx: Any) -> int:
        if ctx.data == "fail":
            raise ValueError("declined")
        return 2

    @asked.reconcile
    def check(ctx: Any) -> Reconciled:
        return Reconciled.not_done()

    return saga


def _code_in(value: Any, where: str) -> Iterator[str]:
    """Where ``value`` holds something callable (a generator, the engine's own sub-flow
    in a ``Branch``, is not callable)."""
    if callable(value) and not isinstance(value, type):
        yield where
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _code_in(getattr(value, field.name), f"{where}.{field.name}")
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _code_in(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _code_in(item, f"{where}[{key!r}]")


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[fx.Effect]:
    """Every effect either driver answers."""
    effects: list[fx.Effect] = []
    for driver in (ThreadDriver, TaskDriver):
        answer = driver._answer

        def recording(self: Any, effect: fx.Effect, *rest: Any, _answer: Any = answer) -> Any:
            effects.append(effect)
            return _answer(self, effect, *rest)

        monkeypatch.setattr(driver, "_answer", recording)
    return effects


def _run_all(coord: Coordinator) -> None:
    saga = declared()
    coord.run(saga, "ok")
    with pytest.raises(SagaFailed):
        coord.run(saga, "fail")
    with coord.saga("block") as s:
        s.step(reserve, "a", compensate=release)
        s.parallel(s.call(reserve, "b", compensate=release), s.call(reserve_async, "c"))
    with pytest.raises(SagaFailed), coord.saga("block-fails") as s:  # noqa: PT012
        s.step(reserve, "d", compensate=release)
        s.step(refuse, "e", retry=ONCE)


async def _run_all_async(coord: AsyncCoordinator) -> None:
    saga = declared()
    await coord.run(saga, "ok")
    with pytest.raises(SagaFailed):
        await coord.run(saga, "fail")
    async with coord.saga("block") as s:
        await s.step(reserve_async, "a", compensate=release)
        await s.parallel(s.call(reserve, "b", compensate=release), s.call(reserve_async, "c"))
    with pytest.raises(SagaFailed):  # noqa: PT012
        async with coord.saga("block-fails") as s:
            await s.step(reserve, "d", compensate=release)
            await s.step(refuse, "e", retry=ONCE)


def _check(effects: list[fx.Effect]) -> None:
    kinds = {type(effect).__name__ for effect in effects}
    assert {"Call", "Launch", "Write"} <= kinds  # the sagas really ran through the drivers
    code = [where for effect in effects for where in _code_in(effect, type(effect).__name__)]
    assert code == []
    targets = {type(e.target).__name__ for e in effects if isinstance(e, fx.Call)}
    assert targets == {"Declared", "Referenced", "Given"}  # every kind of target was run
    roles = {e.target.role for e in effects if isinstance(e, fx.Call) and _declared(e.target)}
    assert roles == {"action", "undo"}


def _declared(target: Target) -> bool:
    return isinstance(target, Declared)


def test_the_thread_driver_is_handed_no_function(tmp_path: Path, seen: list[fx.Effect]) -> None:
    undone.clear()
    with Coordinator(f"sqlite:///{tmp_path / 'sagas.db'}", trusted_modules=[__name__]) as coord:
        _run_all(coord)
    _check(seen)
    assert undone == ["unhold", "held d / d"]  # found by the driver, called with its result


def test_the_asyncio_driver_is_handed_no_function(tmp_path: Path, seen: list[fx.Effect]) -> None:
    undone.clear()

    async def main() -> None:
        url = f"sqlite:///{tmp_path / 'sagas.db'}"
        async with AsyncCoordinator(url, trusted_modules=[__name__]) as coord:
            await _run_all_async(coord)

    asyncio.run(main())
    _check(seen)
    assert undone == ["unhold", "held d / d"]
