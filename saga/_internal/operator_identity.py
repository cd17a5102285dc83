"""Who an operator's action is recorded as: the OS user and host, and what an
``operator_source`` block adds (the web console acts for someone else).

Kept out of the engine's reach: the drivers answer the engine's ``WhoAsks`` effect
with :func:`operator_detail`, so that no flow reads the OS user or host itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import getpass
import socket
import types
from collections.abc import Iterator, Mapping

_NO_SOURCE: Mapping[str, str] = types.MappingProxyType({})
_SOURCE: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "saga_operator_source", default=_NO_SOURCE
)


@contextlib.contextmanager
def operator_source(**detail: str) -> Iterator[None]:
    """Record ``detail`` in every operator event written inside the block.

    The web console acts for someone other than the user running its process:
    ``operator_source(source="web", by="ann", reason="...")`` makes the events
    say so. Keys given here win over the defaults (``by``, ``host``).
    """
    token = _SOURCE.set({**_SOURCE.get(), **detail})
    try:
        yield
    finally:
        _SOURCE.reset(token)


def operator_detail() -> dict[str, str]:
    """Who did it, for operator events: the user and host, and where the action came
    from when an ``operator_source`` block says (the CLI records no source)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return {"by": user, "host": socket.gethostname(), **_SOURCE.get()}
