"""``saga web``: serve the web console (``saga.web``) with uvicorn."""

from __future__ import annotations

import errno
import socket
from typing import TYPE_CHECKING, Annotated

import typer

from saga._internal.errors import ConfigurationError
from saga.cli.options import app
from saga.cli.session import Session, masked_url, reporting, session_of

if TYPE_CHECKING:
    from starlette.applications import Starlette


@app.command("web")
def web_command(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on.", metavar="ADDRESS")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.", metavar="PORT")] = 8080,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="SAGA_WEB_TOKEN",
            help="Required on any address but loopback; every request must then carry it.",
            show_default=False,
            metavar="TOKEN",
        ),
    ] = None,
    allow_actions: Annotated[
        bool,
        typer.Option("--allow-actions", help="Offer the operator actions (read-only otherwise)."),
    ] = False,
) -> None:
    """Serve a web console: the list of sagas, a timeline per saga, diffs (needs saga[web])."""
    session = session_of(ctx)
    with reporting(session):
        console = _console(session, host, port, token, allow_actions)
        _check_free(host, port)
        import uvicorn

        url = masked_url(session.coordinator().store.url)
        mode = "actions allowed" if allow_actions else "read-only"
        session.err.print(
            f"saga web: http://{host}:{port}/ on {url} ({mode}); Ctrl-C stops it", markup=False
        )
        uvicorn.run(console, host=host, port=port, log_level="warning", access_log=False)


def _console(
    session: Session, host: str, port: int, token: str | None, allow_actions: bool
) -> Starlette:
    from saga.web.security import is_loopback

    if not is_loopback(host) and not token:
        raise ConfigurationError(
            f"--host {host} is reachable from other machines: give --token (or $SAGA_WEB_TOKEN) "
            "so that every request must carry it"
        )
    if token is not None and len(token) < 16:
        raise ConfigurationError(
            "--token must be at least 16 characters (e.g. from `openssl rand -hex 16`)"
        )
    if not 0 < port < 65536:
        raise ConfigurationError(f"--port {port} is not a port number (1-65535)")
    try:
        from saga.web import app as web_app
    except ImportError as error:
        raise ConfigurationError(
            f"saga web needs the web extra ({error.name} is missing): pip install 'saga[web]'"
        ) from None
    return web_app(
        session.coordinator(), allow_actions=allow_actions, token=token or None, host=host
    )


def _check_free(host: str, port: int) -> None:
    """Fail with one line, before anything is printed, if the address cannot be bound."""
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        ):
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
                probe.bind(address)
    except OSError as error:
        raise ConfigurationError(
            f"cannot listen on {host}:{port}: {error.strerror or error}; {_mend(error)}"
        ) from None


def _mend(error: OSError) -> str:
    """What to change: the host when it names no address of this machine, else the port
    (taken by another process, or one this user may not bind)."""
    if isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL:
        return "check --host (an address of this machine, or 0.0.0.0 for all)"
    return "choose another --port"
