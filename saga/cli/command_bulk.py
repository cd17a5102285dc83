"""The operator verbs on many sagas at once: ``saga compensate --status failed --older-than 1h``.

:func:`acting_command` registers every verb that acts on sagas (their builders are
in :mod:`saga.cli.commands_ops`). Named by ``ID`` or ``--key`` they act on that one
saga (:func:`act_on_one`). Given filters
instead (``--status``, ``--name``, ``--key-prefix``, ``--step``,
``--older-than``, ``--stuck``) they select sagas (:class:`saga.admin.Selection`),
list them with what would be done, and act only with ``--yes``, or when the
filters match exactly one saga (as naming it would); in batches, with a
progress bar on a terminal, and a line (``--json``: an object) per saga.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
from collections.abc import Callable, Iterator
from typing import Annotated

import typer
from rich.progress import Progress
from rich.text import Text

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError, SagaHandedBack, UnknownSagaError
from saga._internal.views import SagaView
from saga.cli.options import (
    AgeFilter,
    JsonFlag,
    KeyOption,
    KeyPrefixFilter,
    MaybeSagaId,
    StatusFilter,
    StepFilter,
    StuckFlag,
    app,
)
from saga.cli.render import render_standing
from saga.cli.session import FAILED, OK, Session, named, reporting, session_of

VerbName = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="With --key: the saga definition's name, when several use the key; "
        "without: only sagas of this name.",
        show_default=False,
        metavar="NAME",
    ),
]
LimitOption = Annotated[
    int | None,
    typer.Option("--limit", help="With filters: at most this many (the newest).", metavar="N"),
]
BatchOption = Annotated[
    int | None,
    typer.Option(
        "--batch-size",
        help=f"With filters: read and act on this many at a time (default {admin.DEFAULT_BATCH}).",
        metavar="N",
    ),
]
DryRunFlag = Annotated[
    bool, typer.Option("--dry-run", help="With filters: list the sagas; change nothing.")
]
YesFlag = Annotated[
    bool, typer.Option("--yes", "-y", help="With filters: act on every saga they match.")
]


SELECTING = (
    "Or, given filters instead of an ID, every saga they all match: listed with what "
    "would be done, and acted on only with --yes (or when exactly one matches)."
)
NO_TARGET = (
    "name the saga: an ID (or its first characters) or --key; or select sagas with "
    "--status, --name, --key-prefix, --step, --older-than or --stuck"
)


@dataclasses.dataclass(frozen=True, slots=True)
class BulkArgs:
    """The filters and the bulk options, as the operator typed them."""

    statuses: tuple[str, ...] = ()
    key_prefix: str | None = None
    step: str | None = None
    older_than: str | None = None
    stuck: bool = False
    limit: int | None = None
    batch_size: int | None = None
    dry_run: bool = False
    yes: bool = False

    @property
    def filtered(self) -> bool:
        """Whether a filter other than ``--name`` is given."""
        filters = (self.key_prefix, self.step, self.older_than)
        return bool(self.statuses) or self.stuck or any(f is not None for f in filters)

    def selection(self, name: str | None) -> admin.Selection:
        """The selection, checked (before the database is opened)."""
        if self.dry_run and self.yes:
            raise ConfigurationError("--dry-run or --yes: not both")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigurationError(f"--batch-size must be at least 1, not {self.batch_size}")
        return admin.Selection.parse(
            statuses=self.statuses,
            name=name,
            key_prefix=self.key_prefix,
            step=self.step,
            older_than=self.older_than,
            stuck=self.stuck,
            limit=self.limit,
        )

    def refuse_beside_one_saga(self) -> None:
        """With an ``ID`` or ``--key`` the command acts on that saga; ``--yes`` is let be."""
        extra = self.filtered or self.dry_run or self.limit is not None
        if extra or self.batch_size is not None:
            raise ConfigurationError(
                "name one saga (ID or --key) or select sagas with filters, not both "
                "(--dry-run, --limit and --batch-size go with filters)"
            )


VerbBuilder = Callable[..., admin.Verb]
"""A command's verb, given the command's own options: its keyword parameters, annotated
for typer as any command's are (``retry``'s ``--from``, ``skip``'s ``--step``,
``--result`` and ``--reason``). It checks them (a ``ConfigurationError`` names what is
wrong before anything is read or changed) and returns what to apply to each saga."""


def acting_command(command: str) -> Callable[[VerbBuilder], VerbBuilder]:
    """Register ``saga COMMAND`` for one saga (``ID`` or ``--key K [--name N]``) or for
    the sagas that filters select, the builder's docstring as its help and its
    parameters as the command's own options. A builder that takes ``step`` (the step the
    verb is about) has it serve as the ``--step`` filter too: with filters, the sagas
    whose current step it is."""

    def register(build: VerbBuilder) -> VerbBuilder:
        own = list(inspect.signature(build, eval_str=True).parameters.values())
        parsed = _parsing(command, build, any(p.name == "step" for p in own))
        parsed.__doc__ = f"{build.__doc__}\n\n{SELECTING}"
        parsed.__signature__ = _with_own_options(parsed, own)  # type: ignore[attr-defined]
        app.command(command)(parsed)
        return build

    return register


def _parsing(command: str, build: VerbBuilder, names_step: bool) -> Callable[..., None]:
    """The function typer calls for ``saga COMMAND``: the common options by name, the
    builder's own gathered by ``**options`` (``_with_own_options`` tells typer of them)."""

    def parsed(
        ctx: typer.Context,
        saga_id: MaybeSagaId = None,
        key: KeyOption = None,
        name: VerbName = None,
        status: StatusFilter = None,
        key_prefix: KeyPrefixFilter = None,
        step: StepFilter = None,
        older_than: AgeFilter = None,
        stuck: StuckFlag = False,
        limit: LimitOption = None,
        batch_size: BatchOption = None,
        dry_run: DryRunFlag = False,
        yes: YesFlag = False,
        json_output: JsonFlag = False,
        **options: object,
    ) -> None:
        if names_step:
            options["step"] = step
        one = saga_id is not None or key is not None
        step_filter = None if names_step and one else step
        args = BulkArgs(
            tuple(status or ()), key_prefix, step_filter, older_than, stuck, limit, batch_size
        )
        args = dataclasses.replace(args, dry_run=dry_run, yes=yes)
        with reporting(session_of(ctx), json_output):
            verb = build(**options)
        _dispatch(ctx, command, verb, json_output, args, (saga_id, key, name))

    return parsed


def _with_own_options(
    parsed: Callable[..., None], own: list[inspect.Parameter]
) -> inspect.Signature:
    """``parsed``'s signature as typer is to read it: the common options, then the
    builder's own (keyword-only, gathered by ``**options``). A builder's ``step``
    replaces the ``--step`` filter (the same option, its help the builder's)."""
    common = inspect.signature(parsed, eval_str=True)  # typer needs the evaluated hints
    names = {parameter.name for parameter in own}
    kept = [
        parameter
        for parameter in common.parameters.values()
        if parameter.kind is not parameter.VAR_KEYWORD and parameter.name not in names
    ]
    extra = [parameter.replace(kind=parameter.KEYWORD_ONLY) for parameter in own]
    return common.replace(parameters=[*kept, *extra])


def _dispatch(
    ctx: typer.Context,
    command: str,
    verb: admin.Verb,
    json_output: bool,
    args: BulkArgs,
    naming: tuple[str | None, str | None, str | None],
) -> None:
    saga_id, key, name = naming
    if saga_id is None and key is None:
        if name is None and not args.filtered:
            with reporting(session_of(ctx), json_output):
                raise ConfigurationError(NO_TARGET)
        run_bulk(ctx, command, json_output, args, name, verb)
        return
    with reporting(session_of(ctx), json_output):
        args.refuse_beside_one_saga()
    ref = named(ctx, json_output, saga_id, key, name)
    act_on_one(ctx, json_output, lambda coord: verb(coord, ref))


def act_on_one(
    ctx: typer.Context, json_output: bool, action: Callable[[Coordinator], SagaView]
) -> None:
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


def run_bulk(
    ctx: typer.Context,
    command: str,
    json_output: bool,
    args: BulkArgs,
    name: str | None,
    verb: admin.Verb,
) -> None:
    """Select, then list or act, then report; exit 0 when every saga was acted on (or a
    dry run listed them), 1 when any was refused or failed."""
    session = session_of(ctx)
    with reporting(session, json_output):
        selection = args.selection(name)
        batch = args.batch_size or admin.DEFAULT_BATCH
        coord = session.coordinator()
        acting = _acting(coord, selection, args)
        targets = admin.select_sagas(coord, selection, page=batch)
        with _progress(session, command, selection.limit) as progress:
            report = admin.act_on_many(
                coord, targets, verb, batch_size=batch, progress=progress, dry_run=not acting
            )
        report = dataclasses.replace(report, action=command)
        if session.wants_json(json_output):
            session.emit_json({**report.as_json(), "selection": selection.as_json()})
        else:
            render_bulk(session, report, selection)
    raise typer.Exit(OK if report.ok else FAILED)


def _acting(coord: Coordinator, selection: admin.Selection, args: BulkArgs) -> bool:
    """Whether to act (else: list only). A selection of nothing is an error; one of
    exactly one saga (whatever ``--limit``) acts as naming that saga would."""
    every = dataclasses.replace(selection, limit=None)
    first = list(itertools.islice(admin.select_sagas(coord, every, page=2), 2))
    if not first:
        raise UnknownSagaError(
            f"no saga matches {selection.describe()}; `saga list` with the same filters "
            "shows what there is"
        )
    return not args.dry_run and (args.yes or len(first) == 1)


@contextlib.contextmanager
def _progress(session: Session, command: str, total: int | None) -> Iterator[admin.BulkProgress]:
    """A progress bar on stderr when it is a terminal; nothing otherwise."""
    if not session.err.is_terminal:
        yield lambda _item, _done: None
        return
    with Progress(console=session.err, transient=True) as bar:
        task = bar.add_task(command, total=total)

        def advance(item: admin.BulkItem, done: int) -> None:
            bar.update(task, completed=done, description=f"{command} {item.saga_id[:8]}")

        yield advance


# -- rendering ------------------------------------------------------------------------------

_STYLES = {
    admin.Outcome.DONE: "green",
    admin.Outcome.WAITING: "yellow",
    admin.Outcome.REFUSED: "red",
    admin.Outcome.FAILED: "red",
}


def render_bulk(session: Session, report: admin.BulkReport, selection: admin.Selection) -> None:
    """The dry run's targets and what would be done; or a line per saga and a summary."""
    if report.dry_run:
        _render_plan(session, report, selection)
        return
    for item in report.items:
        status = f" -> {item.status.value}" if item.status else ""
        reason = f": {item.reason}" if item.reason else ""
        line = f"{item.outcome.value:<8} {item.saga_id} ({item.name}){status}{reason}"
        session.say(Text(line, style=_STYLES.get(item.outcome, "")))
    counts = ", ".join(
        f"{report.count(outcome)} {outcome.value}"
        for outcome in (admin.Outcome.WAITING, admin.Outcome.REFUSED, admin.Outcome.FAILED)
    )
    done = report.count(admin.Outcome.DONE)
    session.say(f"{report.action}: {done} of {len(report.items)} done ({counts})")
    if report.stopped is not None:
        session.say(
            f"stopped before the end: {report.stopped}; the sagas after it were not "
            "touched: run the command again",
            style="red",
        )


def _render_plan(session: Session, report: admin.BulkReport, selection: admin.Selection) -> None:
    count = len(report.items)
    session.say(f"would {report.action} {count} saga(s) ({selection.describe()}), newest first:")
    rows = [
        [item.saga_id, item.name, item.key or "-", item.was.value, item.step or "-"]
        for item in report.items
    ]
    session.table(["ID", "NAME", "KEY", "STATUS", "STEP"], rows, whole=(0,))
    session.say(f"dry run: nothing was done; add --yes to {report.action} them")
