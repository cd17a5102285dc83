"""Hostile input: refused with a clear error before anything is written, or stored verbatim.

Every refusal is checked against a dump of saga's tables taken just before
it: not one row may change. What is accepted (names and keys with quotes,
semicolons, ``$$``, newlines, 1,000 characters, emoji) must come back exactly
as given through every read. Each test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga import (
    Coordinator,
    DefinitionError,
    PayloadError,
    Saga,
    SagaFailed,
    SagaStatus,
    UnknownSagaError,
    UnsafeReferenceError,
)
from saga._internal import definition
from saga._internal.codec import encode
from tests.faults import figures, sagas
from tests.faults.dump import dump, unchanged

pytestmark = pytest.mark.faults

LIMIT = 4096
"""The payload limit of these tests' coordinators (bytes)."""


@pytest.fixture
def coord(url: str, ledger_path: str) -> Iterator[Coordinator]:
    with Coordinator(url, lease_ttl=5.0, payload_limit=LIMIT) as made:
        # One finished saga, so that "nothing changed" compares real rows.
        made.run(sagas.PLAIN, data=sagas.how(ledger_path), key="existing")
        yield made


def _refused(url: str, error: type[Exception], attempt: Callable[[], Any], *about: str) -> str:
    """``attempt()`` raises ``error``, whose message names every one of ``about``,
    and leaves every table as it was; the message."""
    before = dump(url)
    with pytest.raises(error) as raised:
        attempt()
    unchanged(url, before)
    message = str(raised.value)
    for part in about:
        assert part in message, f"{message!r} does not name {part!r}"
    figures.count("hostile inputs")
    return message


def _block(coord: Coordinator, name: str, key: str, *args: Any, **options: Any) -> None:
    with coord.saga(name, key=key) as s:
        s.step(sagas.cm_action, *args, **options)


def _unimportable_action(coord: Coordinator, fn: Any) -> None:
    with coord.saga("h", key="k") as s:
        s.step(fn, {})


class _Unserialisable:
    def method(self) -> None:
        """A bound method: not importable by reference."""


def _closure() -> Callable[..., Any]:
    def inner(data: Any) -> None:
        del data

    return inner


BAD_VALUES: dict[str, Any] = {
    "an object": _Unserialisable(),
    "a set": {1, 2},
    "bytes": b"raw",
    "NaN": float("nan"),
    "a tuple as a dict key": {("tuple", "key"): 1},
    "a NUL byte": "before\x00after",
    "a NUL byte in a dict key": {"ke\x00y": 1},
    "a lone surrogate": "\ud800",
}

UNIMPORTABLE: dict[str, Any] = {
    "a lambda": lambda data: None,
    "a closure": _closure(),
    "a partial": functools.partial(sagas.cm_action),
    "a bound method": _Unserialisable().method,
    "a builtin": print,
}

HOSTILE_IDS = [
    "00000000-0000-0000-0000-000000000000",
    "'; DROP TABLE saga_instances; --",
    "$$ SELECT 1 $$",
    "line\nbreak",
    "x" * 1000,
    "🧾📦",
    "%(id)s %s {0}",
]


def test_unstorable_values_are_refused_before_anything_is_written(
    coord: Coordinator, url: str, ledger_path: str
) -> None:
    for what, value in BAD_VALUES.items():
        data = {**sagas.how(ledger_path), "x": value}
        run = functools.partial(coord.run, sagas.PLAIN, data=data, key=what)
        _refused(url, PayloadError, run, "input['x']")
        block = functools.partial(_block, coord, "h", what, data)
        _refused(url, PayloadError, block, "arguments of step 'cm_action'")


def test_functions_that_cannot_be_found_again_are_refused_before_anything_runs(
    coord: Coordinator, url: str, ledger_path: str
) -> None:
    for what, fn in UNIMPORTABLE.items():
        action = functools.partial(_unimportable_action, coord, fn)
        _refused(url, UnsafeReferenceError, action, "step function", "module-level function")
        undo = functools.partial(_block, coord, "h", what, sagas.how(ledger_path), compensate=fn)
        _refused(url, UnsafeReferenceError, undo, "compensation", "module-level function")


def test_unknown_ids_and_names_are_reported_and_change_nothing(
    coord: Coordinator, url: str
) -> None:
    operations = [coord.get, coord.history, coord.compensate, coord.resume, coord.cancel]
    for saga_id in HOSTILE_IDS:
        for operation in [*operations, coord.recover_saga]:
            _refused(url, UnknownSagaError, functools.partial(operation, saga_id), "no saga")
        run = functools.partial(coord.run, saga_id, data={})
        _refused(url, UnknownSagaError, run, repr(saga_id), "no saga definition")


def test_a_definition_with_a_cycle_is_refused_naming_its_steps(
    coord: Coordinator, url: str
) -> None:
    cyclic = Saga("faults-cyclic")
    for name, after in (("a", "c"), ("b", "a"), ("c", "b")):
        cyclic.step(name=name, after=(after,))(sagas.declared_action)
    names = ("'faults-cyclic'", "cycle", "a -> c -> b -> a")
    _refused(url, DefinitionError, functools.partial(coord.register, cyclic), *names)
    _refused(url, DefinitionError, functools.partial(coord.run, cyclic, data={}), *names)


def _padded(ledger_path: str, size: int) -> dict[str, str]:
    """A saga input whose canonical JSON is exactly ``size`` bytes."""
    data = {"ledger": ledger_path, "pad": ""}
    data["pad"] = "x" * (size - len(encode(data, "input").text.encode()))
    assert len(encode(data, "input").text.encode()) == size
    return data


def test_payloads_at_the_limit_are_stored_and_over_it_refused(
    coord: Coordinator, url: str, ledger_path: str
) -> None:
    at_limit = coord.run(sagas.PLAIN, data=_padded(ledger_path, LIMIT), key="at-limit")
    assert (at_limit.status, at_limit.input) == (SagaStatus.COMPLETED, _padded(ledger_path, LIMIT))
    over = _padded(ledger_path, LIMIT + 1)
    run = functools.partial(coord.run, sagas.PLAIN, data=over, key="over")
    _refused(url, PayloadError, run, f"{LIMIT + 1} bytes", f"limit of {LIMIT} bytes")
    block = functools.partial(_block, coord, "h", "over", over)
    _refused(url, PayloadError, block, "arguments of step", f"limit of {LIMIT} bytes")


def huge_result(data: Any) -> str:
    """A step whose result is over the payload limit: the step fails, its effect is undone."""
    sagas.cm_action(data)
    return "x" * (LIMIT + 1)


def test_a_result_over_the_limit_fails_its_step_which_is_then_undone(
    coord: Coordinator, ledger_path: str
) -> None:
    with pytest.raises(SagaFailed) as failed, coord.saga("h", key="big") as s:
        s.step(huge_result, sagas.how(ledger_path), compensate=sagas.cm_undo, step_name="s1")
    view = coord.get(failed.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert "over the payload limit" in (view.steps[0].error or "")
    figures.count("hostile inputs")


def test_nul_bytes_in_names_and_keys_are_refused_on_every_backend(
    coord: Coordinator, url: str, ledger_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The unstorable sagas defined here leave the process's catalog with the test.
    monkeypatch.setattr(definition, "_catalog", dict(definition._catalog))
    data = sagas.how(ledger_path)
    attempts = {
        "key": functools.partial(coord.run, sagas.PLAIN, data=data, key="a\x00b"),
        "key ": functools.partial(_block, coord, "h", "a\x00b", data),
        "saga name": functools.partial(_block, coord, "a\x00b", "k", data),
        "step name": functools.partial(_block, coord, "h", "k", data, step_name="s\x00"),
    }
    for what, attempt in attempts.items():
        _refused(url, PayloadError, attempt, what.strip(), "NUL byte")
    for saga_name, step_name in (("faults-nul\x00", "s1"), ("faults-nul-step", "s\x001")):
        declare = functools.partial(_declare_and_register, coord, saga_name, step_name)
        _refused(url, DefinitionError, declare, repr(saga_name), "NUL byte")


def _declare_and_register(coord: Coordinator, saga_name: str, step_name: str) -> None:
    """Declare a one-step saga and register it (a bad name is refused at its declaration)."""
    saga = Saga(saga_name)
    saga.step(name=step_name)(sagas.declared_action)
    coord.register(saga)


def test_names_and_keys_too_long_to_index_are_refused_on_every_backend(
    coord: Coordinator, url: str, ledger_path: str
) -> None:
    emoji = "".join(chr(0x1F300 + n % 700) for n in range(1000))  # 4,000 bytes, incompressible
    data = sagas.how(ledger_path)
    run = functools.partial(coord.run, sagas.PLAIN, data=data, key=emoji)
    _refused(url, PayloadError, run, "key", "4000 bytes", "limit of 2000 bytes")
    block = functools.partial(_block, coord, "n" * 1000, "k", data)
    _refused(url, PayloadError, block, "saga name", "1000 bytes", "limit of 500 bytes")


STRANGE = {
    "quotes": 'o\'brien "the" `tick`',
    "semicolons": "x'; DROP TABLE saga_instances; --",
    "dollar quotes": "$$ LANGUAGE plpgsql $$ $tag$",
    "newlines": "line one\nline two\r\n\ttabbed",
    "format markers": "%(id)s %s {0} \\x00 \\",
    "emoji": "🧾📦🚚 ✅",
    "1000 characters": "é" * 1000,  # the longest key (2,000 bytes); names are cut to 200
}


def test_strange_names_and_keys_are_stored_verbatim(
    coord: Coordinator, url: str, ledger_path: str
) -> None:
    for text in STRANGE.values():
        name = text[:200]
        saga = Saga(name)
        for n in (1, 2):
            step = saga.step(name=f"{name}#{n}", retry=sagas.FAST)(sagas.declared_action)
            step.compensation(retry=sagas.FAST_UNDO)(sagas.declared_undo)
        data = sagas.how(ledger_path, fail=f"{name}#2")
        with pytest.raises(SagaFailed) as failed:
            coord.run(saga, data=data, key=text)
        view = coord.get(failed.value.saga_id)
        assert (view.name, view.key, view.input, view.status) == (
            name,
            text,
            data,
            SagaStatus.COMPENSATED,
        )
        assert [s.name for s in view.steps] == [f"{name}#1", f"{name}#2"]
        with pytest.raises(SagaFailed):  # the same key again: the recorded outcome, nothing new
            coord.run(saga, data=data, key=text)
        assert [v.id for v in coord.list(name=name)] == [view.id]
        assert {e.step for e in coord.history(view.id)} == {None, f"{name}#1", f"{name}#2"}
        cm_key = f"cm:{text[:900]}"
        assert sagas.run_block(coord, name + " cm", cm_key, sagas.how(ledger_path)) is (
            SagaStatus.COMPLETED
        )
        (block,) = coord.list(name=name + " cm")
        assert (block.key, [s.name for s in block.steps]) == (cm_key, ["s1", "s2", "s3"])
        figures.count("hostile inputs")
    assert len(dump(url)["saga_instances"]) == 1 + 2 * len(STRANGE)
