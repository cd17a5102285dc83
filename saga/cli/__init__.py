"""The ``saga`` admin command: parse the arguments, call one function of
:mod:`saga.admin`, render what it returns.

Output is a rich table with colours on a terminal and aligned plain text
otherwise; ``--json`` prints the documented JSON shapes (docs/operating.md).
Errors are one line on stderr (a traceback only with ``--debug``), and the
exit code says what happened: 0 done, 1 the operation failed or was refused,
2 the command line or its target was wrong (usage, unknown or malformed id,
unknown status, bad URL, unreachable database).

The modules behind this one::

    options         the typer apps and the shared options (--db, --app, --debug, --json, ID)
    session         one invocation: its coordinator, output, errors and exit codes
    render          tables and plain text for what the admin functions return
    commands_read   list, show, history, diff
    commands_ops    recover and the operator actions (compensate, resume, cancel, ...)
    command_worker  worker: the recovery loop, its log, metrics and signals
    command_purge   purge: delete finished sagas
    command_demo    demo: three orders through a real saga
    commands_db     db status, upgrade, downgrade: the schema's revision
    command_web     web: the web console (saga.web) served by uvicorn
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

# Imported for their @app.command registrations; `saga --help` lists the
# commands in the order they are registered, so the reads come first.
# isort: off
from saga.cli import commands_read  # noqa: F401
from saga.cli import commands_ops  # noqa: F401
from saga.cli import command_worker  # noqa: F401
from saga.cli import command_purge  # noqa: F401
from saga.cli import command_demo  # noqa: F401
from saga.cli import commands_db  # noqa: F401
from saga.cli import command_web  # noqa: F401

# isort: on
from saga.cli.options import app
from saga.cli.session import BAD_INPUT, FAILED, OK, printable

__all__ = ["app", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """The ``saga`` console script: typer in non-standalone mode, so that usage
    errors are one line too."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="saga", standalone_mode=False)
    except typer.TyperException as error:  # typer's usage errors (bad option, missing argument)
        sys.stderr.write(f"saga: error: {printable(_usage_line(error))}\n")
        code = getattr(error, "exit_code", BAD_INPUT)
    except typer.Abort:
        sys.stderr.write("saga: aborted\n")
        code = FAILED
    except KeyboardInterrupt:
        code = 130
    sys.exit(code if isinstance(code, int) else OK)


def _usage_line(error: typer.TyperException) -> str:
    ctx = getattr(error, "ctx", None)
    path = getattr(ctx, "command_path", "saga")
    message = " ".join(error.format_message().split())
    return f"{message} (see `{path} --help`)"
