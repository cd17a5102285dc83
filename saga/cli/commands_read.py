"""The read commands: ``saga list``, ``show``, ``history`` and ``diff``.

Each parses its arguments and hands one admin call and one renderer to
:func:`~saga.cli.session.respond`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from saga import admin
from saga._internal.ports import DEFAULT_LIST_LIMIT
from saga.cli.options import (
    AgeFilter,
    JsonFlag,
    KeyFilter,
    KeyPrefixFilter,
    NameFilter,
    SagaId,
    StatusFilter,
    StepFilter,
    StuckFlag,
    WideFlag,
    app,
    naming_command,
)
from saga.cli.render import (
    ListArgs,
    render_detail,
    render_diff,
    render_page,
    render_timeline,
)
from saga.cli.session import respond

PageLimit = Annotated[
    int, typer.Option("--limit", help="At most this many on a page.", metavar="N")
]
PageBefore = Annotated[
    str | None,
    typer.Option("--before", help="The page after this id (see the last line).", metavar="ID"),
]


@app.command("list")
def list_command(
    ctx: typer.Context,
    status: StatusFilter = None,
    name: NameFilter = None,
    key: KeyFilter = None,
    key_prefix: KeyPrefixFilter = None,
    step: StepFilter = None,
    stuck: StuckFlag = False,
    older_than: AgeFilter = None,
    limit: PageLimit = DEFAULT_LIST_LIMIT,
    before: PageBefore = None,
    wide: WideFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Sagas, newest first."""
    args = ListArgs(
        tuple(status or ()), name, key, stuck, older_than, limit, wide, key_prefix, step
    )
    respond(
        ctx,
        json_output,
        lambda coord: admin.list_sagas(
            coord,
            statuses=admin.parse_statuses(args.statuses),
            name=name,
            key=key,
            key_prefix=key_prefix,
            step=step,
            stuck=stuck,
            older_than=_age(older_than),
            limit=limit,
            before=before,
        ),
        lambda session, page: render_page(session, page, args),
    )


@naming_command("show")
def show_command(ctx: typer.Context, json_output: bool, ref: admin.SagaRef) -> None:
    """One saga: its input and success stack, with the in-doubt step and the pivot marked."""
    respond(ctx, json_output, lambda coord: admin.show_saga(coord, ref), render_detail)


@naming_command("history")
def history_command(ctx: typer.Context, json_output: bool, ref: admin.SagaRef) -> None:
    """The saga's events, oldest first, with timestamps and durations."""
    respond(ctx, json_output, lambda coord: admin.saga_history(coord, ref), render_timeline)


@app.command("diff")
def diff_command(
    ctx: typer.Context,
    left: SagaId,
    right: SagaId,
    wide: WideFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Step by step, where two runs differ (SHA-256 digests of inputs and outputs, timing)."""
    respond(
        ctx,
        json_output,
        lambda coord: admin.diff_sagas(coord, left, right),
        lambda session, diff: render_diff(session, diff, wide),
    )


def _age(older_than: str | None) -> float | None:
    """``--older-than`` in seconds (None: not given)."""
    return None if older_than is None else admin.parse_duration(older_than, "--older-than")
