"""HTML written by hand, with every stored value escaped on the way in.

Pages are built from f-strings; nothing from the database reaches them except
through :func:`text` (or :func:`attr`, :func:`short` and :func:`json_block`, which
call it), or, in a link, through :func:`path`. ``text`` does two
things: it writes control and invisible formatting characters as visible
escapes, as the CLI does (``printable``), and it HTML-escapes the result, quotes
included, so that a value is inert in element content and in attribute values
alike.
"""

from __future__ import annotations

import contextvars
import html
import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from saga._internal.codec import as_json_value
from saga._internal.wording import printable

ROOT: contextvars.ContextVar[str] = contextvars.ContextVar("saga_web_root", default="")
"""Where the console is mounted (the ASGI ``root_path``), set per request.

Links in pages are relative to a ``<base>`` of this path, so the same pages
work served at ``/`` by ``saga web`` and mounted under a prefix in another app.
"""

FOLD_AT = 400
"""Characters of pretty-printed JSON shown before the rest is folded away."""


def text(value: object) -> str:
    """``value`` as HTML text: controls made visible, markup characters escaped."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)  # nothing to escape in a number (the history has thousands)
    return html.escape(printable(str(value)), quote=True)


def attr(value: object) -> str:
    """``value`` for an attribute (``None`` becomes the empty string)."""
    return "" if value is None else text(value)


def path(*segments: str) -> str:
    """A relative link to ``segments`` (``path("saga", id)``): each URL-quoted whole, so
    that a stored value never adds a segment, a query or a scheme, then escaped for an
    attribute. Every link to a stored value is built here, never by an f-string."""
    return html.escape("/".join(quote(segment, safe="") for segment in segments), quote=True)


def short(saga_id: str) -> str:
    """A saga id's first characters as HTML text (ids are forged as easily as names)."""
    return text(saga_id[:8])


def query(params: Mapping[str, str | Iterable[str] | None]) -> str:
    """A query string from ``params`` (empty values left out), escaped for an href."""
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        values = [value] if isinstance(value, str) or value is None else list(value)
        pairs += [(name, v) for v in values if v]
    return html.escape(urlencode(pairs), quote=True)


def lines(value: str) -> str:
    """Multi-line text for a ``<pre>``: each line escaped as :func:`text` does, the line
    breaks themselves kept."""
    return "\n".join(text(line) for line in value.split("\n"))


def json_block(value: Any, *, fold_at: int = FOLD_AT) -> str:
    """``value`` pretty-printed; a long one shows its start and folds the rest."""
    if value is None:
        return '<span class="none">-</span>'
    shown = json.dumps(as_json_value(value), indent=2, ensure_ascii=False, sort_keys=True)
    if len(shown) <= fold_at:
        return f'<pre class="json">{lines(shown)}</pre>'
    return (
        f'<details class="folded"><summary><pre class="json">{lines(shown[:fold_at])}…</pre>'
        f"<span>show all {len(shown)} characters</span></summary>"
        f'<pre class="json">{lines(shown)}</pre></details>'
    )


def table(headers: Iterable[str], rows: Iterable[str], css: str = "") -> str:
    """A table; ``rows`` are ready-made ``<tr>`` elements, headers are fixed words."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    return (
        f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def page(title: str, body: str, *, refresh: int | None = None) -> str:
    """A whole document; ``title`` must already be escaped. ``refresh`` reloads it."""
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">{meta}
<base href="{attr(ROOT.get())}/">
<title>{title} · saga</title><style>{STYLE}</style></head>
<body><header class="top"><a href="./">saga</a> <span>{title}</span></header>
<main>{body}</main></body></html>"""


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header.top{background:#1d2330;color:#fff;padding:8px 16px}header.top a{color:#fff;font-weight:700}
main{padding:12px 16px}a{color:#1a5fb4}table{border-collapse:collapse;background:#fff;width:100%}
th,td{padding:4px 8px;border-bottom:1px solid #e3e5ea;text-align:left;vertical-align:top}
th{background:#eceef2;font-weight:600}tr.stuck td{background:#fff4d6}
tr.failed td{background:#fde2e1}
.badge{display:inline-block;padding:0 6px;border-radius:8px;background:#e3e5ea;font-size:12px}
.badge.failed,.badge.stuck{background:#c01c28;color:#fff}.badge.compensated{background:#e5a50a}
.badge.completed{background:#2ec27e;color:#fff}.badge.running,.badge.compensating{background:#62a0ea}
.badge.cancelled{background:#9a9996;color:#fff}.badge.in_doubt{background:#c01c28;color:#fff}
.badge.paused{background:#813d9c;color:#fff}
form.filters{display:flex;gap:8px;flex-wrap:wrap;align-items:end;margin:8px 0}
form.filters label{display:flex;flex-direction:column;font-size:12px}
.counts a{margin-right:12px}.error{background:#fde2e1;border:1px solid #c01c28;padding:8px}
.notice{background:#e0f0e3;border:1px solid #2ec27e;padding:8px}
dl.header{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:2px 12px}
dl.header dt{color:#5e6470}dl.header dd{margin:0}pre.json{margin:0;white-space:pre-wrap}
details.step{background:#fff;border:1px solid #e3e5ea;margin:4px 0;padding:4px 8px}
details.folded summary pre{display:inline}svg.timeline{background:#fff;border:1px solid #e3e5ea}
.bar.ok{fill:#2ec27e}.bar.failed{fill:#c01c28}.bar.running{fill:#62a0ea}
.bar.comp.ok{fill:#e5a50a}.bar.comp.failed{fill:#a51d2d}.gap{stroke:#9a9996;stroke-dasharray:3 3}
.turn{stroke:#c01c28;stroke-width:2}.unknown{fill:#fff;stroke:#c01c28;stroke-width:2}
.lane-label{font-size:11px;fill:#5e6470}.bar-label{font-size:11px;fill:#fff}
.actions form{display:inline}.retry-wait{color:#9c5d00}
svg.timeline{max-width:100%;height:auto}.row-label{font-size:12px;fill:#1d2330}
.bar-label.beside{fill:#1d2330}.bar.unknown{stroke-dasharray:5 3}
"""
