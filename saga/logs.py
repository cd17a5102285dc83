"""Structured logs: every lifecycle event as a log record, a JSON formatter, and a
filter that puts the running step's saga on every record logged inside it.

Loggers: ``saga.engine`` (what sagas do), ``saga.worker`` (the recovery loop),
``saga.store`` (the database), ``saga.listeners`` (a listener that raised),
``saga.cli`` (the admin command). Like any library, saga adds no handler: the
application's logging configuration decides what is shown, or
:func:`configure` sets up a handler (what ``saga worker --log-format`` uses).

Each lifecycle record carries ``saga_id``, ``saga_short_id`` (its first 8
characters), ``saga_name``, ``saga_key``, ``step``, ``attempt``, ``epoch``,
``event``, ``status``, ``duration`` and ``error_type`` as attributes (``extra``),
and its message says the short id, name, step and attempt too, so that
``grep <short id>`` over plain logs finds a saga's whole story. Payloads (inputs
and results) are never logged; a database URL only with its password masked.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
import sys
from typing import Any, TextIO

from saga._internal.context import _current
from saga._internal.errors import ConfigurationError
from saga._internal.event_log import ENGINE, SAGA_FIELDS, LogListener, fields_of, level_of
from saga._internal.wording import printable

__all__ = [
    "ENGINE",
    "SAGA_FIELDS",
    "JsonFormatter",
    "LogListener",
    "StepContextFilter",
    "TextFormatter",
    "configure",
    "fields_of",
    "level_of",
]


class StepContextFilter(logging.Filter):
    """Gives every record the saga fields: those of the step running in this thread or
    task when it was logged (so an application's own records inside a step are joined
    to its saga), else None. Add it to a handler: ``handler.addFilter(...)``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "saga_id", None) is not None:
            return True  # a lifecycle record: it says which saga itself
        context = _current.get()
        values: dict[str, Any] = dict.fromkeys(SAGA_FIELDS)
        if context is not None:
            values.update(
                saga_id=context.saga_id,
                saga_short_id=context.saga_id[:8],
                saga_name=context.saga_name,
                step=context.step,
                attempt=context.attempt,
            )
        for name, value in values.items():
            if not hasattr(record, name) or getattr(record, name) is None:
                setattr(record, name, value)
        return True


_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, every extra attribute (the saga fields among them) and, for an
    exception, ``exception`` (its traceback as text)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` lines whose message has every control character escaped
    (``wording.printable``, as the admin command prints): a saga's name, key, step or
    error is stored text, often a client's, and raw it would forge a log line with a
    newline or drive the reader's terminal. A traceback keeps its lines, each escaped
    and indented, so that no line of it can pass for a record of its own."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        cached = record.exc_text  # another handler's formatter may have cached it raw
        record.exc_text = None
        try:
            return super().format(record)
        finally:
            record.exc_text = cached

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        saved = record.message
        record.message = printable(saved)
        try:
            return super().formatMessage(record)
        finally:
            record.message = saved

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join(f"  {printable(line)}" for line in text.splitlines())


def configure(
    *,
    log_format: str = "text",
    log_file: str | None = None,
    level: int = logging.INFO,
    stream: TextIO | None = None,
    max_bytes: int = 10 * 1024 * 1024,
    backups: int = 5,
) -> logging.Handler:
    """Send the ``saga`` loggers' records to standard error (or ``stream``), or to
    ``log_file`` rotated past ``max_bytes`` (keeping ``backups`` old files), as
    ``"text"`` or ``"json"``; return the handler. For a host without a log collector,
    and for ``saga worker``: an application usually configures logging itself."""
    if log_format not in ("text", "json"):
        raise ConfigurationError(f"log format {log_format!r}: use 'text' or 'json'")
    handler: logging.Handler
    if log_file is not None:
        handler = logging.handlers.RotatingFileHandler(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    else:
        handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(StepContextFilter())
    logger = logging.getLogger("saga")
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler
