"""A saga found the way the business knows it: by key, or by the first characters of
its id; an ambiguous one is refused with the candidates."""

from __future__ import annotations

import json

import pytest

from saga import AmbiguousSagaError, Coordinator, SagaStatus, UnknownSagaError
from tests.cli.conftest import World, bare, invoke, one_error_line


def test_show_and_history_by_key(world: World) -> None:
    shown = invoke(world.url, "show", "--key", "ok-1", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["id"] == world.completed
    history = invoke(world.url, "history", "--key", "ok-1", "--name", "cli-order", "--json")
    assert history.exit_code == 0, history.output
    assert json.loads(history.stdout)["id"] == world.completed


def test_a_unique_id_prefix_names_the_saga(world: World) -> None:
    shown = invoke(world.url, "show", world.completed[:8], "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["id"] == world.completed
    upper = invoke(world.url, "history", world.completed[:13].upper(), "--json")
    assert upper.exit_code == 0, upper.output


def test_an_ambiguous_prefix_is_refused_with_the_candidates(
    world: World, coord: Coordinator
) -> None:
    first, second = "abcd1234-0000-4000-8000-000000000001", "abcd5678-0000-4000-8000-000000000002"
    bare(coord, first, "twin-a")
    bare(coord, second, "twin-b")
    result = invoke(world.url, "compensate", "abcd")
    assert result.exit_code == 2, result.output
    line = one_error_line(result.stderr)
    assert "'abcd' starts 2 saga ids" in line
    assert f"{first} (twin-a, running)" in line
    assert f"{second} (twin-b, running)" in line
    assert coord.get(first).status is SagaStatus.RUNNING  # nothing was done to either
    assert invoke(world.url, "show", "abcd1").exit_code == 0
    missing = invoke(world.url, "show", "ffff0")
    assert missing.exit_code == 2
    assert "no saga id starts with 'ffff0'" in one_error_line(missing.stderr)


def test_recover_by_key(world: World, coord: Coordinator) -> None:
    key = coord.get(world.stuck).key
    assert key is not None
    result = invoke(world.url, "recover", "--key", key, "--json")
    assert result.exit_code == 0, result.output
    assert coord.get(world.stuck).status is SagaStatus.COMPLETED
    assert coord.get(world.stuck_imperative).status is SagaStatus.RUNNING  # only the one named


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["show"], "name the saga: an ID (or its first characters) or --key"),
        (["cancel", "abcdef12", "--name", "cli-order"], "--name goes with --key"),
        (["resume", "abcdef12", "--key", "k"], "name the saga by ID or by --key, not both"),
        (["show", "--key", "no-such-key"], "no saga with key 'no-such-key'"),
    ],
)
def test_naming_a_saga_badly_is_one_line(world: World, args: list[str], expected: str) -> None:
    result = invoke(world.url, *args)
    assert result.exit_code == 2, result.output
    assert expected in one_error_line(result.stderr)


def test_the_library_gets_by_key_and_name(world: World, coord: Coordinator) -> None:
    assert coord.get(key="ok-1").id == world.completed
    bare(coord, "bbbb0000-0000-4000-8000-000000000003", "other-definition", key="ok-1")
    with pytest.raises(AmbiguousSagaError, match="key 'ok-1' names 2 sagas"):
        coord.get(key="ok-1")
    assert coord.get(key="ok-1", name="cli-order").id == world.completed
    with pytest.raises(UnknownSagaError, match="no saga 'cli-order' with key 'nope'"):
        coord.get(key="nope", name="cli-order")
    assert [v.id for v in coord.list(id_prefix=world.completed[:6])] == [world.completed]
