"""saga's own options in a database URL that bound its connections in a process.

Apart from :mod:`.postgres`, so that the SQLite dialect can refuse them without
importing psycopg.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from sqlalchemy.engine import URL, make_url

from saga._internal.errors import ConfigurationError

POOL_OPTION = "pool_size"
"""The URL query option that bounds saga's connections in one process (read by saga,
not passed on): each of its pools (the store's, the hot path's, the asyncio pool of
each event loop) opens at most that many, with no overflow. Unset: see
:data:`.postgres.KEPT_CONNECTIONS`."""

WAIT_OPTION = "pool_wait"
"""The URL query option saying how many seconds a thread or task waits for a free
connection of a full pool before it is told ``StorageUnavailableError`` (default
:data:`DEFAULT_WAIT`; 0: it does not wait)."""

OPTIONS = (POOL_OPTION, WAIT_OPTION)

DEFAULT_WAIT = 30.0
"""Seconds a thread or task waits for a free connection, unless ``pool_wait`` says."""


class PoolOptions(NamedTuple):
    """What the URL said: None where it said nothing."""

    size: int | None = None
    wait: float | None = None


def pool_options(url: str) -> tuple[str, PoolOptions]:
    """``url`` without saga's pool options, and their values."""
    parsed = make_url(url)
    if not any(option in parsed.query for option in OPTIONS):
        return url, PoolOptions()
    options = PoolOptions(_size(_last(parsed, POOL_OPTION)), _wait(_last(parsed, WAIT_OPTION)))
    stripped = parsed.difference_update_query(OPTIONS)
    return stripped.render_as_string(hide_password=False), options


def _last(parsed: URL, option: str) -> str | None:
    raw = parsed.query.get(option)
    return raw if raw is None or isinstance(raw, str) else raw[-1]


def _size(value: str | None) -> int | None:
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and int(value) >= 1):
        raise ConfigurationError(
            f"{POOL_OPTION}={value!r} in the database URL: use a whole number of at least 1, "
            "the most connections each of saga's pools in a process may open"
        )
    return int(value)


def _wait(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigurationError(
            f"{WAIT_OPTION}={value!r} in the database URL: use a number of seconds (0 or more), "
            "how long a thread waits for a free connection of a full pool"
        )
    return seconds
