"""The operator verbs given filters instead of an ID: list first, act with --yes, report each."""

from __future__ import annotations

import json

import pytest

from saga import Coordinator, SagaStatus
from tests.cli.conftest import World, crashed, invoke, one_error_line
from tests.cli.test_operator_commands import operator_actions


def histories(coord: Coordinator) -> dict[str, int]:
    """How many events each saga has: what "nothing was done" compares."""
    return {view.id: len(coord.history(view.id)) for view in coord.list(limit=1000)}


def test_more_than_one_match_is_listed_and_nothing_is_done(
    world: World, coord: Coordinator
) -> None:
    other = crashed(coord)
    before = histories(coord)
    result = invoke(world.url, "compensate", "--name", "cli-order", "--status", "running")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    selected = "(--status running --name cli-order)"
    assert lines[0] == f"would compensate 2 saga(s) {selected}, newest first:"
    assert lines[1].split() == ["ID", "NAME", "KEY", "STATUS", "STEP"]
    newest_first = [view.id for view in coord.list(name="cli-order", status=SagaStatus.RUNNING)]
    assert [line.split()[0] for line in lines[2:4]] == newest_first
    assert set(newest_first) == {other, world.stuck}
    assert lines[2].split()[3:] == ["running", "charge"]
    assert lines[-1] == "dry run: nothing was done; add --yes to compensate them"
    assert histories(coord) == before


def test_yes_acts_on_every_match_and_reports_each_in_json(world: World, coord: Coordinator) -> None:
    other = crashed(coord)
    result = invoke(
        world.url, "compensate", "--name", "cli-order", "--status", "running", "--yes", "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["action"], report["dry_run"], report["ok"], report["total"]) == (
        "compensate",
        False,
        True,
        2,
    )
    assert {(s["id"], s["status_before"], s["current_step"]) for s in report["sagas"]} == {
        (other, "running", "charge"),
        (world.stuck, "running", "charge"),
    }
    assert {(s["result"], s["status"], s["reason"]) for s in report["sagas"]} == {
        ("done", "compensated", None)
    }
    assert report["summary"] == {"done": 2, "waiting": 0, "refused": 0, "failed": 0, "planned": 0}
    assert report["stopped"] is None
    assert report["selection"]["statuses"] == ["running"]
    for saga_id in (other, world.stuck):
        assert coord.get(saga_id).status is SagaStatus.COMPENSATED
        assert operator_actions(coord, saga_id) == ["compensate"]
    assert coord.get(world.stuck_imperative).status is SagaStatus.RUNNING  # not selected


def test_a_filter_matching_exactly_one_saga_acts_as_naming_it(
    world: World, coord: Coordinator
) -> None:
    key = coord.get(world.stuck).key
    assert key is not None
    result = invoke(world.url, "resume", "--key-prefix", key[:-2], "--status", "running")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"done     {world.stuck} (cli-order) -> completed",
        "resume: 1 of 1 done (0 waiting, 0 refused, 0 failed)",
    ]
    assert coord.get(world.stuck).status is SagaStatus.COMPLETED


def test_a_saga_refused_is_reported_and_the_others_are_acted_on(
    world: World, coord: Coordinator
) -> None:
    result = invoke(
        world.url, "cancel", "--status", "running,completed", "--name", "cli-order", "--yes"
    )
    assert result.exit_code == 1, result.output  # one was refused
    lines = result.stdout.splitlines()
    assert f"done     {world.stuck} (cli-order) -> cancelled" in lines
    refused = next(line for line in lines if world.completed in line)
    assert refused.startswith(f"refused  {world.completed} (cli-order): ")
    assert "only a running saga can be cancelled" in refused
    assert lines[-1] == "cancel: 1 of 2 done (0 waiting, 1 refused, 0 failed)"
    assert coord.get(world.stuck).status is SagaStatus.CANCELLED
    assert coord.get(world.completed).status is SagaStatus.COMPLETED


def test_retry_compensation_by_status_reports_a_failure_then_gets_them_out(
    world: World, coord: Coordinator
) -> None:
    again = invoke(world.url, "retry-compensation", "--status", "failed", "--json")
    assert again.exit_code == 1, again.output  # one matched: it acts; the refund still fails
    (item,) = json.loads(again.stdout)["sagas"]
    assert (item["id"], item["result"], item["status"]) == (world.failed, "failed", "failed")
    assert "payment provider unreachable" in item["reason"]
    world.refund_blocker.unlink()
    result = invoke(world.url, "retry-compensation", "--status", "failed")
    assert result.exit_code == 0, result.output
    assert coord.get(world.failed).status is SagaStatus.COMPENSATED


def test_limit_and_batch_size_bound_what_is_acted_on(world: World, coord: Coordinator) -> None:
    made = [crashed(coord) for _ in range(3)]
    newest = [view.id for view in coord.list(name="cli-order", stuck=True, limit=2)]
    result = invoke(
        world.url,
        "compensate",
        "--stuck",
        "--name",
        "cli-order",
        "--limit",
        "2",
        "--batch-size",
        "1",
        "--yes",
        "--json",
    )
    assert result.exit_code == 0, result.output
    acted = [item["id"] for item in json.loads(result.stdout)["sagas"]]
    assert acted == newest  # the newest two, as saga list orders them
    (left,) = set(made) - set(newest)
    assert coord.get(left).status is SagaStatus.RUNNING
    assert coord.get(world.stuck).status is SagaStatus.RUNNING


def test_step_and_key_prefix_filters_select_as_saga_list_shows(
    world: World, coord: Coordinator
) -> None:
    listed = invoke(world.url, "list", "--step", "charge", "--json")
    assert listed.exit_code == 0, listed.output
    at_charge = {row["id"] for row in json.loads(listed.stdout)["sagas"]}
    assert at_charge == {world.stuck, world.compensated, world.failed}
    plan = invoke(world.url, "compensate", "--step", "charge", "--key-prefix", "f-", "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert world.failed in plan.stdout
    assert world.stuck not in plan.stdout
    assert coord.get(world.failed).status is SagaStatus.FAILED  # a dry run, though one matched


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "stuck-ish"], "unknown status 'stuck-ish'"),
        (["--older-than", "yesterday"], "--older-than 'yesterday' is not a duration"),
        (["--name", "no-such-saga"], "no saga matches --name no-such-saga"),
        (["--stuck", "--dry-run", "--yes"], "--dry-run or --yes: not both"),
        (["--stuck", "--batch-size", "0"], "--batch-size must be at least 1, not 0"),
        (["--stuck", "--limit", "0"], "--limit must be at least 1, not 0"),
        (["--key-prefix", ""], "--key-prefix needs at least one character"),
        (["abcd1234", "--status", "failed"], "name one saga (ID or --key) or select sagas"),
        ([], "name the saga: an ID (or its first characters) or --key; or select sagas"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    world: World, coord: Coordinator, args: list[str], expected: str
) -> None:
    before = histories(coord)
    result = invoke(world.url, "compensate", *args)
    assert result.exit_code == 2, result.output
    assert expected in one_error_line(result.stderr)
    assert histories(coord) == before


def test_bad_input_in_json_is_a_json_error_line(world: World) -> None:
    result = invoke(world.url, "cancel", "--older-than", "soon", "--json")
    assert result.exit_code == 2
    error = json.loads(result.stderr)
    assert error["exit_code"] == 2
    assert "is not a duration" in error["error"]


def test_cancel_of_sagas_live_processes_hold_leaves_each_request_standing(
    world: World, coord: Coordinator
) -> None:
    held = {crashed(coord, expired=False) for _ in range(2)}
    result = invoke(world.url, "cancel", "--name", "cli-order", "--status", "running", "--yes")
    assert result.exit_code == 0, result.output
    for saga_id in held:
        line = next(line for line in result.stdout.splitlines() if saga_id in line)
        assert line.startswith(f"done     {saga_id} (cli-order) -> running: cancel requested")
        view = coord.get(saga_id)
        assert (view.status, view.cancel_requested) == (SagaStatus.RUNNING, True)
    assert coord.get(world.stuck).status is SagaStatus.CANCELLED  # nobody held it: unwound
