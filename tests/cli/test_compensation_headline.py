"""The real ``saga`` command on a saga whose compensation failed for good: ``show`` and
``show --json`` give that compensation's error as the saga's, the forward error beside
it, and ``list`` and ``list --json`` give it on the saga's row; and on a saga compensated
by ``saga recover`` in another process, what each compensation returned, per step. On
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from saga import Coordinator, SagaFailed, SagaStatus
from tests.cli import headline_steps as trip
from tests.cli.conftest import expire, run_saga

APP = ("--app", "tests.cli.headline_steps")
FORWARD = "BookingRejected: charge_card rejected: card ending 4242 declined"
UNDO = "FlightCancellationError: airline refused to cancel FL-101: ticket already issued"


def _words(text: str) -> str:
    """``text`` with every run of blanks one space: table padding and wrapping aside."""
    return " ".join(text.split())


def _show(db_url: str, saga_id: str, tmp_path: Path, *flags: str) -> str:
    shown = run_saga("--db", db_url, *APP, "show", saga_id, *flags, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_saga_show_headlines_the_compensations_error(db_url: str, tmp_path: Path) -> None:
    with Coordinator(db_url) as coord, pytest.raises(SagaFailed) as raised:
        coord.run(trip.TRIP, data={"refused": True}, key="refused")
    saga_id = raised.value.saga_id
    text = _words(_show(db_url, saga_id, tmp_path))
    assert f"error {UNDO}" in text
    assert f"unwinding began because {FORWARD}" in text
    as_json = json.loads(_show(db_url, saga_id, tmp_path, "--json"))
    assert (as_json["status"], as_json["error"], as_json["forward_error"]) == (
        "failed",
        UNDO,
        FORWARD,
    )


def _listed(db_url: str, tmp_path: Path, *flags: str) -> str:
    listed = run_saga("--db", db_url, *APP, "list", *flags, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout


def _refused_and_declined(db_url: str) -> tuple[str, str]:
    """A saga whose compensation failed for good, and one that compensated: their ids."""
    with Coordinator(db_url) as coord:
        with pytest.raises(SagaFailed) as refused:
            coord.run(trip.TRIP, data={"refused": True}, key="refused")
        with pytest.raises(SagaFailed) as declined:
            coord.run(trip.TRIP, data={}, key="declined")
    assert (refused.value.status, declined.value.status) == (
        SagaStatus.FAILED,
        SagaStatus.COMPENSATED,
    )
    return refused.value.saga_id, declined.value.saga_id


def test_saga_list_headlines_each_sagas_error(db_url: str, tmp_path: Path) -> None:
    refused, declined = _refused_and_declined(db_url)
    lines = _listed(db_url, tmp_path).splitlines()
    assert len(lines) == 3  # the header and one line a saga, its error cut to fit
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows[refused].split()[3] == "failed"
    assert rows[refused].endswith(f" {UNDO[:57]}...")  # at most 60 characters
    assert "BookingRejected" not in rows[refused]  # the forward error is show's to give
    assert rows[declined].split()[3] == "compensated"
    assert rows[declined].endswith(f" {FORWARD[:57]}...")
    listed = json.loads(_listed(db_url, tmp_path, "--json"))["sagas"]
    by_id = {row["id"]: row for row in listed}
    assert (by_id[refused]["error"], by_id[refused]["forward_error"]) == (UNDO, FORWARD)
    assert (by_id[declined]["error"], by_id[declined]["forward_error"]) == (FORWARD, FORWARD)


def _recovered_elsewhere(db_url: str, tmp_path: Path) -> str:
    """Crashed in this process inside charge_card; compensated by ``saga recover``."""
    with Coordinator(db_url) as coord:
        with pytest.raises(trip.SimulatedCrash):
            coord.run(trip.TRIP, data={"crash": True}, key="crashed")
        record = coord.store.find(trip.TRIP.name, "crashed")
        assert record is not None
        expire(coord, record.id)
    recovered = run_saga("--db", db_url, *APP, "recover", record.id, cwd=tmp_path)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    return record.id


def test_saga_show_gives_what_each_compensation_returned(db_url: str, tmp_path: Path) -> None:
    saga_id = _recovered_elsewhere(db_url, tmp_path)
    steps: dict[str, Any] = {
        step["name"]: step
        for step in json.loads(_show(db_url, saga_id, tmp_path, "--json"))["steps"]
    }
    assert steps["book_flight"]["compensation_result"] == {"amount": 120, "refund_id": "re_FL-101"}
    assert steps["book_hotel"]["compensation_result"] == {"amount": 80, "refund_id": "re_hotel"}
    assert steps["charge_card"]["compensation_result"] is None
    assert steps["book_flight"]["result"] == {"flight": "FL-101"}  # a typed result, as stored
    text = _words(_show(db_url, saga_id, tmp_path))
    assert 'step book_flight: compensation returned {"amount": 120, "refund_id": "re_FL-101"}' in (
        text
    )
    with Coordinator(db_url) as coord:  # typed here, as the definition says
        view = coord.get(saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("book_flight").compensation_result == trip.Refund("re_FL-101", 120)
