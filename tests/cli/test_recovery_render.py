"""How ``saga recover`` prints a saga another process claimed while it was finishing it."""

from __future__ import annotations

import io

from rich.console import Console

from saga import SagaStatus, admin
from saga.admin.recovery import LOST_REASON
from saga.cli.render import render_recovery
from saga.cli.session import Session

RESUMED_ID = "11111111-1111-1111-1111-111111111111"
LOST_ID = "22222222-2222-2222-2222-222222222222"


def _printed(*items: admin.RecoveryItem) -> list[str]:
    out = io.StringIO()
    session = Session(None, [], debug=False, json=False, out=Console(file=out, soft_wrap=True))
    render_recovery(session, admin.RecoverySummary(False, items))
    return out.getvalue().splitlines()


def _item(saga_id: str, result: admin.Result, status: SagaStatus | None) -> admin.RecoveryItem:
    reason = LOST_REASON if result is admin.Result.LOST else None
    return admin.RecoveryItem(saga_id, "place-order", admin.Plan.RESUME, result, status, reason)


def test_a_lost_saga_gets_its_own_line_and_count() -> None:
    lines = _printed(
        _item(RESUMED_ID, admin.Result.RESUMED, SagaStatus.COMPLETED),
        _item(LOST_ID, admin.Result.LOST, None),
    )
    assert lines == [
        f"resumed      {RESUMED_ID} (place-order) -> completed",
        f"lost         {LOST_ID} (place-order): {LOST_REASON}",
        "recovered 1 of 2: 1 resumed, 0 compensated, 0 failed, 1 lost to another process, "
        "0 skipped",
    ]


def test_the_summary_line_mentions_lost_sagas_only_when_there_are_some() -> None:
    lines = _printed(_item(RESUMED_ID, admin.Result.RESUMED, SagaStatus.COMPLETED))
    assert lines[-1] == "recovered 1 of 1: 1 resumed, 0 compensated, 0 failed, 0 skipped"
