"""What the SQL adapters say about a database: its URL, password hidden, and the
first line of a driver's error (the rest is the driver's traceback of the query)."""

from __future__ import annotations

from sqlalchemy.engine import make_url


def masked(url: str) -> str:
    """The URL with its password hidden, fit for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL must still never leak
        return "<unparsable database URL>"


def first_line(error: BaseException) -> str:
    """The first line of a driver error's message (SQLAlchemy's wrapped one unwrapped),
    or its type name when it has none."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__
