"""``saga demo``: three orders through a real saga, told step by step."""

from __future__ import annotations

import typer

from saga.cli.options import DemoDbUrl, app
from saga.cli.session import FAILED, OK, reporting, session_of


@app.command("demo")
def demo_command(ctx: typer.Context, db: DemoDbUrl = None) -> None:
    """Run three orders through a real saga and tell what happened, step by step."""
    from saga._internal import demo

    session = session_of(ctx)
    with reporting(session):
        ok = demo.run(db or session.url, session.out)
    raise typer.Exit(OK if ok else FAILED)
