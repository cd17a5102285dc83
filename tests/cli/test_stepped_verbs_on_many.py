"""The verbs that name a step (``skip``, ``mark-compensated``, ``mark-step``) on many
sagas at once: the filters select the sagas, ``--step`` names the step and selects the
sagas stopped at it; listed first, acted on with ``--yes``; bad input is one line before
anything is read, and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from saga import Coordinator, SagaFailed, SagaStatus, StepStatus
from saga.cli import app
from tests.cli import steps
from tests.cli.conftest import APP, order
from tests.cli.forward_steps import FORWARD

FORWARD_APP = "tests.cli.forward_steps"


def saga(url: str, *args: str, app_module: str = FORWARD_APP) -> Result:
    return CliRunner().invoke(app, ["--db", url, "--app", app_module, *args])


def failed_at_invoice(coord: Coordinator, blocker: Path, count: int) -> set[str]:
    blocker.touch()
    ids = set()
    for _ in range(count):
        with pytest.raises(SagaFailed) as raised:
            coord.run(FORWARD, data={"blocker": str(blocker)})
        ids.add(raised.value.saga_id)
    return ids


def test_skip_on_many_lists_first_then_records_each_result(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        ids = failed_at_invoice(coord, tmp_path / "down", 2)
        chosen = ("--name", "cli-forward", "--status", "failed", "--step", "invoice")
        by_hand = ("--result", '{"invoice": 1}', "--reason", "invoiced in the ERP")

        listed = saga(db_url, "skip", *chosen, *by_hand)
        assert listed.exit_code == 0, listed.output
        assert "dry run: nothing was done; add --yes to skip them" in listed.stdout
        assert {coord.get(i).status for i in ids} == {SagaStatus.FAILED}

        done = saga(db_url, "skip", *chosen, *by_hand, "--yes", "--json")
        assert done.exit_code == 0, done.output
        report = json.loads(done.stdout)
        assert report["action"] == "skip"
        assert {item["id"]: item["result"] for item in report["sagas"]} == dict.fromkeys(
            ids, "done"
        )
        for saga_id in ids:
            view = coord.get(saga_id)
            assert view.status is SagaStatus.COMPLETED
            assert view.step("invoice").result == {"invoice": 1}


def test_bad_input_to_a_verb_on_many_is_one_line_and_changes_nothing(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        ids = failed_at_invoice(coord, tmp_path / "down", 2)
        before = {i: coord.history(i) for i in ids}
        chosen = ("--name", "cli-forward", "--status", "failed", "--step", "invoice", "--yes")

        no_reason = saga(db_url, "skip", *chosen, "--reason", " ")
        bad_json = saga(db_url, "skip", *chosen, "--reason", "r", "--result", "{nope")
        no_outcome = saga(db_url, "mark-step", *chosen, "--reason", "r")

        assert no_reason.exit_code == bad_json.exit_code == no_outcome.exit_code == 2
        assert no_reason.stderr.strip() == (
            "saga: error: skip: the reason must say what was done by hand"
        )
        assert bad_json.stderr.strip().startswith("saga: error: --result must be JSON")
        assert no_outcome.stderr.strip() == (
            "saga: error: say what happened to the step: --did-not-happen"
        )
        assert {i: coord.history(i) for i in ids} == before


def test_mark_compensated_on_many_unwinds_each_saga(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        blocker = tmp_path / "refund-blocked"
        blocker.touch()
        ids = set()
        for number in range(2):
            data = order(fail_at="pack", refund_blocked=str(blocker))
            with pytest.raises(SagaFailed) as failure:
                coord.run(steps.ORDER, data=data, key=f"bulk-{number}")
            ids.add(failure.value.saga_id)
        assert {coord.get(i).status for i in ids} == {SagaStatus.FAILED}

        done = saga(
            db_url, "mark-compensated", "--status", "failed", "--step", "charge",
            "--reason", "refunded by hand", "--yes", app_module=APP,
        )  # fmt: skip

        assert done.exit_code == 0, done.output
        assert "mark-compensated: 2 of 2 done" in done.stdout
        for saga_id in ids:
            view = coord.get(saga_id)
            assert view.status is SagaStatus.COMPENSATED
            assert view.step("charge").status is StepStatus.COMPENSATED
            assert view.step("reserve").status is StepStatus.COMPENSATED
