"""saga's own option in a database URL that bounds its connections in a process.

Apart from :mod:`.postgres`, so that the SQLite dialect can refuse the option without
importing psycopg.
"""

from __future__ import annotations

from sqlalchemy.engine import make_url

from saga._internal.errors import ConfigurationError

POOL_OPTION = "pool_size"
"""The URL query option that bounds saga's connections in one process (read by saga,
not passed on): each of its pools (the store's, the hot path's, the asyncio pool of
each event loop) opens at most that many, with no overflow. Unset: see
:data:`.postgres.KEPT_CONNECTIONS`."""


def pool_option(url: str) -> tuple[str, int | None]:
    """``url`` without saga's ``pool_size`` option, and its value (None: not given)."""
    parsed = make_url(url)
    raw = parsed.query.get(POOL_OPTION)
    if raw is None:
        return url, None
    value = raw if isinstance(raw, str) else raw[-1]
    if not (value.isascii() and value.isdigit() and int(value) >= 1):
        raise ConfigurationError(
            f"{POOL_OPTION}={value!r} in the database URL: use a whole number of at least 1, "
            "the most connections each of saga's pools in a process may open"
        )
    stripped = parsed.difference_update_query([POOL_OPTION])
    return stripped.render_as_string(hide_password=False), int(value)
