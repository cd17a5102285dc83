"""``saga purge``: delete finished sagas, in batches, once the operator confirmed."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Annotated

import typer

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError
from saga._internal.status import SagaStatus
from saga.admin import maintenance
from saga.cli.options import app
from saga.cli.session import Session, reporting, session_of

OlderThan = Annotated[
    str, typer.Option("--older-than", help="Created longer ago than this (30d).", metavar="AGE")
]
FinishedStatuses = Annotated[
    list[str] | None,
    typer.Option(
        "--status",
        "-s",
        help="Finished statuses (default: completed,compensated).",
        metavar="STATUS",
    ),
]
YesFlag = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
Pace = Annotated[
    float,
    typer.Option(
        "--pace",
        help="Share of the time purge works, resting between batches (1: flat out).",
        metavar="SHARE",
    ),
]


@app.command("purge")
def purge_command(
    ctx: typer.Context,
    older_than: OlderThan,
    status: FinishedStatuses = None,
    yes: YesFlag = False,
    pace: Pace = maintenance.DEFAULT_PACE,
) -> None:
    """Delete finished sagas (with their steps and events), in batches."""
    session = session_of(ctx)
    with reporting(session):
        seconds = admin.parse_duration(older_than, "--older-than")
        statuses = admin.parse_statuses(status or ["completed,compensated"])
        maintenance.check_pace(pace)
        coord = session.coordinator()
        if not yes:
            _confirm(_question(coord, statuses, older_than))
        deleted = admin.purge(
            coord,
            older_than=seconds,
            statuses=statuses,
            progress=_purge_progress(session),
            pace=pace,
        )
        if session.json:
            session.emit_json({"deleted": deleted})
        else:
            session.say(f"deleted {deleted} saga(s)")


def _question(coord: Coordinator, statuses: Sequence[SagaStatus], older_than: str) -> str:
    what = ", ".join(s.value for s in statuses)
    return f"Delete every {what} saga created more than {older_than} ago on {coord.store.url}?"


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise ConfigurationError("purge needs confirmation: run it on a terminal or pass --yes")
    # Declining aborts (exit 1, "saga: aborted" on stderr), as Ctrl-C and end of input do.
    typer.confirm(question, default=False, abort=True)


def _purge_progress(session: Session) -> Callable[[int], None] | None:
    if not session.err.is_terminal:
        return None
    return lambda total: session.err.print(f"deleted {total}...", markup=False)
