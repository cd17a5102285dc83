"""One invocation of ``saga``: its coordinator, its output, and how an error
becomes one line on stderr and an exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import traceback
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from saga import admin
from saga._internal import _secrets
from saga._internal.coordinator import Coordinator

# Re-exported: the CLI's names for them (the web console imports them from saga.explanation).
from saga._internal.explanation import BAD_INPUT as BAD_INPUT
from saga._internal.explanation import FAILED as FAILED
from saga._internal.explanation import OK as OK
from saga._internal.explanation import explain as explain
from saga._internal.explanation import scrub as scrub
from saga._internal.wording import printable as printable  # re-exported: the CLI's name for it
from saga._internal.wording import unsafe


@dataclasses.dataclass
class Session:
    """What the global options set up, shared by every command of one invocation."""

    url: str | None
    apps: list[str]
    debug: bool
    json: bool
    lease_ttl: float | None = None  # None: $SAGA_LEASE_TTL, else 30 s (or the factory's)
    creates: bool = False  # set by the commands that may create the tables (db, worker)
    out: Console = dataclasses.field(default_factory=lambda: _console(stderr=False))
    err: Console = dataclasses.field(default_factory=lambda: _console(stderr=True))
    _coordinator: Coordinator | None = None
    _opened: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)

    def coordinator(self) -> Coordinator:
        """Opened on first use, so that `--help` and the demo never touch the database:
        the application's own when ``--app`` names its factory (``MODULE:FUNCTION``)."""
        if self._coordinator is None:
            self._coordinator = self._opened.enter_context(
                admin.application(
                    self.url, self.apps, lease_ttl=self.lease_ttl, create_tables=self.creates
                )
            )
        return self._coordinator

    def close(self) -> None:
        """Close the coordinator and run the factory's tear-down, once the command is done.

        A tear-down that fails is one line on stderr, like any error; the exit code stays
        the command's own if it had failed, else it is 1 (docs/application.md).
        """
        self._coordinator = None
        ending = sys.exc_info()[1]  # the command's typer.Exit, when it ends with a code
        try:
            with reporting(self):
                self._opened.close()  # the coordinator, and the factory's own tear-down
        except typer.Exit as failed:
            raise typer.Exit(getattr(ending, "exit_code", 0) or failed.exit_code) from None

    def wants_json(self, flag: bool) -> bool:
        return flag or self.json

    def emit_json(self, payload: Any) -> None:
        typer.echo(json_text(payload))

    def say(self, text: str | Text = "", style: str | None = None) -> None:
        self.out.print(_safe(text), style=style, markup=False)

    def table(
        self,
        headers: Sequence[str] | None,
        rows: Sequence[Sequence[str | Text]],
        whole: Collection[int] = (),
    ) -> None:
        """A rich table on a terminal, aligned plain columns elsewhere (no header row: None).

        On a terminal too narrow for every cell, rich wraps cells; the columns in ``whole``
        are never wrapped (a saga id cut in two names nothing one can paste).
        """
        if not rows and not headers:
            return
        cells = [[_safe(cell) for cell in row] for row in rows]
        if self.out.is_terminal:
            self.out.print(_rich_table(headers, cells, whole))
            return
        for line in plain_columns(headers, cells):
            self.out.print(line, markup=False, highlight=False)

    def fits(self, headers: Sequence[str] | None, rows: Sequence[Sequence[str | Text]]) -> bool:
        """Whether the table prints on one line a row, no cell wrapped: on a terminal, if it
        is wide enough; elsewhere always (plain columns are never cut)."""
        if not self.out.is_terminal or not rows:
            return True
        table = _rich_table(headers, [[_safe(cell) for cell in row] for row in rows])
        unbounded = self.out.options.update_width(sys.maxsize)  # its natural width, not clamped
        return Measurement.get(self.out, unbounded, table).maximum <= self.out.width


def _rich_table(
    headers: Sequence[str] | None, cells: Sequence[Sequence[Text]], whole: Collection[int] = ()
) -> Table:
    columns = headers or [""] * len(cells[0])
    table = Table(
        *columns, box=None, header_style="bold", pad_edge=False, show_header=bool(headers)
    )
    for index in whole:
        table.columns[index].no_wrap = True
    for row in cells:
        table.add_row(*row)
    return table


def _console(*, stderr: bool) -> Console:
    # soft_wrap: plain output is never cut at 80 columns; user text is never markup.
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def _safe(cell: str | Text) -> Text:
    """A cell as rich text that is never markup and holds nothing unsafe (see ``printable``).

    Renderers style a cell as a whole, so the style of a ``Text`` is kept as it is.
    """
    if isinstance(cell, Text):
        return Text(printable(cell.plain), style=cell.style)
    return Text(printable(cell))


def json_text(payload: Any, indent: int | None = 2) -> str:
    """``payload`` as indented JSON with nothing unsafe for a terminal in it.

    ``json.dumps`` escapes C0 controls but leaves DEL, C1 controls, bidi overrides and
    line separators raw; those are written as ``\\uXXXX`` escapes too, which every JSON
    reader turns back into the exact stored text.
    """
    text = json.dumps(payload, indent=indent, ensure_ascii=False)
    # Outside strings JSON holds only ASCII punctuation, digits, spaces and the newlines
    # of the indentation; C0 controls in strings are already escaped by json.dumps.
    return "".join(_json_escaped(c) if c != "\n" and unsafe(c) else c for c in text)


def _json_escaped(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # outside the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def plain_columns(headers: Sequence[str] | None, rows: Sequence[Sequence[str | Text]]) -> list[str]:
    cells = [list(headers)] if headers else []
    cells += [[str(cell) for cell in row] for row in rows]
    if not cells:
        return []
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def session_of(ctx: typer.Context) -> Session:
    session = ctx.find_object(Session)
    assert session is not None, "the app callback sets the session up"
    return session


class Reply(Protocol):
    """What an admin read returns: a record with its documented JSON."""

    def as_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Reply)


def named(
    ctx: typer.Context, json_output: bool, saga_id: str | None, key: str | None, name: str | None
) -> admin.SagaRef:
    """The saga ``ID`` or ``--key K [--name N]`` names, checked before the database is
    opened (bad input changes nothing and touches nothing)."""
    with reporting(session_of(ctx), json_output):
        return admin.target(saga_id, key, name)
    raise AssertionError("unreachable: reporting exits")  # pragma: no cover


def respond(
    ctx: typer.Context,
    json_output: bool,
    call: Callable[[Coordinator], R],
    render: Callable[[Session, R], None],
) -> R:
    """Call one admin function, then print its JSON (``--json``) or render it for reading."""
    session = session_of(ctx)
    with reporting(session, json_output):
        reply = call(session.coordinator())
        if session.wants_json(json_output):
            session.emit_json(reply.as_json())
        else:
            render(session, reply)
    return reply


@contextlib.contextmanager
def reporting(session: Session, json_output: bool = False) -> Iterator[None]:
    """Turn any error into one line on stderr and the right exit code; with ``--json``
    that line is a JSON object: ``{"error": MESSAGE, "exit_code": CODE}``."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except Exception as error:
        code, message = explain(error)
        if session.debug:
            lines = scrub(traceback.format_exc(), session.url).split("\n")
            session.err.print("\n".join(map(printable, lines)), markup=False, end="")
        if session.wants_json(json_output):
            text = " ".join(scrub(message, session.url).split())
            typer.echo(json_text({"error": text, "exit_code": code}, indent=None), err=True)
        else:
            line = " ".join(printable(scrub(message, session.url)).split())
            session.err.print(f"saga: error: {line}", markup=False, style="red")
        raise typer.Exit(code) from None


def shown_url(url: str) -> str:
    """``url`` as a command line may repeat it: as given, or masked if it holds a password
    (which is never printed; a URL in ``$SAGA_DATABASE_URL`` needs no repeating)."""
    return masked_url(url) if _secrets.credentials_in(url) else url


def masked_url(url: str) -> str:
    return _secrets.masked(url)
