"""The ``saga`` typer apps and the options every command shares, each defined
once: ``--db``, ``--app``, ``--debug``, ``--json`` and a saga ``ID``; and
:func:`naming_command`, for the commands that act on one saga named by ``ID``
or ``--key``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from saga import admin
from saga.cli.session import BAD_INPUT, Session, named, session_of

app = typer.Typer(
    name="saga",
    help="Inspect, recover and operate durable sagas.",
    add_completion=False,
    pretty_exceptions_enable=False,
    invoke_without_command=True,
    rich_markup_mode=None,  # plain help: no "<bool>" beside every flag
)
db_app = typer.Typer(
    help="Create, migrate and check the schema.",
    invoke_without_command=True,
    rich_markup_mode=None,
)
app.add_typer(db_app, name="db")

DbUrl = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (default: $SAGA_DATABASE_URL, else sqlite:///saga.db).",
        show_default=False,
        metavar="URL",
    ),
]
DemoDbUrl = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: as the global --db).", metavar="URL"),
]
"""``saga demo --db URL`` as well as ``saga --db URL demo``."""
Apps = Annotated[
    list[str] | None,
    typer.Option(
        "--app",
        help="Import this module (repeatable) so its sagas and compensations are known; "
        "MODULE:FUNCTION calls the application's factory for the coordinator to use.",
        show_default=False,
        metavar="MODULE",
        envvar="SAGA_APP",
    ),
]
DebugFlag = Annotated[bool, typer.Option("--debug", help="Show tracebacks.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (see docs/operating.md).")]
WideFlag = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Whole saga ids even on a terminal too narrow for them "
        "(piped output and --json always have them).",
    ),
]
SagaId = Annotated[
    str,
    typer.Argument(
        metavar="ID",
        help="A saga id as `saga list` shows it, or its first characters (at least 4).",
        show_default=False,
    ),
]
MaybeSagaId = Annotated[
    str | None,
    typer.Argument(
        metavar="[ID]",
        help="A saga id as `saga list` shows it, or its first characters (at least 4); "
        "or name it with --key.",
        show_default=False,
    ),
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        help="Name the saga by its key instead of its ID.",
        show_default=False,
        metavar="KEY",
    ),
]
NameOption = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="With --key: the saga definition's name, when several use the key.",
        show_default=False,
        metavar="NAME",
    ),
]

StatusFilter = Annotated[
    list[str] | None,
    typer.Option(
        "--status",
        "-s",
        help="running, compensating, paused, completed, compensated, "
        "failed or cancelled; repeat or comma-separate.",
        show_default=False,
        metavar="STATUS",
    ),
]
NameFilter = Annotated[
    str | None, typer.Option("--name", "-n", help="Only this saga name.", metavar="NAME")
]
KeyFilter = Annotated[
    str | None, typer.Option("--key", help="Only sagas with this key.", metavar="KEY")
]
StuckFlag = Annotated[
    bool, typer.Option("--stuck", help="Running or compensating with an expired lease.")
]
KeyPrefixFilter = Annotated[
    str | None,
    typer.Option(
        "--key-prefix", help="Only sagas whose key starts with this (exactly).", metavar="TEXT"
    ),
]
StepFilter = Annotated[
    str | None,
    typer.Option("--step", help="Only sagas whose current step is this one.", metavar="STEP"),
]
AgeFilter = Annotated[
    str | None,
    typer.Option("--older-than", help="Created longer ago than this (10m, 2d).", metavar="AGE"),
]
NamedHandler = Callable[[typer.Context, bool, admin.SagaRef], None]
"""A command's body, given the ``--json`` flag and the saga its arguments name."""


def naming_command(command: str) -> Callable[[NamedHandler], NamedHandler]:
    """Register ``saga COMMAND [ID] [--key K [--name N]] [--json]``, with the handler's
    docstring as its help. The handler gets the saga the arguments name, checked before
    the database is opened (bad input changes nothing and touches nothing)."""

    def register(handler: NamedHandler) -> NamedHandler:
        # Not functools.wraps: typer would read the handler's signature through
        # __wrapped__, and these options are the command's parameters.
        def parsed(
            ctx: typer.Context,
            saga_id: MaybeSagaId = None,
            key: KeyOption = None,
            name: NameOption = None,
            json_output: JsonFlag = False,
        ) -> None:
            handler(ctx, json_output, named(ctx, json_output, saga_id, key, name))

        parsed.__doc__ = handler.__doc__
        app.command(command)(parsed)
        return handler

    return register


def _print_version(asked: bool) -> None:
    if asked:
        from saga import __version__

        typer.echo(f"saga {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    db: DbUrl = None,
    apps: Apps = None,
    debug: DebugFlag = False,
    json_output: JsonFlag = False,
    version: Annotated[  # noqa: ARG001 - its callback prints it
        bool,
        typer.Option(
            "--version",
            help="Print saga's version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Inspect, recover and operate durable sagas."""
    session = Session(db, list(apps or ()), debug, json_output)
    ctx.obj = session
    ctx.call_on_close(session.close)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


@db_app.callback()
def db_options(ctx: typer.Context) -> None:
    """Create, migrate and check the schema."""
    session_of(ctx).creates = True  # the commands that make and migrate the tables
    if ctx.invoked_subcommand is None:  # `saga db` alone is a usage error, exit 2
        typer.echo(ctx.get_usage(), err=True)
        typer.echo(
            "saga: error: missing command: status, upgrade, downgrade or check "
            "(see `saga db --help`)",
            err=True,
        )
        raise typer.Exit(BAD_INPUT)
