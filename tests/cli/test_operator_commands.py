"""recover, compensate, resume, cancel, retry-compensation, mark-compensated, purge, db."""

from __future__ import annotations

import json

from saga.adapters.sql.revisions import HEAD

from saga import Coordinator, SagaStatus, StepStatus
from tests.cli import steps
from tests.cli.conftest import World, crashed, invoke, order


def operator_actions(coord: Coordinator, saga_id: str) -> list[str]:
    events = coord.history(saga_id)
    return [e.detail["action"] for e in events if e.kind == "operator_action" and e.detail]


def test_recover_dry_run_says_what_it_would_do_and_changes_nothing(
    world: World, coord: Coordinator
) -> None:
    before = {i: len(coord.history(i)) for i in (world.stuck, world.stuck_imperative)}
    result = invoke(world.url, "recover", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    plans = {item["id"]: (item["plan"], item["result"]) for item in report["sagas"]}
    assert plans == {
        world.stuck: ("resume", "planned"),
        world.stuck_imperative: ("compensate", "planned"),
    }
    assert report["dry_run"] is True
    assert {i: len(coord.history(i)) for i in before} == before
    assert coord.get(world.stuck).status is SagaStatus.RUNNING


def test_recover_finishes_every_stuck_saga_and_summarises(world: World, coord: Coordinator) -> None:
    result = invoke(world.url, "recover")
    assert result.exit_code == 0, result.output
    assert f"resumed      {world.stuck} (cli-order) -> completed" in result.stdout
    assert (
        result.stdout.splitlines()[-1]
        == "recovered 2 of 2: 1 resumed, 1 compensated, 0 failed, 0 skipped"
    )
    assert coord.get(world.stuck).status is SagaStatus.COMPLETED
    assert coord.get(world.stuck).step("charge").attempt == 2
    assert coord.get(world.stuck_imperative).status is SagaStatus.COMPENSATED
    claims = [e.detail for e in coord.history(world.stuck) if e.kind == "lease_claimed"]
    assert [(d or {}).get("why") for d in claims] == ["operator recover"]


def test_recover_given_ids_compensates_on_request_and_skips_what_is_not_stuck(
    world: World, coord: Coordinator
) -> None:
    result = invoke(world.url, "recover", world.stuck, world.completed, "--compensate", "--json")
    assert result.exit_code == 1, result.output  # one of the two was not recovered
    report = json.loads(result.stdout)
    outcome = {item["id"]: (item["result"], item["reason"]) for item in report["sagas"]}
    assert outcome[world.stuck] == ("compensated", None)
    assert outcome[world.completed] == ("skipped", "already completed")
    assert report["summary"] == {
        "resumed": 0,
        "compensated": 1,
        "failed": 0,
        "skipped": 1,
        "planned": 0,
    }
    assert coord.get(world.stuck).status is SagaStatus.COMPENSATED
    assert coord.get(world.stuck_imperative).status is SagaStatus.RUNNING


def test_recover_exits_1_when_a_saga_cannot_be_finished(world: World, coord: Coordinator) -> None:
    stuck_again = crashed(coord, undo_fail_at="reserve")
    result = invoke(world.url, "recover", stuck_again, "--compensate", "--json")
    assert result.exit_code == 1, result.output
    (item,) = json.loads(result.stdout)["sagas"]
    assert (item["result"], item["status"]) == ("failed", "failed")


def test_compensate_unwinds_a_stuck_saga_and_records_the_operator(
    world: World, coord: Coordinator
) -> None:
    result = invoke(world.url, "compensate", world.stuck)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"saga {world.stuck}: compensated"
    view = coord.get(world.stuck)
    assert [s.status for s in view.steps] == [StepStatus.COMPENSATED] * 2
    (event,) = [e for e in coord.history(world.stuck) if e.kind == "operator_action"]
    assert event.detail is not None
    assert event.detail["action"] == "compensate"
    assert event.detail["by"]
    assert event.detail["host"]


def test_compensate_is_refused_once_a_saga_finished(world: World) -> None:
    result = invoke(world.url, "compensate", world.completed)
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        == f"saga: error: refused: saga {world.completed} is already completed"
    )


def test_resume_carries_a_stuck_saga_forward(world: World, coord: Coordinator) -> None:
    result = invoke(world.url, "resume", world.stuck, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "completed"
    assert operator_actions(coord, world.stuck) == ["resume"]


def test_resume_is_refused_for_a_context_manager_saga(world: World) -> None:
    result = invoke(world.url, "resume", world.stuck_imperative)
    assert result.exit_code == 1
    assert "context-manager saga" in result.stderr


def test_cancel_unwinds_a_stuck_saga_as_cancelled(world: World, coord: Coordinator) -> None:
    result = invoke(world.url, "cancel", world.stuck)
    assert result.exit_code == 0, result.output
    assert coord.get(world.stuck).status is SagaStatus.CANCELLED
    assert operator_actions(coord, world.stuck) == ["cancel"]


def test_cancel_of_a_saga_a_live_process_holds_is_left_to_that_process(
    world: World, coord: Coordinator
) -> None:
    held = crashed(coord, expired=False)
    result = invoke(world.url, "cancel", held)
    assert result.exit_code == 0, result.output
    assert "cancel requested: its owner stops at the next step boundary" in result.stdout
    view = coord.get(held)
    assert view.status is SagaStatus.RUNNING
    assert view.cancel_requested


def test_recover_skips_a_saga_whose_lease_is_live(world: World, coord: Coordinator) -> None:
    held = crashed(coord, expired=False)
    result = invoke(world.url, "recover", held, "--json")
    assert result.exit_code == 1, result.output
    (item,) = json.loads(result.stdout)["sagas"]
    assert item["result"] == "skipped"
    assert item["reason"].startswith(f"not stuck: {coord.owner} holds it")
    assert coord.get(held).epoch == 1


def test_cancel_of_a_finished_saga_is_refused(world: World) -> None:
    result = invoke(world.url, "cancel", world.compensated)
    assert result.exit_code == 1
    assert "only a running saga can be cancelled" in result.stderr


def test_retry_compensation_gets_a_failed_saga_out(world: World, coord: Coordinator) -> None:
    still_blocked = invoke(world.url, "retry-compensation", world.failed)
    assert still_blocked.exit_code == 1
    assert coord.get(world.failed).status is SagaStatus.FAILED
    world.refund_blocker.unlink()
    result = invoke(world.url, "retry-compensation", world.failed)
    assert result.exit_code == 0, result.output
    view = coord.get(world.failed)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("reserve").status is StepStatus.COMPENSATED
    assert operator_actions(coord, world.failed) == ["retry-compensation", "retry-compensation"]


def test_retry_compensation_is_only_for_failed_sagas(world: World) -> None:
    result = invoke(world.url, "retry-compensation", world.stuck)
    assert result.exit_code == 1
    assert "the way out of 'failed' only" in result.stderr


def test_mark_compensated_records_the_hand_fix_and_unwinds_the_rest(
    world: World, coord: Coordinator
) -> None:
    reason = "refunded by hand in the provider's console, ticket OPS-7"
    result = invoke(
        world.url, "mark-compensated", world.failed, "--step", "charge", "--reason", reason
    )
    assert result.exit_code == 0, result.output
    view = coord.get(world.failed)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("charge").status is StepStatus.COMPENSATED
    assert view.step("reserve").status is StepStatus.COMPENSATED
    marked = [e for e in coord.history(world.failed) if e.kind == "operator_action"]
    assert marked[0].detail is not None
    assert (marked[0].detail["action"], marked[0].detail["reason"]) == ("mark-compensated", reason)
    history = invoke(world.url, "history", world.failed).stdout
    assert "step charge marked compensated by " in history
    assert reason in history


def test_mark_compensated_refuses_a_step_with_nothing_to_undo(world: World) -> None:
    result = invoke(world.url, "mark-compensated", world.failed, "--step", "ship", "--reason", "x")
    assert result.exit_code == 2
    assert "has no step 'ship'" in result.stderr
    assert "steps to undo: charge, reserve" in result.stderr


def test_purge_deletes_old_finished_sagas_and_a_key_starts_afresh(
    world: World, coord: Coordinator
) -> None:
    result = invoke(world.url, "purge", "--older-than", "0s", "--pace", "0.25", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "deleted 2 saga(s)"  # resting between batches, all go
    remaining = {view.id for view in coord.list()}
    assert remaining == {world.failed, world.stuck, world.stuck_imperative}
    assert coord.history(world.failed)
    again = coord.run(steps.ORDER, data=order(), key="ok-1")
    assert again.id != world.completed
    assert again.status is SagaStatus.COMPLETED


def test_purge_keeps_recent_sagas_and_refuses_unfinished_statuses(world: World) -> None:
    kept = invoke(world.url, "purge", "--older-than", "30d", "--yes")
    assert kept.stdout.strip() == "deleted 0 saga(s)"
    as_json = invoke(world.url, "--json", "purge", "--older-than", "30d", "--yes")
    assert json.loads(as_json.stdout) == {"deleted": 0}
    refused = invoke(world.url, "purge", "--older-than", "0s", "--status", "failed", "--yes")
    assert refused.exit_code == 2
    assert "finished sagas only" in refused.stderr


def test_purge_without_yes_asks_and_does_nothing_when_it_cannot(world: World) -> None:
    result = invoke(world.url, "purge", "--older-than", "0s")
    assert result.exit_code == 2
    assert "--yes" in result.stderr


def test_db_upgrade_and_status(world: World) -> None:
    upgraded = invoke(world.url, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    assert f"revision {HEAD}, nothing to do" in upgraded.stdout
    status = invoke(world.url, "db", "status", "--json")
    assert json.loads(status.stdout) == {
        "url": json.loads(status.stdout)["url"],
        "version": HEAD,
        "expected": HEAD,
        "revision": HEAD,
        "head": HEAD,
        "pending": [],
        "state": "current",
        "up_to_date": True,
        "newer_than_this_release": False,
        "legacy_version": None,
    }


def test_db_status_of_an_empty_database_says_so_and_creates_nothing(sqlite_url: str) -> None:
    first = invoke(sqlite_url, "db", "status")
    assert first.exit_code == 1
    assert f"no saga tables yet (revision {HEAD} needed)" in first.stdout
    assert "run `saga db upgrade`" in first.stdout
    assert invoke(sqlite_url, "db", "status").exit_code == 1


def test_mark_step_must_say_what_happened(world: World, coord: Coordinator) -> None:
    before = coord.history(world.failed)
    result = invoke(world.url, "mark-step", world.failed, "--step", "charge", "--reason", "r")
    assert result.exit_code == 2
    assert "--did-not-happen" in result.stderr
    assert coord.history(world.failed) == before


def test_mark_step_refuses_a_step_that_is_not_in_doubt(world: World, coord: Coordinator) -> None:
    before = coord.history(world.failed)
    args = ["--step", "charge", "--did-not-happen", "--reason", "checked the bank"]
    result = invoke(world.url, "mark-step", world.failed, *args)
    assert result.exit_code == 1
    assert "not in doubt" in result.stderr or "no step" in result.stderr
    completed = invoke(world.url, "mark-step", world.completed, *args)
    assert completed.exit_code == 1
    assert "mark-step is for failed sagas" in completed.stderr
    assert coord.history(world.failed) == before
