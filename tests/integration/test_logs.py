"""Structured logs: every lifecycle event a record that names its saga; JSON lines."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from saga import Coordinator, RetryPolicy, Saga, SagaFailed, StepContext
from saga.logs import JsonFormatter, StepContextFilter, configure
from tests.integration.conftest import MakeCoordinator

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)


class Kept(logging.Handler):
    """Keeps every record it handles, formatted by its formatter as ``lines``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.lines.append(self.format(record))


@pytest.fixture
def kept() -> Iterator[Kept]:
    """A handler on the ``saga`` loggers and the application's ``shop`` logger, at DEBUG."""
    handler = Kept()
    handler.addFilter(StepContextFilter())
    loggers = [logging.getLogger("saga"), logging.getLogger("shop")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield handler
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def _payment_saga(name: str) -> Saga:
    saga = Saga(name)

    @saga.step(retry=FAST_RETRY)
    def charge(ctx: StepContext) -> str:
        logging.getLogger("shop").info("charging card for %s", ctx.data)
        if ctx.attempt == 1:
            raise ConnectionError("card network reset")
        return "c"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        logging.getLogger("shop").info("refunding")

    @saga.step()
    def ship(ctx: StepContext) -> None:
        raise ValueError("no courier")

    return saga


def _saga_records(kept: Kept, saga_id: str) -> list[logging.LogRecord]:
    return [r for r in kept.records if getattr(r, "saga_id", None) == saga_id]


def test_every_event_is_a_record_at_its_level_naming_the_saga(
    make_coord: MakeCoordinator, kept: Kept
) -> None:
    coord = make_coord()
    with pytest.raises(SagaFailed) as failed:
        coord.run(_payment_saga("log-levels"), data="order 7", key="o-7")
    saga_id = failed.value.saga_id
    short = saga_id[:8]
    engine = [r for r in _saga_records(kept, saga_id) if r.name == "saga.engine"]
    # One record an event: the history's, and the retry this process decided on.
    assert (
        [r.event for r in engine]
        == [  # type: ignore[attr-defined]
            *[e.kind for e in coord.history(saga_id)][:2],
            "retry_scheduled",
            *[e.kind for e in coord.history(saga_id)][2:],
        ]
    )
    for record in engine:
        assert short in record.getMessage()
        assert record.saga_short_id == short  # type: ignore[attr-defined]
        assert record.saga_name == "log-levels"  # type: ignore[attr-defined]
        assert record.saga_key == "o-7"  # type: ignore[attr-defined]
    level = {r.event: r.levelname for r in engine}  # type: ignore[attr-defined]
    assert level["step_started"] == "DEBUG"
    assert level["retry_scheduled"] == "WARNING"
    assert level["step_failed"] == "INFO"
    assert level["saga_compensated"] == "INFO"
    retry = next(r for r in engine if r.event == "retry_scheduled")  # type: ignore[attr-defined]
    assert re.fullmatch(
        f"saga {short} log-levels: step charge attempt 1 failed: "
        r"ConnectionError: card network reset; retrying in 0\.01s \(took \d+\.\d{3}s\)",
        retry.getMessage(),
    )
    assert (retry.step, retry.attempt, retry.error_type) == ("charge", 1, "ConnectionError")  # type: ignore[attr-defined]
    # The application's own records inside the step carry the saga too.
    shop = [r for r in kept.records if r.name == "shop"]
    assert [(r.getMessage(), r.saga_id, r.step, r.attempt) for r in shop] == [  # type: ignore[attr-defined]
        ("charging card for order 7", saga_id, "charge", 1),
        ("charging card for order 7", saga_id, "charge", 2),
        ("refunding", saga_id, "charge", 1),
    ]
    # Nothing of the input or results is logged.
    assert not [r for r in engine if "order 7" in r.getMessage()]


def test_two_sagas_at_once_never_mix_their_records(make_coord: MakeCoordinator, kept: Kept) -> None:
    coord = make_coord()
    saga = _payment_saga("log-two")
    failures: list[SagaFailed] = []

    def run(order: str) -> None:
        try:
            coord.run(saga, data=order)
        except SagaFailed as failure:
            failures.append(failure)

    threads = [threading.Thread(target=run, args=(f"order {n}",)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(failures) == 2
    for failure in failures:
        mine = _saga_records(kept, failure.saga_id)
        assert mine
        assert all(failure.saga_id[:8] in r.getMessage() for r in mine if r.name == "saga.engine")
        orders = {r.getMessage() for r in mine if r.name == "shop" and "charging" in r.getMessage()}
        assert len(orders) == 1  # each saga's step records name only its own order


def test_json_lines_parse_and_carry_the_saga_fields(
    make_coord: MakeCoordinator, kept: Kept
) -> None:
    kept.setFormatter(JsonFormatter())
    coord = make_coord()
    with pytest.raises(SagaFailed) as failed:
        coord.run(_payment_saga("log-json"))
    lines = [json.loads(line) for line in kept.lines]
    mine = [line for line in lines if line.get("saga_id") == failed.value.saga_id]
    assert {line["logger"] for line in mine} == {"saga.engine", "shop"}
    first = next(line for line in mine if line.get("event") == "saga_started")
    assert first["level"] == "DEBUG"
    assert first["time"].endswith("Z")
    assert first["saga_short_id"] == failed.value.saga_id[:8]
    assert first["status"] == "running"
    assert all("\n" not in line for line in kept.lines)


def test_configure_writes_a_rotated_json_file(tmp_path: Path, make_coord: MakeCoordinator) -> None:
    path = tmp_path / "saga.log"
    handler = configure(log_format="json", log_file=str(path), level=logging.DEBUG, max_bytes=2000)
    try:
        coord = make_coord()
        for n in range(3):
            with pytest.raises(SagaFailed):
                coord.run(_payment_saga("log-file"), data=n)
    finally:
        logging.getLogger("saga").removeHandler(handler)
        logging.getLogger("saga").setLevel(logging.NOTSET)
        handler.close()
    files = sorted(tmp_path.glob("saga.log*"))
    assert len(files) > 1  # rotated past 2000 bytes
    for file in files:
        for line in file.read_text().splitlines():
            assert json.loads(line)["logger"].startswith("saga")


def test_configure_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="log format 'xml': use 'text' or 'json'"):
        configure(log_format="xml")


@pytest.mark.postgres
def test_the_database_password_is_never_logged(pg_url: str, kept: Kept) -> None:
    secret = "s3cret-Pa55"
    url = make_url(pg_url).set(password=secret).render_as_string(hide_password=False)
    with Coordinator(url) as coord:  # trust auth: the password is sent, not needed
        coord.list(limit=1)
    logged = [r.getMessage() for r in kept.records] + [str(r.args) for r in kept.records]
    assert any("saga store" in text for text in logged)  # the URL was logged, masked
    assert not [text for text in logged if secret in text]


def test_stored_text_reaches_a_log_line_escaped(make_coord: MakeCoordinator, kept: Kept) -> None:
    hostile = "evil\x1b[2J\nforged line\u202e"
    saga = Saga(hostile)

    @saga.step()
    def grab(ctx: StepContext) -> None:
        raise ValueError("no\x1b]0;title\x07")

    with pytest.raises(SagaFailed):
        make_coord().run(saga)
    lines = [r.getMessage() for r in kept.records if r.name == "saga.engine"]
    assert lines
    assert not [line for line in lines if "\x1b" in line or "\n" in line or "\u202e" in line]
    assert any("evil\\x1b[2J\\nforged line\\u202e" in line for line in lines)
    assert {r.saga_name for r in kept.records if r.name == "saga.engine"} == {hostile}  # type: ignore[attr-defined]


def test_without_logging_configured_saga_prints_nothing(tmp_path: Path) -> None:
    script = (
        "from saga import Coordinator, Saga\n"
        "s = Saga('quiet')\n"
        "@s.step()\n"
        "def boom(ctx):\n"
        "    raise ValueError('no')\n"
        "try:\n"
        f"    Coordinator('sqlite:///{tmp_path}/q.db').run(s)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert (done.stdout, done.stderr) == ("SagaFailed\n", "")  # no last-resort log lines
