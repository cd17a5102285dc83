"""Credentials are never printed: the one place that knows where a database URL keeps them.

libpq and SQLAlchemy accept a password in several places: the URL's userinfo
(``user:pw@host``), a ``password=`` query parameter (``?password=pw``, its key in
any case or percent-encoded, which SQLAlchemy decodes), a keyword/value connection
string (``host=h password=pw``) and the ``PGPASSWORD`` environment variable.
Every surface that shows a database URL or an error that may echo one (the admin
command's output and errors, the worker's log, the web console) goes through
:func:`masked` or :func:`scrub` here, so that a new form is handled for all of them
at once. ``sslpassword`` (the client key's passphrase) is a secret as well.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote, quote_plus, urlencode

MASK = "***"
_SECRET_KEYS = frozenset({"password", "sslpassword"})
_KEYWORD_VALUE = re.compile(
    r"(?P<key>\b(?:ssl)?password\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE
)
"""A password in a libpq keyword/value string: quoted (backslash escapes) or one word."""


def is_secret_key(key: str) -> bool:
    """Whether a connection parameter named ``key`` holds a secret."""
    return key.strip().lower() in _SECRET_KEYS


def masked(url: str) -> str:
    """``url`` with every credential replaced by ``***``, fit for output and logs; a
    keyword/value string keeps its shape, anything unparsable says only that."""
    from sqlalchemy.engine import make_url  # a dependency, imported when first needed

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - what cannot be parsed must still never leak
        if "://" in url or "=" not in url:
            return "<unparsable database URL>"
        return _KEYWORD_VALUE.sub(lambda match: match["key"] + MASK, url)
    base = parsed.set(query={}).render_as_string(hide_password=True)
    pairs = [
        (key, MASK if is_secret_key(key) else value)
        for key, values in parsed.query.items()
        for value in ((values,) if isinstance(values, str) else values)
    ]
    return f"{base}?{urlencode(pairs, safe='*')}" if pairs else base


def secrets_of(url: str | None) -> list[str]:
    """Every credential ``url`` holds, and ``$PGPASSWORD``'s, as they may be written:
    decoded and percent-encoded. Longest first, so that no part of one is left."""
    found = credentials_in(url) if url else []
    if os.environ.get("PGPASSWORD"):
        found.append(os.environ["PGPASSWORD"])
    forms = {form for secret in found for form in _written(secret)}
    return sorted(forms, key=len, reverse=True)


def scrub(text: str, url: str | None) -> str:
    """``text`` with ``url`` masked and every credential it (or ``$PGPASSWORD``) holds
    replaced by ``***`` wherever it appears: in a driver's error, a traceback, a log line.
    Messages already use :func:`masked`; this is the second line of defence."""
    if url:
        text = text.replace(url, masked(url))
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text


def credentials_in(url: str) -> list[str]:
    """The passwords ``url`` itself holds, decoded (none: it is safe to print as it is)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - a keyword/value string, or nothing we can read
        return [_unquoted(match["value"]) for match in _KEYWORD_VALUE.finditer(url)]
    found = [] if parsed.password is None else [str(parsed.password)]
    for key, values in parsed.query.items():
        if is_secret_key(key):
            found += [values] if isinstance(values, str) else list(values)
    return [secret for secret in found if secret]


def _unquoted(value: str) -> str:
    if value.startswith("'"):
        return re.sub(r"\\(.)", r"\1", value[1:].removesuffix("'"))
    return value


def _written(secret: str) -> set[str]:
    """The ways a URL or a message may spell ``secret``."""
    spellings = (secret, quote(secret, safe=""), quote(secret), quote_plus(secret))
    return {form for form in spellings if form}
