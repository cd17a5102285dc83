"""list, show, history and diff against sagas in known states, as text and as JSON."""

from __future__ import annotations

import json
import shlex
from typing import Any

from tests.cli.conftest import World, invoke

SUMMARY_KEYS = {
    "id", "name", "key", "kind", "version", "fingerprint", "status", "current_step",
    "current_step_status", "attempt",
    "created_at", "updated_at", "age_seconds", "owner", "epoch", "lease_expires_at",
    "lease_expired", "stuck", "cancel_requested", "error", "forward_error",
}  # fmt: skip
STEP_KEYS = {
    "seq", "name", "kind", "status", "attempt", "compensation_attempt", "transactional",
    "started_at", "finished_at", "duration_seconds", "result", "result_error", "error",
    "input_digest", "output_digest", "in_doubt", "pivot", "retry_on", "retry_wait",
    "compensation_result", "compensation_result_error",
}  # fmt: skip
EVENT_KEYS = {
    "id", "at", "offset_seconds", "duration_seconds", "kind", "step", "attempt", "epoch",
    "detail", "next_attempt_at", "text",
}  # fmt: skip


def json_of(world: World, *args: str) -> Any:
    result = invoke(world.url, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_list_shows_every_saga_newest_first_with_its_state(world: World) -> None:
    result = invoke(world.url, "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "NAME", "KEY", "STATUS"]
    ids = [line.split()[0] for line in lines[1:]]
    expected = [world.stuck_imperative, world.stuck, world.failed, world.compensated]
    assert ids == [*expected, world.completed]
    stuck_line = next(line for line in lines if line.startswith(world.stuck))
    assert "running (stuck)" in stuck_line
    assert "charge (running)" in stuck_line
    assert "expired" in stuck_line


def test_list_json_has_the_documented_shape(world: World) -> None:
    page = json_of(world, "list")
    assert set(page) == {"sagas", "next_before"}
    assert page["next_before"] is None
    assert all(set(row) == SUMMARY_KEYS for row in page["sagas"])
    by_id = {row["id"]: row for row in page["sagas"]}
    stuck = by_id[world.stuck]
    assert (stuck["status"], stuck["current_step"], stuck["stuck"]) == ("running", "charge", True)
    assert by_id[world.completed]["status"] == "completed"
    assert by_id[world.completed]["stuck"] is False


def test_list_filters_by_status_name_and_stuck(world: World) -> None:
    failed = json_of(world, "list", "--status", "failed,compensated")["sagas"]
    assert {row["id"] for row in failed} == {world.failed, world.compensated}
    stuck = json_of(world, "list", "--stuck")["sagas"]
    assert {row["id"] for row in stuck} == {world.stuck, world.stuck_imperative}
    named = json_of(world, "list", "--name", "cli-transfer")["sagas"]
    assert [row["id"] for row in named] == [world.stuck_imperative]
    assert json_of(world, "list", "--older-than", "1d")["sagas"] == []


def test_list_pages_with_limit_and_before(world: World) -> None:
    first = json_of(world, "list", "--limit", "2")
    assert [row["id"] for row in first["sagas"]] == [world.stuck_imperative, world.stuck]
    assert first["next_before"] == world.stuck
    second = json_of(world, "list", "--limit", "2", "--before", first["next_before"])
    assert [row["id"] for row in second["sagas"]] == [world.failed, world.compensated]
    text = invoke(world.url, "list", "--limit", "2").stdout
    hint = shlex.join(["saga", "--db", world.url, "list", "--limit", "2", "--before", world.stuck])
    assert text.splitlines()[-1] == f"more: {hint}"


def test_show_marks_the_in_doubt_step_and_the_pivot(world: World) -> None:
    result = invoke(world.url, "show", world.stuck)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "running (stuck)" in text
    charge = next(line for line in text.splitlines() if line.split()[1:2] == ["charge"])
    assert "IN DOUBT" in charge
    assert "pivot" in next(line for line in text.splitlines() if " ship " in line)
    assert "ship (not passed)" in text
    assert '"sku": "A1"' in text


def test_show_json_has_the_documented_shape(world: World) -> None:
    detail = json_of(world, "show", world.stuck)
    extra = {
        "input",
        "pivot_step",
        "past_pivot",
        "in_doubt_steps",
        "pending_steps",
        "steps",
    }
    assert set(detail) == SUMMARY_KEYS | extra
    assert detail["input"] == {"sku": "A1", "amount": 42, "crash_at": "charge"}
    assert detail["in_doubt_steps"] == ["charge"]
    assert detail["pending_steps"] == ["pack", "ship"]
    assert (detail["pivot_step"], detail["past_pivot"]) == ("ship", False)
    assert all(set(step) == STEP_KEYS for step in detail["steps"])
    reserve, charge = detail["steps"]
    assert (reserve["status"], reserve["result"], reserve["in_doubt"]) == (
        "succeeded",
        {"reserved": "A1"},
        False,
    )
    assert (charge["status"], charge["attempt"], charge["in_doubt"]) == ("running", 1, True)


def test_show_of_a_failed_saga_names_the_failing_compensation(world: World) -> None:
    detail = json_of(world, "show", world.failed)
    assert detail["status"] == "failed"
    steps = {step["name"]: step for step in detail["steps"]}
    assert steps["charge"]["status"] == "compensating"
    assert "payment provider unreachable" in steps["charge"]["error"]
    assert steps["reserve"]["status"] == "succeeded"


def test_history_tells_the_timeline_with_durations(world: World) -> None:
    result = invoke(world.url, "history", world.compensated)
    assert result.exit_code == 0, result.output
    texts = [line.split("  ")[-1].strip() for line in result.stdout.splitlines()[1:]]
    assert texts[:3] == [
        "saga started",
        "step reserve started (attempt 1)",
        "step reserve succeeded (attempt 1)",
    ]
    assert "step charge failed: ValueError: charge refused the order" in texts
    assert texts[-1] == "saga compensated"


def test_history_json_has_the_documented_shape(world: World) -> None:
    timeline = json_of(world, "history", world.compensated)
    assert set(timeline) == {"id", "name", "status", "events"}
    events = timeline["events"]
    assert all(set(event) == EVENT_KEYS for event in events)
    kinds = [event["kind"] for event in events]
    assert kinds[0] == "saga_started"
    assert kinds[-1] == "saga_compensated"
    succeeded = next(e for e in events if e["kind"] == "step_succeeded")
    assert succeeded["duration_seconds"] >= 0
    assert events[0]["offset_seconds"] == 0
    assert all(e["at"].endswith("Z") for e in events)


def test_diff_compares_digests_step_by_step(world: World) -> None:
    diff = json_of(world, "diff", world.completed, world.compensated)
    assert set(diff) == {"left", "right", "same_input", "steps", "only_left", "only_right"}
    assert diff["same_input"] is False
    steps = {step["name"]: step for step in diff["steps"]}
    assert steps["reserve"]["same_output"] is True
    assert steps["charge"]["same_output"] is False
    assert diff["only_left"] == ["pack", "ship"]
    assert diff["only_right"] == []
    text = invoke(world.url, "diff", world.completed, world.compensated).stdout
    assert "input: DIFFERENT" in text
    assert any(line.startswith("ship") and "(not run)" in line for line in text.splitlines())


def test_diff_of_a_saga_with_itself_finds_nothing_different(world: World) -> None:
    diff = json_of(world, "diff", world.completed, world.completed)
    assert diff["same_input"] is True
    assert all(step["same_output"] is True for step in diff["steps"])
