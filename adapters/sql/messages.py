"""What the SQL adapters say about a database: its URL, password hidden, and the
first line of a driver's error (the rest is the driver's traceback of the query)."""

from __future__ import annotations

from saga._internal._secrets import masked as masked  # every credential form, in one place


def first_line(error: BaseException) -> str:
    """The first line of a driver error's message (SQLAlchemy's wrapped one unwrapped),
    or its type name when it has none."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__
