"""``saga retry``: a saga failed past its pivot runs forward again from the command line,
once its cause is fixed; by id, by filter (listed first, acted on with --yes), and
refused with one line and nothing changed otherwise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from saga import Coordinator, SagaFailed, SagaStatus
from saga.cli import app
from tests.cli.forward_steps import FORWARD, FORWARD_FROM

APP = "tests.cli.forward_steps"


def saga(url: str, *args: str) -> Result:
    return CliRunner().invoke(app, ["--db", url, "--app", APP, *args])


def failed_forward(coord: Coordinator, blocker: Path) -> str:
    blocker.touch()
    with pytest.raises(SagaFailed) as raised:
        coord.run(FORWARD, data={"blocker": str(blocker)})
    return raised.value.saga_id


@pytest.fixture
def coord(db_url: str) -> Iterator[Coordinator]:
    with Coordinator(db_url) as coord:
        coord.register(FORWARD)
        yield coord


def test_retry_by_id_completes_the_saga_once_fixed(
    db_url: str, coord: Coordinator, tmp_path: Path
) -> None:
    blocker = tmp_path / "down"
    saga_id = failed_forward(coord, blocker)
    blocker.unlink()  # the fix is deployed

    done = saga(db_url, "retry", saga_id[:8], "--json")

    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["status"] == "completed"
    assert coord.get(saga_id).step("invoice").attempt == 3  # attempts 1, 2 failed
    history = saga(db_url, "history", saga_id)
    assert "retry" in history.stdout


def test_retry_of_a_completed_saga_is_refused_in_one_line(
    db_url: str, coord: Coordinator, tmp_path: Path
) -> None:
    done = coord.run(FORWARD, data={"blocker": str(tmp_path / "absent")})
    before = coord.history(done.id)

    refused = saga(db_url, "retry", done.id)

    assert refused.exit_code == 1
    assert refused.stderr.strip() == (
        f"saga: error: refused: saga {done.id} is completed; retry is for failed sagas"
    )
    assert coord.history(done.id) == before


def test_retry_by_filter_lists_first_and_acts_with_yes(
    db_url: str, coord: Coordinator, tmp_path: Path
) -> None:
    blocker = tmp_path / "down"
    ids = {failed_forward(coord, blocker) for _ in range(2)}
    blocker.unlink()

    listed = saga(db_url, "retry", "--name", "cli-forward", "--status", "failed")
    assert listed.exit_code == 0, listed.output
    assert all(saga_id[:8] in listed.stdout for saga_id in ids)
    assert {coord.get(i).status for i in ids} == {SagaStatus.FAILED}

    acted = saga(db_url, "retry", "--name", "cli-forward", "--status", "failed", "--yes")
    assert acted.exit_code == 0, acted.output
    assert {coord.get(i).status for i in ids} == {SagaStatus.COMPLETED}


def test_skip_records_the_step_done_by_hand(
    db_url: str, coord: Coordinator, tmp_path: Path
) -> None:
    saga_id = failed_forward(coord, tmp_path / "down")  # still down: done by hand instead

    done = saga(
        db_url,
        *("skip", saga_id, "--step", "invoice", "--result", "42"),
        *("--reason", "invoiced by hand", "--json"),
    )

    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["status"] == "completed"
    assert coord.get(saga_id).step("invoice").result == 42
    assert "invoiced by hand" in saga(db_url, "history", saga_id).stdout


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--result", "{oops"), "saga: error: --result must be JSON (null for none):"),
        (("--step", "ship"), "did not fail; the failed steps: invoice"),
    ],
)
def test_skip_bad_input_is_one_line_and_changes_nothing(
    db_url: str, coord: Coordinator, tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    saga_id = failed_forward(coord, tmp_path / "down")
    before = coord.history(saga_id)
    given = dict(zip(args[::2], args[1::2], strict=True))
    flat = [
        part for pair in {"--step": "invoice", "--reason": "r", **given}.items() for part in pair
    ]

    refused = saga(db_url, "skip", saga_id, *flat)

    assert refused.exit_code in (1, 2)
    assert len(refused.stderr.strip().splitlines()) == 1
    assert line in refused.stderr
    assert "Traceback" not in refused.output
    assert coord.history(saga_id) == before


# -- retry --from --------------------------------------------------------------------------


def failed_from(coord: Coordinator, tmp_path: Path) -> str:
    """A saga of FORWARD_FROM failed at ``invoice`` after ``stamp`` ran; then fixed."""
    blocker = tmp_path / "down"
    blocker.touch()
    coord.register(FORWARD_FROM)
    data = {"blocker": str(blocker), "stamps": str(tmp_path / "stamps")}
    with pytest.raises(SagaFailed) as raised:
        coord.run(FORWARD_FROM, data=data)
    blocker.unlink()
    return raised.value.saga_id


def test_retry_from_a_step_runs_it_and_the_rest_again(
    db_url: str, coord: Coordinator, tmp_path: Path
) -> None:
    saga_id = failed_from(coord, tmp_path)

    done = saga(db_url, "retry", saga_id[:8], "--from", "stamp", "--json")

    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["status"] == "completed"
    assert (tmp_path / "stamps").read_text() == "1\n2\n"
    history = saga(db_url, "history", saga_id).stdout
    assert "from_step 'stamp'" in history
    assert "step invoice set to run again (retry from step stamp); it was failed" in history


def test_retry_from_a_pivot_or_an_unknown_step_is_refused_in_one_line(
    db_url: str, coord: Coordinator, tmp_path: Path
) -> None:
    saga_id = failed_from(coord, tmp_path)
    before = coord.history(saga_id)

    pivot = saga(db_url, "retry", saga_id, "--from", "dispatch")
    unknown = saga(db_url, "retry", saga_id, "--from", "nope")

    assert pivot.exit_code == unknown.exit_code == 1
    assert pivot.stderr.strip() == (
        f"saga: error: refused: step 'dispatch' of saga {saga_id} is its pivot and acted: "
        "a pivot is never run again; retry --from a step after it"
    )
    assert unknown.stderr.strip() == (
        f"saga: error: refused: saga {saga_id} has no step 'nope'; its steps: reserve, "
        "dispatch, stamp, invoice"
    )
    assert coord.history(saga_id) == before
    # --from is retry's own: other verbs do not take it.
    other = saga(db_url, "compensate", saga_id, "--from", "stamp")
    assert other.exit_code == 2
    assert "No such option: --from" in other.output
    assert coord.history(saga_id) == before


def test_retry_from_by_filter(db_url: str, coord: Coordinator, tmp_path: Path) -> None:
    first = failed_from(coord, tmp_path)
    second = failed_from(coord, tmp_path)

    done = saga(
        db_url, "retry", "--name", "cli-forward-from", "--status", "failed", "--from", "stamp",
        "--yes", "--json",
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["action"] == "retry"
    assert {item["id"] for item in report["sagas"]} == {first, second}
    assert {item["result"] for item in report["sagas"]} == {"done"}
    assert (tmp_path / "stamps").read_text() == "1\n1\n2\n2\n"
