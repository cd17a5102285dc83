"""Bad input gets a clear error, before anything runs, and loses nothing."""

from __future__ import annotations

import asyncio
import functools
import re
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from saga import (
    AsyncCoordinator,
    ConfigurationError,
    Coordinator,
    DatabaseRefusedError,
    DefinitionError,
    PayloadError,
    Saga,
    SagaFailed,
    SagaStatus,
    SagaView,
    StepContext,
    StepStatus,
    StorageUnavailableError,
    UnknownSagaError,
    UnsafeReferenceError,
)
from tests import postgres
from tests.integration import steps
from tests.integration.support import assert_history_replays, fast


def _closure() -> Callable[..., Any]:
    def nested(account: str, amount: int) -> None:
        steps.CALLS.append(("nested", account, amount))

    return nested


UNSAFE: dict[str, Callable[..., Any]] = {
    "lambda": lambda account, amount: steps.CALLS.append(("lambda", account, amount)),
    "closure": _closure(),
    "bound method": steps.Account().debit,
    "partial": functools.partial(steps.debit, "alice"),
}


@pytest.mark.parametrize("kind", list(UNSAFE))
def test_an_unimportable_action_is_refused_before_anything_runs(
    coord: Coordinator, kind: str
) -> None:
    with (
        pytest.raises(UnsafeReferenceError, match="module-level function"),
        coord.saga("bad-action") as s,
    ):
        s.step(UNSAFE[kind], "alice", 1)
    assert steps.CALLS == []
    assert coord.list() == []
    with pytest.raises(UnknownSagaError):
        coord.get(s.id)


@pytest.mark.parametrize("kind", list(UNSAFE))
def test_an_unimportable_compensation_is_refused_before_anything_runs(
    coord: Coordinator, kind: str
) -> None:
    with (
        pytest.raises(UnsafeReferenceError, match="compensation"),
        coord.saga("bad-compensation") as s,
    ):
        s.step(steps.debit, "alice", 1, compensate=UNSAFE[kind])
    assert steps.CALLS == []
    assert coord.list() == []


def test_a_refused_later_step_unwinds_the_earlier_ones(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as raised, coord.saga("bad-later-step") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 2, compensate=steps.refund)
        s.step(steps.credit, "bob", 2, compensate=UNSAFE["lambda"])
    assert isinstance(raised.value.__cause__, UnsafeReferenceError)
    assert [c[0] for c in steps.CALLS] == ["debit", "refund"]
    view = coord.get(s.id)
    assert view.status is SagaStatus.COMPENSATED
    assert [st.name for st in view.steps] == ["debit"]  # nothing written for the refused step


BAD_VALUES: dict[str, tuple[Any, str]] = {
    "not JSON": ({"when": {1, 2}}, "['when']"),
    "NaN": ([1.0, float("nan")], "[1]"),
    "NUL byte": ({"note": "a\x00b"}, "['note']"),
    "NUL in a key": ({"a\x00": 1}, "['a\\x00']"),
    "too large": ("x" * 5000, ""),
}


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_bad_saga_input_is_refused_and_nothing_is_written(db_url: str, kind: str) -> None:
    value, suffix = BAD_VALUES[kind]
    saga = Saga("bad-input")

    @saga.step()
    def only(ctx: StepContext) -> None:
        steps.CALLS.append(("only",))

    with Coordinator(db_url, payload_limit=1000) as coord:
        with pytest.raises(PayloadError) as raised:
            coord.run(saga, data=value, key="k")
        assert raised.value.path == "input" + suffix
        assert str(raised.value).startswith("input" + suffix + ": ")
        assert steps.CALLS == []
        assert coord.list() == []


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_bad_step_arguments_are_refused_and_nothing_is_written(db_url: str, kind: str) -> None:
    value, suffix = BAD_VALUES[kind]
    with Coordinator(db_url, payload_limit=1000) as coord:
        # As the first step: no saga is created at all.
        with pytest.raises(PayloadError) as first, coord.saga("bad-args") as s:
            s.step(steps.debit, "alice", value)
        path = "arguments of step 'debit'"
        assert first.value.path == (path + "['args'][1]" + suffix if suffix else path)
        assert coord.list() == []
        # As a later step: what ran is unwound, nothing is written for the refused step.
        with pytest.raises(SagaFailed) as later, coord.saga("bad-args-later") as s2:  # noqa: PT012 - the block is the saga
            s2.step(steps.debit, "alice", 1, compensate=steps.refund)
            s2.step(steps.credit, "bob", value)
        assert isinstance(later.value.__cause__, PayloadError)
        view = coord.get(s2.id)
        assert [st.name for st in view.steps] == ["debit"]
        assert view.status is SagaStatus.COMPENSATED
    assert [c[0] for c in steps.CALLS] == ["debit", "refund"]
    assert s.id != s2.id


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_a_bad_step_result_fails_the_step_and_is_not_written(db_url: str, kind: str) -> None:
    value, suffix = BAD_VALUES[kind]
    undone: list[Any] = []
    saga = Saga("bad-result")

    @saga.step()
    def first(ctx: StepContext) -> str:
        return "ok"

    @first.compensation
    def undo_first(ctx: StepContext) -> None:
        undone.append(("first", ctx.result))

    @saga.step(retry=fast(3, retry_on=(Exception,)))
    def produce(ctx: StepContext) -> Any:
        steps.CALLS.append(("produce", ctx.attempt))
        return value

    @produce.compensation
    def undo_produce(ctx: StepContext) -> None:
        undone.append(("produce", ctx.result))

    with Coordinator(db_url, payload_limit=1000) as coord:
        with pytest.raises(SagaFailed) as raised:
            coord.run(saga)
        cause = raised.value.__cause__
        assert isinstance(cause, PayloadError)
        assert cause.path == "result of step 'produce'" + suffix
        assert raised.value.failed_step == "produce"
        assert steps.CALLS == [("produce", 1)]  # a bad value is not worth retrying
        # The action ran, so it may have acted: compensated, with no result.
        assert undone == [("produce", None), ("first", "ok")]
        view = coord.get(raised.value.saga_id)
        assert view.status is SagaStatus.COMPENSATED
        assert view.step("produce").result is None
        assert view.step("produce").status is StepStatus.COMPENSATED
        assert "PayloadError" in (view.step("produce").error or "")
        assert_history_replays(coord, view.id)


def test_a_bad_context_manager_step_result_fails_that_step(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as raised, coord.saga("bad-result-cm") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 1, compensate=steps.refund)
        s.step(steps.unserialisable)
    cause = raised.value.__cause__
    assert isinstance(cause, PayloadError)
    assert cause.path == "result of step 'unserialisable'['bad']"
    assert raised.value.failed_step == "unserialisable"
    view = coord.get(s.id)
    assert view.step("unserialisable").result is None
    assert view.step("unserialisable").status is StepStatus.FAILED
    assert view.step("debit").status is StepStatus.COMPENSATED


def test_unknown_saga_ids_are_reported(coord: Coordinator) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    for action in (coord.get, coord.history, coord.compensate, coord.resume, coord.cancel):
        with pytest.raises(UnknownSagaError, match=missing):
            action(missing)


def test_an_unknown_saga_name_is_reported(coord: Coordinator) -> None:
    with pytest.raises(UnknownSagaError, match="'no-such-saga'"):
        coord.run("no-such-saga")
    assert coord.list() == []


def test_an_unreachable_database_is_reported_without_its_password() -> None:
    url = "postgresql+psycopg://postgres:secret@127.0.0.1:1/x"
    retry = fast(2, retry_on=(StorageUnavailableError,))
    saga = Saga("bad-unreachable")

    @saga.step()
    def only(ctx: StepContext) -> None:
        steps.CALLS.append(("only",))

    coord = Coordinator(url, store_retry=retry)
    try:
        with pytest.raises(StorageUnavailableError) as raised:
            coord.run(saga)
        with pytest.raises(StorageUnavailableError):
            coord.list()
    finally:
        coord.close()
    assert steps.CALLS == []
    text = "".join(traceback.format_exception(raised.value))
    assert "secret" not in text
    assert "127.0.0.1:1" in str(raised.value)
    assert "secret" not in repr(coord)


@pytest.mark.postgres
def test_a_database_lost_after_start_is_refused_for_good(postgres_server: str) -> None:
    """Dropped under a running coordinator: no retry brings it back, so its connections
    are refused (as at start-up), not retried as an outage; the hot path's too."""
    retry = fast(2, retry_on=(StorageUnavailableError,))
    saga = Saga("bad-lost-database")

    @saga.step()
    def only(ctx: StepContext) -> None:
        steps.CALLS.append(("only",))

    with postgres.isolated_database(postgres_server) as url:
        coord = Coordinator(url, store_retry=retry)
        try:
            coord.run(saga)
            coord.store.close()
            with postgres_connection(postgres_server) as connection:
                name = url.partition("?")[0].rsplit("/", 1)[1]
                connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            with pytest.raises(DatabaseRefusedError, match=f'database "{name}" does not exist'):
                coord.run(saga)
        finally:
            coord.close()


def postgres_connection(server_url: str) -> Any:
    import psycopg

    return psycopg.connect(postgres.libpq_url(server_url), autocommit=True)


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/db", "mongodb://x", "saga.db", "oracle+cx://u:p@h/d"]
)
def test_an_unknown_url_scheme_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Coordinator(url)
    assert "p@h" not in str(raised.value)


@pytest.mark.parametrize("url", ["", "   "], ids=["empty", "whitespace"])
def test_an_empty_url_is_refused_not_taken_for_the_default(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an unset variable gives (``os.environ.get("DB_URL", "")``) must not send a
    service's sagas to a local saga.db, nor to $SAGA_DATABASE_URL's database."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAGA_DATABASE_URL", f"sqlite:///{tmp_path / 'from-env.db'}")
    empty = r"^the database URL is empty; pass one \(postgresql\+psycopg://\.\.\. or sqlite"
    with pytest.raises(ConfigurationError, match=empty):
        Coordinator(url)
    with pytest.raises(ConfigurationError, match=empty):
        AsyncCoordinator(url)
    assert list(tmp_path.iterdir()) == []  # neither saga.db nor the variable's file


def test_a_bad_result_of_a_parallel_step_fails_that_step(coord: Coordinator) -> None:
    undone: list[Any] = []
    saga = Saga("bad-result-parallel", max_concurrency=2)

    @saga.step(after=())
    def left(ctx: StepContext) -> Any:
        return {"bad": {1}}

    @left.compensation
    def undo_left(ctx: StepContext) -> None:
        undone.append(("left", ctx.result))

    @saga.step(after=())
    def right(ctx: StepContext) -> str:
        return "fine"

    @right.compensation
    def undo_right(ctx: StepContext) -> None:
        undone.append(("right", ctx.result))

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    assert raised.value.status is SagaStatus.COMPENSATED
    assert raised.value.failed_step == "left"
    cause = raised.value.__cause__
    assert isinstance(cause, PayloadError)
    assert cause.path == "result of step 'left'['bad']"
    assert sorted(undone, key=str) == [("left", None), ("right", "fine")]
    view = coord.get(raised.value.saga_id)
    assert view.step("left").result is None
    assert_history_replays(coord, view.id)


def test_a_nul_byte_in_a_key_is_refused_on_every_backend(coord: Coordinator) -> None:
    saga = Saga("bad-key")

    @saga.step()
    def only(ctx: StepContext) -> None:
        steps.CALLS.append(("only",))

    with pytest.raises(PayloadError, match=r"^key: contains a NUL byte"):
        coord.run(saga, key="order\x0042")
    with pytest.raises(PayloadError, match=r"^key: contains a NUL byte"):
        coord.saga("bad-key-cm", key="t\x007")
    assert steps.CALLS == []
    assert coord.list() == []


@pytest.mark.parametrize(
    ("key", "refusal"),
    [("order\x0042", r"^key: contains a NUL byte"), ("", r"^key: is empty; one blank key")],
    ids=["NUL byte", "blank"],
)
def test_a_bad_key_is_refused_by_the_async_coordinator_too(
    db_url: str, key: str, refusal: str
) -> None:
    saga = Saga("bad-key-async")

    @saga.step()
    async def only(ctx: StepContext) -> None:
        steps.CALLS.append(("only",))

    async def run() -> list[SagaView]:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(PayloadError, match=refusal):
                await coord.run(saga, key=key)
            return await coord.list()

    assert asyncio.run(run()) == []
    assert steps.CALLS == []


BLANKS = {"": "empty", "  \t": "only whitespace"}


@pytest.mark.parametrize("blank", list(BLANKS), ids=list(BLANKS.values()))
def test_a_blank_saga_or_step_name_is_refused_where_it_is_declared(blank: str) -> None:
    said = BLANKS[blank]
    with pytest.raises(DefinitionError, match=rf"saga name: is {said}; give it a name"):
        Saga(blank)
    saga = Saga("bad-blank-step")
    with pytest.raises(DefinitionError, match=rf"step name: is {said}; give it a name"):
        saga.step(name=blank)(lambda ctx: None)
    assert saga.steps == []


@pytest.mark.parametrize("blank", list(BLANKS), ids=list(BLANKS.values()))
def test_a_blank_name_or_key_is_refused_before_anything_is_written(
    coord: Coordinator, blank: str
) -> None:
    """A blank key would make every run given it one saga: the second order would get
    the first one's answer. Refused, as a blank name is, on every backend alike."""
    said = BLANKS[blank]
    saga = Saga("bad-blank-key")
    saga.step(name="only")(lambda ctx: steps.CALLS.append(("only",)))
    with pytest.raises(PayloadError, match=rf"^key: is {said}; one blank key would make"):
        coord.run(saga, key=blank)
    with pytest.raises(PayloadError, match=rf"^key: is {said}; .* pass key=None for none$"):
        coord.saga("bad-blank-key-cm", key=blank)
    with pytest.raises(PayloadError, match=rf"^saga name: is {said}; give it a name"):
        coord.saga(blank)
    with (
        pytest.raises(PayloadError, match=rf"^step name: is {said}; give it a name"),
        coord.saga("bad-blank-step-cm") as s,
    ):
        s.step(steps.debit, "alice", 1, compensate=steps.refund, step_name=blank)
    assert steps.CALLS == []
    assert coord.list() == []


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_bad_step_result_fails_the_step_in_the_async_twin(db_url: str, concurrency: int) -> None:
    saga = Saga(f"bad-result-async-{concurrency}", max_concurrency=concurrency)

    @saga.step()
    async def produce(ctx: StepContext) -> Any:
        steps.CALLS.append(("produce", ctx.attempt))
        return {"bad": {1}}

    async def run() -> tuple[SagaFailed, SagaView]:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(SagaFailed) as raised:
                await coord.run(saga)
            return raised.value, await coord.get(raised.value.saga_id)

    failure, view = asyncio.run(run())
    assert isinstance(failure.__cause__, PayloadError)
    assert failure.__cause__.path == "result of step 'produce'['bad']"
    assert failure.status is SagaStatus.COMPENSATED
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("produce").result is None
    assert steps.CALLS == [("produce", 1)]


def test_async_context_manager_sagas_refuse_bad_input_the_same_way(db_url: str) -> None:
    async def scenario() -> str:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(UnsafeReferenceError):  # nothing recorded: the error as it is
                async with coord.saga("bad-async-lambda") as s:
                    await s.step(UNSAFE["lambda"], "alice", 1)
            assert await coord.list() == []
            with pytest.raises(SagaFailed) as raised:  # noqa: PT012 - the block is the saga
                async with coord.saga("bad-async-result") as s2:
                    await s2.step(steps.debit, "alice", 1, compensate=steps.refund)
                    await s2.step(steps.unserialisable)
            assert isinstance(raised.value.__cause__, PayloadError)
            assert raised.value.failed_step == "unserialisable"
            view = await coord.get(s2.id)
            assert view.step("unserialisable").result is None
            assert view.status is SagaStatus.COMPENSATED
            return s2.id

    asyncio.run(scenario())
    assert [c[0] for c in steps.CALLS] == ["debit", "unserialisable", "refund"]


BAD_SETTINGS: dict[str, tuple[dict[str, Any], str]] = {
    "retry not a policy": ({"retry": 3}, "retry must be a RetryPolicy, not 3"),
    "timeout below zero": ({"timeout": -1}, "timeout must be a finite number of seconds"),
    "timeout zero": ({"timeout": 0}, "timeout must be a finite number of seconds"),
    "timeout a string": ({"timeout": "5s"}, "above 0 (None: no limit), not '5s'"),
}


@pytest.mark.parametrize("kind", list(BAD_SETTINGS))
def test_bad_step_settings_are_refused_where_declared_and_nothing_is_written(
    coord: Coordinator, kind: str
) -> None:
    settings, said = BAD_SETTINGS[kind]
    with (
        pytest.raises(DefinitionError, match=r"^step 'debit': ") as raised,
        coord.saga("bad-settings") as s,
    ):
        s.step(steps.debit, "alice", 1, **settings)
    assert said in str(raised.value)
    assert steps.CALLS == []
    assert coord.list() == []
    declared = Saga(f"bad-settings-{kind}")
    with pytest.raises(DefinitionError, match=r"^saga '.*', step 'debit': ") as refused:
        declared.step(**settings)(steps.debit)
    assert said in str(refused.value)
    assert declared.steps == []


@pytest.mark.parametrize("kind", list(BAD_SETTINGS))
def test_bad_step_settings_are_refused_by_the_async_scope_too(db_url: str, kind: str) -> None:
    settings, said = BAD_SETTINGS[kind]

    async def scenario() -> list[SagaView]:
        async with AsyncCoordinator(db_url) as coord:
            with pytest.raises(DefinitionError, match=re.escape(said)):
                async with coord.saga("bad-settings") as s:
                    await s.step(steps.debit, "alice", 1, **settings)
            return await coord.list()

    assert asyncio.run(scenario()) == []
    assert steps.CALLS == []
