"""``saga db status``, ``saga db upgrade [--sql]`` and ``saga db downgrade REV``."""

from __future__ import annotations

from typing import Annotated

import typer

from saga import admin
from saga.cli.options import JsonFlag, db_app
from saga.cli.session import FAILED, Session, reporting, respond, session_of

SqlFlag = Annotated[
    bool,
    typer.Option("--sql", help="Print the SQL the upgrade would run, for a DBA; change nothing."),
]
Revision = Annotated[
    str,
    typer.Argument(metavar="REV", help="The revision to go back to (see `saga db status`)."),
]


@db_app.command("status")
def db_status_command(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """The schema's revision, this release's, and what is pending; exit 1 unless current."""
    status = respond(ctx, json_output, admin.schema_status, render_status)
    if not status.up_to_date:
        raise typer.Exit(FAILED)


@db_app.command("upgrade")
def db_upgrade_command(
    ctx: typer.Context, sql: SqlFlag = False, json_output: JsonFlag = False
) -> None:
    """Create saga's tables, or migrate them to this release's revision."""
    if not sql:
        respond(ctx, json_output, admin.upgrade_schema, render_change)
        return
    session = session_of(ctx)
    with reporting(session):
        script = admin.upgrade_sql(session.coordinator())
        # Plain text, never wrapped or styled: it is meant for psql / sqlite3.
        typer.echo(script.rstrip() if script else "-- nothing to do: the schema is current")


@db_app.command("downgrade")
def db_downgrade_command(
    ctx: typer.Context, revision: Revision, json_output: JsonFlag = False
) -> None:
    """Reverse the migrations after REV, where they can be reversed."""
    respond(ctx, json_output, lambda c: admin.downgrade_schema(c, revision), render_change)


def render_status(session: Session, status: admin.SchemaStatus) -> None:
    url = status.url
    if status.verdict == "empty":
        session.say(f"{url}: no saga tables yet (revision {status.head} needed)")
    elif status.verdict == "current":
        session.say(f"{url}: revision {status.revision}, up to date")
    elif status.verdict == "ahead":
        session.say(
            f"{url}: revision {status.revision} is from a newer release of saga than this one "
            f"(it knows up to {status.head}); upgrade saga here, do not downgrade the database"
        )
    elif status.verdict == "unknown":
        session.say(f"{url}: tables named like saga's, but no schema version saga recorded")
    else:
        at = f"revision {status.revision}"
        if status.legacy is not None:
            at = f"version {status.legacy} of a release before migrations ({at})"
        session.say(f"{url}: {at}, this release needs {status.head}")
    if status.pending:
        session.say("pending: " + ", ".join(status.pending) + "; run `saga db upgrade`")


def render_change(session: Session, change: admin.SchemaChange) -> None:
    if not change.applied:
        session.say(f"{change.url}: revision {change.revision}, nothing to do")
        return
    verb = "applied" if change.direction == "upgrade" else "reversed"
    session.say(
        f"{change.url}: {verb} {', '.join(change.applied)}; now at revision {change.revision}"
    )


@db_app.command("check")
def db_check_command(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Unfinished sagas by name and version, and which have no matching definition
    (pass the release's modules with --app); exit 1 if any."""
    check = respond(ctx, json_output, admin.check_versions, render_versions)
    if not check.ok:
        raise typer.Exit(FAILED)


def render_versions(session: Session, check: admin.VersionCheck) -> None:
    if not check.versions:
        session.say(f"{check.url}: no unfinished declarative sagas")
        return
    rows = [
        [v.name, str(v.version), v.fingerprint or "-", str(v.instances), _state(v)]
        for v in check.versions
    ]
    session.table(["NAME", "VERSION", "FINGERPRINT", "UNFINISHED", "DEFINITION"], rows)
    if not check.ok:
        session.say(
            "some unfinished sagas have no matching definition here: keep (or restore) "
            "those versions' code until they finish (docs/upgrading.md)"
        )


def _state(version: admin.VersionInUse) -> str:
    if version.state == "missing":
        return "missing: no such version here"
    if version.state == "changed":
        return f"changed in place (here: {version.registered})"
    return "ok"
