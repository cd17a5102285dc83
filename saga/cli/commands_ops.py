"""The commands that act on sagas: ``saga recover`` and the operator actions
(``worker``: :mod:`saga.cli.command_worker`; ``purge``: :mod:`saga.cli.command_purge`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated

import typer
from rich.progress import Progress

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError, SagaHandedBack
from saga._internal.views import SagaView
from saga.cli.command_bulk import acting_command
from saga.cli.options import JsonFlag, KeyOption, NameOption, SagaId, app
from saga.cli.render import render_recovery, render_standing
from saga.cli.session import FAILED, OK, Session, reporting, session_of

VerbOptions = Mapping[str, str]
"""A verb's own options, as :func:`acting_command` gives them (``retry --from``)."""

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


def _act(ctx: typer.Context, json_output: bool, action: Callable[[Coordinator], SagaView]) -> None:
    """Run one operator action and say where the saga now stands.

    A compensation that failed again and waits for its next attempt is no error: the
    saga is ``compensating`` and a worker retries it when due, so the command says so
    and exits 0 (its JSON adds ``waiting``)."""
    session = session_of(ctx)
    with reporting(session, json_output):
        coord = session.coordinator()
        waiting: admin.Waiting | None = None
        try:
            view = action(coord)
        except SagaHandedBack as handed:
            if not handed.waiting:
                raise
            waiting = admin.waiting_after(coord, handed)
            view = admin.get_saga(coord, handed.saga_id)
        if session.wants_json(json_output):
            summary = admin.saga_summary(view, coord.store.now())
            if waiting is not None:
                summary["waiting"] = waiting.as_json()
            session.emit_json(summary)
        elif waiting is not None:
            session.say(waiting.text)
        else:
            render_standing(session, view)


@acting_command("compensate")
def compensate_command(
    ctx: typer.Context, json_output: bool, ref: admin.SagaRef, _options: VerbOptions
) -> None:
    """Unwind a saga now (refused past its pivot or once it finished)."""
    _act(ctx, json_output, lambda coord: admin.compensate(coord, ref))


@acting_command("resume")
def resume_command(
    ctx: typer.Context, json_output: bool, ref: admin.SagaRef, _options: VerbOptions
) -> None:
    """Carry a stuck or paused declarative saga forward now (needs --app)."""
    _act(ctx, json_output, lambda coord: admin.resume(coord, ref))


@acting_command("pause")
def pause_command(
    ctx: typer.Context, json_output: bool, ref: admin.SagaRef, _options: VerbOptions
) -> None:
    """Hold a running saga at its next step boundary, nothing compensated (resume goes on)."""
    _act(ctx, json_output, lambda coord: admin.pause(coord, ref))


@acting_command("cancel")
def cancel_command(
    ctx: typer.Context, json_output: bool, ref: admin.SagaRef, _options: VerbOptions
) -> None:
    """Stop a running saga at its next step boundary and unwind it."""
    _act(ctx, json_output, lambda coord: admin.cancel(coord, ref))


@acting_command("retry", from_step=True)
def retry_command(
    ctx: typer.Context, json_output: bool, ref: admin.SagaRef, options: VerbOptions
) -> None:
    """Run forward again a saga that failed past its pivot, once the cause is fixed
    (the failed step with a fresh attempt budget, then the rest; with --from STEP, that
    step and every step after it; needs --app)."""
    _act(ctx, json_output, lambda coord: admin.verb_with("retry", options)(coord, ref))


@acting_command("retry-compensation")
def retry_compensation_command(
    ctx: typer.Context, json_output: bool, ref: admin.SagaRef, _options: VerbOptions
) -> None:
    """Run a failed saga's compensations again, with a fresh attempt budget."""
    _act(ctx, json_output, lambda coord: admin.retry_compensation(coord, ref))


@app.command("mark-compensated")
def mark_compensated_command(
    ctx: typer.Context,
    saga_id: SagaId,
    step: Annotated[
        str, typer.Option("--step", help="The step you undid by hand.", metavar="STEP")
    ],
    reason: Annotated[
        str, typer.Option("--reason", help="What you did; it is recorded.", metavar="TEXT")
    ],
    json_output: JsonFlag = False,
) -> None:
    """Record that you undid a failed saga's step by hand, then unwind the rest."""
    _act(ctx, json_output, lambda coord: admin.mark_compensated(coord, saga_id, step, reason))


@app.command("skip")
def skip_command(
    ctx: typer.Context,
    saga_id: SagaId,
    step: Annotated[
        str, typer.Option("--step", help="The failed step you did by hand.", metavar="STEP")
    ],
    reason: Annotated[
        str, typer.Option("--reason", help="What you did; it is recorded.", metavar="TEXT")
    ],
    result: Annotated[
        str,
        typer.Option(
            "--result", help="What the step would have returned, as JSON.", metavar="JSON"
        ),
    ] = "null",
    json_output: JsonFlag = False,
) -> None:
    """Record that you did a failed step of a saga past its pivot by hand (its result as
    if it had returned it), then carry the saga forward (needs --app)."""
    _act(ctx, json_output, lambda coord: admin.skip(coord, saga_id, step, result, reason))


@app.command("mark-step")
def mark_step_command(
    ctx: typer.Context,
    saga_id: SagaId,
    step: Annotated[
        str, typer.Option("--step", help="The step whose outcome is in doubt.", metavar="STEP")
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
    json_output: JsonFlag = False,
) -> None:
    """Record what really happened to a step given up in doubt (a failed saga's pivot that
    never returned), so that `saga retry-compensation` may unwind the saga."""

    def mark(coord: Coordinator) -> SagaView:
        if not did_not_happen:  # the one outcome an operator can record today
            raise ConfigurationError("say what happened to the step: --did-not-happen")
        return admin.mark_step(coord, saga_id, step, reason)

    _act(ctx, json_output, mark)
