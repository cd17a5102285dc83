"""``saga pause`` and ``saga resume`` of a paused saga: one saga by ID, or a filter with
--yes; what ``list``, ``show`` and ``history`` say of a paused saga; bad input."""

from __future__ import annotations

import json

from saga import Coordinator, SagaStatus
from tests.cli.conftest import World, crashed, invoke, one_error_line
from tests.cli.test_operator_commands import operator_actions


def test_pause_hands_an_idle_saga_back_paused_and_resume_finishes_it(
    world: World, coord: Coordinator
) -> None:
    result = invoke(world.url, "pause", world.stuck, "--json")
    assert result.exit_code == 0, result.output
    paused = json.loads(result.stdout)
    assert paused["status"] == "paused"
    view = coord.get(world.stuck)
    assert view.status is SagaStatus.PAUSED
    assert view.owner is None
    assert operator_actions(coord, world.stuck) == ["pause"]

    listed = invoke(world.url, "list", "--status", "paused", "--json")
    assert listed.exit_code == 0, listed.output
    assert [s["id"] for s in json.loads(listed.stdout)["sagas"]] == [world.stuck]

    shown = invoke(world.url, "show", world.stuck)
    assert f"waits for: saga resume {world.stuck}" in shown.stdout

    history = invoke(world.url, "history", world.stuck)
    assert history.exit_code == 0, history.output
    assert "pause" in history.stdout
    assert "paused" in history.stdout

    # A recoverer passes it by: nothing stuck, nothing claimed.
    recovered = invoke(world.url, "recover", "--json")
    assert recovered.exit_code == 0, recovered.output
    assert world.stuck not in recovered.stdout
    assert coord.get(world.stuck).status is SagaStatus.PAUSED

    resumed = invoke(world.url, "resume", world.stuck, "--json")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["status"] == "completed"
    assert operator_actions(coord, world.stuck) == ["pause", "resume"]


def test_pause_of_a_saga_a_live_process_holds_says_it_waits_for_its_owner(
    world: World, coord: Coordinator
) -> None:
    held = crashed(coord, expired=False)
    result = invoke(world.url, "pause", held)
    assert result.exit_code == 0, result.output
    assert "paused (its owner hands it back at its next step boundary" in result.stdout
    assert coord.get(held).status is SagaStatus.PAUSED


def test_pause_with_filters_lists_first_then_acts_with_yes(
    world: World, coord: Coordinator
) -> None:
    other = crashed(coord)
    dry = invoke(world.url, "pause", "--name", "cli-order", "--status", "running")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines()[0].startswith("would pause 2 saga(s)")
    assert coord.get(other).status is SagaStatus.RUNNING

    result = invoke(
        world.url, "pause", "--name", "cli-order", "--status", "running", "--yes", "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["action"], report["ok"], report["total"]) == ("pause", True, 2)
    assert {(s["id"], s["result"], s["status"]) for s in report["sagas"]} == {
        (other, "done", "paused"),
        (world.stuck, "done", "paused"),
    }
    again = invoke(world.url, "resume", "--status", "paused", "--yes", "--json")
    assert again.exit_code == 0, again.output
    assert {s["status"] for s in json.loads(again.stdout)["sagas"]} == {"completed"}


def test_pause_refusals_are_one_line_and_change_nothing(world: World, coord: Coordinator) -> None:
    before = len(coord.history(world.completed))
    done = invoke(world.url, "pause", world.completed)
    assert done.exit_code == 1
    assert "only a running saga pauses" in one_error_line(done.stderr)
    assert len(coord.history(world.completed)) == before
    imperative = invoke(world.url, "pause", world.stuck_imperative)
    assert imperative.exit_code == 1
    assert "context-manager saga" in one_error_line(imperative.stderr)
    bad = invoke(world.url, "pause", "--status", "sleeping")
    assert bad.exit_code == 2
    assert "sleeping" in one_error_line(bad.stderr)
