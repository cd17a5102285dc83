"""The commands that act on sagas: ``saga recover`` and the operator actions
(``worker``: :mod:`saga.cli.command_worker`; ``purge``: :mod:`saga.cli.command_purge`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.progress import Progress

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError
from saga._internal.views import SagaView
from saga.cli.command_bulk import acting_command
from saga.cli.options import JsonFlag, KeyOption, NameOption, app
from saga.cli.render import render_recovery
from saga.cli.session import FAILED, OK, Session, reporting, session_of

# -- recover ----------------------------------------------------------------------------------


@app.command("recover")
def recover_command(
    ctx: typer.Context,
    saga_ids: Annotated[
        list[str] | None, typer.Argument(help="Only these sagas (default: every stuck one).")
    ] = None,
    compensate: Annotated[
        bool, typer.Option("--compensate", help="Unwind running sagas instead of resuming them.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be done; change nothing.")
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", help="At most this many sagas.", metavar="N")
    ] = None,
    key: KeyOption = None,
    name: NameOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Claim stuck sagas and finish them: forward, or compensating."""
    session = session_of(ctx)
    with reporting(session), _progress(session) as progress:
        chosen: list[admin.SagaRef] = list(saga_ids or ())
        if key is not None or name is not None:
            chosen.append(admin.target(None, key, name))
        summary = admin.recover(
            session.coordinator(),
            chosen,
            compensate=compensate,
            dry_run=dry_run,
            limit=limit,
            progress=progress,
        )
    if session.wants_json(json_output):
        session.emit_json(summary.as_json())
    else:
        render_recovery(session, summary)
    # A dry run changed nothing, so nothing failed: it exits 0 and its report says the rest.
    raise typer.Exit(OK if summary.ok or summary.dry_run else FAILED)


@contextlib.contextmanager
def _progress(session: Session) -> Iterator[admin.Progress | None]:
    """A progress bar on stderr when it is a terminal; nothing otherwise."""
    if not session.err.is_terminal:
        yield None
        return
    with Progress(console=session.err, transient=True) as bar:
        task = bar.add_task("recovering", total=None)

        def advance(item: admin.RecoveryItem, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=item.saga_id[:8])

        yield advance


# -- operator actions -------------------------------------------------------------------------
# Each builder below is a command (acting_command): its docstring the help, its
# parameters the command's own options, its answer the verb applied to each saga.

FromStep = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="Run again from this step on (you checked what it did); each step from there "
        "that succeeded must be declared idempotent.",
        metavar="STEP",
    ),
]
Reason = Annotated[
    str, typer.Option("--reason", help="What you did; it is recorded.", metavar="TEXT")
]


@acting_command("compensate")
def compensate_verb() -> admin.Verb:
    """Unwind a saga now (refused past its pivot or once it finished)."""
    return admin.compensate


@acting_command("resume")
def resume_verb() -> admin.Verb:
    """Carry a stuck or paused declarative saga forward now (needs --app)."""
    return admin.resume


@acting_command("pause")
def pause_verb() -> admin.Verb:
    """Hold a running saga at its next step boundary, nothing compensated (resume goes on)."""
    return admin.pause


@acting_command("cancel")
def cancel_verb() -> admin.Verb:
    """Stop a running saga at its next step boundary and unwind it."""
    return admin.cancel


@acting_command("retry")
def retry_verb(from_step: FromStep = None) -> admin.Verb:
    """Run forward again a saga that failed past its pivot, once the cause is fixed
    (the failed step with a fresh attempt budget, then the rest; with --from STEP, that
    step and every step after it; needs --app)."""
    return admin.verb_with("retry", {} if from_step is None else {"from_step": from_step})


@acting_command("retry-compensation")
def retry_compensation_verb() -> admin.Verb:
    """Run a failed saga's compensations again, with a fresh attempt budget."""
    return admin.retry_compensation


@acting_command("mark-compensated")
def mark_compensated_verb(
    step: Annotated[
        str,
        typer.Option(
            "--step",
            help="The step you undid by hand (with filters: the sagas stopped at it).",
            metavar="STEP",
        ),
    ],
    reason: Reason,
) -> admin.Verb:
    """Record that you undid a failed saga's step by hand, then unwind the rest."""
    _said(reason, "--reason must say what was done by hand; it is recorded")

    def mark_compensated(coord: Coordinator, ref: admin.SagaRef) -> SagaView:
        return admin.mark_compensated(coord, ref, step, reason)

    return mark_compensated


@acting_command("skip")
def skip_verb(
    step: Annotated[
        str,
        typer.Option(
            "--step",
            help="The failed step you did by hand (with filters: the sagas stopped at it).",
            metavar="STEP",
        ),
    ],
    reason: Reason,
    result: Annotated[
        str,
        typer.Option(
            "--result", help="What the step would have returned, as JSON.", metavar="JSON"
        ),
    ] = "null",
) -> admin.Verb:
    """Record that you did a failed step of a saga past its pivot by hand (its result as
    if it had returned it), then carry the saga forward (needs --app)."""
    _said(reason, "skip: the reason must say what was done by hand")
    admin.parse_result(result)

    def skip(coord: Coordinator, ref: admin.SagaRef) -> SagaView:
        return admin.skip(coord, ref, step, result, reason)

    return skip


@acting_command("mark-step")
def mark_step_verb(
    step: Annotated[
        str,
        typer.Option(
            "--step",
            help="The step whose outcome is in doubt (with filters: the sagas stopped at it).",
            metavar="STEP",
        ),
    ],
    did_not_happen: Annotated[
        bool,
        typer.Option(
            "--did-not-happen",
            help="Say that the step's action did not take effect (you checked); required.",
        ),
    ] = False,
    reason: Annotated[
        str, typer.Option("--reason", help="How you know; it is recorded.", metavar="TEXT")
    ] = "",
) -> admin.Verb:
    """Record what really happened to a step given up in doubt (a failed saga's pivot that
    never returned), so that `saga retry-compensation` may unwind the saga."""
    if not did_not_happen:  # the one outcome an operator can record today
        raise ConfigurationError("say what happened to the step: --did-not-happen")
    _said(reason, "--reason must say how you know; it is recorded")

    def mark_step(coord: Coordinator, ref: admin.SagaRef) -> SagaView:
        return admin.mark_step(coord, ref, step, reason)

    return mark_step


def _said(reason: str, why: str) -> None:
    """Refuse an empty reason before anything is read (the admin functions check it too)."""
    if not reason.strip():
        raise ConfigurationError(why)
