"""``saga show`` says which errors each step's action is retried on, from the
definition this process loaded (``--app``), and that it does not know when it has none.

Through the real script: the test process itself has every test saga defined, which
an operator's ``saga`` without ``--app`` has not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from saga import Coordinator, SagaStatus
from saga._internal.ports import Commit, Event, SagaRecord
from tests.cli import retry_steps
from tests.cli.conftest import World, run_saga

APP = "tests.cli.retry_steps"
RECORDED = {
    "plain": "transient errors (default)",
    "typed": "ConnectionError, TimeoutError",
    "judged": "predicate tests.cli.retry_steps:worth_retrying",
    "tenacious": "tenacity retry_if_exception_type(ConnectionError)",
    "ship": "transient errors (default)",
    "notify": "Exception",  # a retriable step's default: any error, until it succeeds
}
UNLOADED = "not known here: saga definition not loaded"


@pytest.fixture
def crashed_at_notify(world: World, coord: Coordinator) -> str:
    """A cli-retry saga whose process "died" in ``notify``: ``archive`` still pending."""
    with pytest.raises(retry_steps.SimulatedCrash):
        coord.run(retry_steps.RETRY, data={"crash_at": "notify"}, key="r-1")
    record = coord.store.find(retry_steps.RETRY.name, "r-1")
    assert record is not None
    return record.id


def shown(world: World, tmp_path: Path, *args: str) -> str:
    result = run_saga("--db", world.url, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout


def shown_json(world: World, tmp_path: Path, *args: str) -> Any:
    return json.loads(shown(world, tmp_path, *args, "--json"))


def step_lines(text: str) -> dict[str, str]:
    """The rows of the steps table, by step name."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#  STEP"))
    return {line.split()[1]: line for line in lines[header + 1 :] if line.strip()}


def test_show_describes_each_steps_retry_classification(
    world: World, crashed_at_notify: str, tmp_path: Path
) -> None:
    detail = shown_json(world, tmp_path, "--app", APP, "show", crashed_at_notify)
    assert {step["name"]: step["retry_on"] for step in detail["steps"]} == RECORDED
    text = shown(world, tmp_path, "--app", APP, "show", crashed_at_notify)
    assert "RETRY ON" in text
    rows = step_lines(text)
    for name, description in {**RECORDED, "archive": "transient errors (default)"}.items():
        assert description in rows[name], rows[name]
    assert "pending" in rows["archive"]


def test_without_the_definition_show_says_it_does_not_know(
    world: World, crashed_at_notify: str, tmp_path: Path
) -> None:
    detail = shown_json(world, tmp_path, "show", crashed_at_notify)
    assert {step["retry_on"] for step in detail["steps"]} == {UNLOADED}
    text = shown(world, tmp_path, "show", crashed_at_notify)
    assert f"retry on  {UNLOADED}" in text.splitlines()
    assert "RETRY ON" not in text  # one line for the saga, not a column of the same words
    imperative = shown_json(world, tmp_path, "--app", APP, "show", world.stuck_imperative)
    reasons = {step["retry_on"] for step in imperative["steps"]}
    assert reasons == {"not known here: context-manager saga (its own code sets them)"}


def test_a_version_not_loaded_here_is_not_guessed_from_another(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    saga_id = "cccc0000-0000-4000-8000-000000000009"
    name = retry_steps.RETRY.name
    record = SagaRecord(
        saga_id, name, "v-9", "declarative", SagaStatus.RUNNING, None, "9", "x", 1, fingerprint="f9"
    )
    coord.store.create(record, Commit(saga_id, 1, events=(Event("saga_started"),)), 30.0)
    text = shown(world, tmp_path, "--app", APP, "show", saga_id)
    assert "retry on  not known here: version 9 of the saga not loaded" in text.splitlines()
