"""Stored text never forges or drives the admin command's output.

A saga's name, key, step names, results and errors come from the application
and often from its clients. Through the real ``saga`` script, on SQLite and
PostgreSQL, every human-readable output shows them with control and
formatting characters escaped (``\\n``, ``\\x1b``, ``\\u202e``) and rich
markup printed literally, so that no row is forged and no escape sequence
reaches the terminal; ``--json`` carries the exact text.
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from saga import Coordinator, SagaFailed, SagaStatus
from tests.cli import hostile_steps as hostile
from tests.cli.conftest import expire, one_error_line, run_saga, saga_command
from tests.cli.test_worker_and_demo import _started, _wait_for

APP = "tests.cli.hostile_steps"
SHOWN = r"\x1b[2J\x1b]0;title\x07[red]x[/red]\u202e"
"""``hostile.HOSTILE`` as the command must print it."""
SGR = re.compile(r"\x1b\[[0-9;]*m")
"""The colour codes rich writes itself on a terminal."""


@dataclasses.dataclass(frozen=True)
class Hostile:
    url: str
    completed: str
    compensated: str
    failed: str
    stuck: str


@pytest.fixture
def sagas(db_url: str) -> Iterator[Hostile]:
    coord = Coordinator(db_url, lease_ttl=5.0)
    try:
        completed = coord.run(hostile.EVIL, data={}, key=hostile.KEY).id
        yield Hostile(
            url=db_url,
            completed=completed,
            compensated=_failure(coord, {"fail": True}, "no-1"),
            failed=_failure(coord, {"fail": True, "undo_fails": True}, "f-1"),
            stuck=_crashed(coord),
        )
    finally:
        coord.close()


def _failure(coord: Coordinator, data: dict[str, Any], key: str) -> str:
    with pytest.raises(SagaFailed) as failure:
        coord.run(hostile.EVIL, data=data, key=key)
    return failure.value.saga_id


def _crashed(coord: Coordinator) -> str:
    with pytest.raises(hostile.Crash):
        coord.run(hostile.EVIL, data={"crash": True}, key="s-1")
    record = coord.store.find(hostile.EVIL.name, "s-1")
    assert record is not None
    expire(coord, record.id)
    return record.id


def saga(sagas: Hostile, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_saga("--db", sagas.url, *args, cwd=cwd, env=env)


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` that must not reach a terminal (line ends aside)."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"}]


def clean(result: subprocess.CompletedProcess[str]) -> str:
    """The command's output, checked to hold no raw control or formatting character."""
    assert unsafe(result.stdout) == [], result.stdout
    assert unsafe(result.stderr) == [], result.stderr
    return result.stdout


def test_list_prints_one_row_per_saga_with_the_text_escaped(sagas: Hostile, tmp_path: Path) -> None:
    listed = saga(sagas, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = clean(listed).splitlines()
    assert len(lines) == 1 + 4  # the header and one row a saga: no forged row
    assert not any(line.startswith("fake-row") for line in lines)
    (row,) = [line for line in lines if line.startswith(sagas.completed)]
    assert "evil" + SHOWN in row
    assert r"k\nfake-row  completed" in row


def test_show_history_and_diff_escape_names_results_and_errors(
    sagas: Hostile, tmp_path: Path
) -> None:
    shown = clean(saga(sagas, "show", sagas.failed, cwd=tmp_path))
    assert "grab" + SHOWN in shown
    assert "boom " + SHOWN in shown  # the step's error, and the saga's
    assert "cannot put back " + SHOWN in shown
    completed = clean(saga(sagas, "show", sagas.completed, cwd=tmp_path))
    assert r"key       k\nfake-row  completed" in completed  # aligned under "retry on"
    assert r'{"got":"\u001b[2J' in completed  # the result, as JSON escapes it
    history = clean(saga(sagas, "history", sagas.failed, cwd=tmp_path))
    assert f"step boom{SHOWN} failed: ValueError: boom {SHOWN}" in history
    assert f"grab{SHOWN} failed: RuntimeError: cannot put back {SHOWN}" in history
    diff = clean(saga(sagas, "diff", sagas.completed, sagas.compensated, cwd=tmp_path))
    assert "evil" + SHOWN in diff
    assert "boom" + SHOWN in diff


def test_on_a_terminal_markup_and_escapes_in_stored_text_print_literally(
    sagas: Hostile, tmp_path: Path
) -> None:
    terminal = {"TTY_COMPATIBLE": "1", "COLUMNS": "400"}  # rich's tables and colours
    for args in (
        ["list"],
        ["show", sagas.failed],
        ["history", sagas.failed],
        ["diff", sagas.completed, sagas.failed],
    ):
        result = saga(sagas, *args, cwd=tmp_path, **terminal)
        assert result.returncode == 0, result.stderr
        assert SGR.search(result.stdout), "not rendered as on a terminal"
        text = SGR.sub("", result.stdout)
        assert unsafe(text) == [], text
        assert "evil" + SHOWN in text or "grab" + SHOWN in text, text


def test_json_carries_the_exact_text_and_nothing_raw(sagas: Hostile, tmp_path: Path) -> None:
    listed = saga(sagas, "list", "--json", cwd=tmp_path)
    rows = {row["id"]: row for row in json.loads(clean(listed))["sagas"]}
    assert rows[sagas.completed]["key"] == hostile.KEY
    assert {row["name"] for row in rows.values()} == {hostile.EVIL.name}
    shown = json.loads(clean(saga(sagas, "show", sagas.failed, "--json", cwd=tmp_path)))
    assert [step["name"] for step in shown["steps"]] == [hostile.GRAB, hostile.BOOM]
    assert shown["steps"][0]["error"] == "RuntimeError: cannot put back " + hostile.HOSTILE
    completed = json.loads(clean(saga(sagas, "show", sagas.completed, "--json", cwd=tmp_path)))
    assert completed["steps"][0]["result"] == {"got": hostile.HOSTILE}
    history = json.loads(clean(saga(sagas, "history", sagas.failed, "--json", cwd=tmp_path)))
    texts = [event["text"] for event in history["events"]]
    assert f"step {hostile.BOOM} failed: ValueError: boom {hostile.HOSTILE}" in texts


def test_recovery_reports_and_error_lines_escape_stored_text(
    sagas: Hostile, tmp_path: Path
) -> None:
    planned = saga(sagas, "recover", "--dry-run", cwd=tmp_path)  # no --app: skipped
    assert planned.returncode == 0, planned.stderr
    assert f"skipped      {sagas.stuck} (evil{SHOWN}): no definition" in clean(planned)
    recovered = saga(sagas, "--app", APP, "recover", sagas.stuck, cwd=tmp_path)
    assert recovered.returncode == 0, recovered.stderr
    assert f"resumed      {sagas.stuck} (evil{SHOWN}) -> completed" in clean(recovered)
    retried = saga(sagas, "--app", APP, "retry-compensation", sagas.failed, cwd=tmp_path)
    assert retried.returncode == 1
    clean(retried)
    line = one_error_line(retried.stderr)
    assert "ended failed; the compensation of step" in line
    assert f"cannot put back {SHOWN}; see" in line


def test_worker_lines_escape_stored_text(
    sagas: Hostile, coord_on: Coordinator, tmp_path: Path
) -> None:
    command = [*saga_command(), "--db", sagas.url, "--app", APP, "worker", "--interval", "0.1s"]
    with _started(command, tmp_path) as worker:
        _wait_for(lambda: coord_on.get(sagas.stuck).status is SagaStatus.COMPLETED)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    assert unsafe(stderr) == [], stderr
    assert f"saga {sagas.stuck} (evil{SHOWN}): completed" in stderr


FORGED = "\n2026-12-03 00:00:00,000 INFO saga.worker: saga forged: completed"
"""What a newline in stored text would add to a text log, as a record of its own."""
RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ saga\.[a-z.]+: ")


def _failed_stuck(coord: Coordinator) -> str:
    """A saga stuck in its second step, which fails on recovery (with FORGED in its error)
    and whose compensation fails too: every kind of stored text reaches the log."""
    key = "s-2" + FORGED
    data = {"crash": True, "fail": True, "undo_fails": True, "forge": FORGED}
    with pytest.raises(hostile.Crash):
        coord.run(hostile.EVIL, data=data, key=key)
    record = coord.store.find(hostile.EVIL.name, key)
    assert record is not None
    expire(coord, record.id)
    return record.id


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_worker_logs_carry_no_control_characters(
    sagas: Hostile, coord_on: Coordinator, log_format: str, tmp_path: Path
) -> None:
    stuck = _failed_stuck(coord_on)
    log = tmp_path / "worker.log"
    command = [*saga_command(), "--db", sagas.url, "--app", APP, "worker", "--interval", "0.1s"]
    command += ["--log-format", log_format, "--log-file", str(log)]
    with _started(command, tmp_path) as worker:
        _wait_for(lambda: coord_on.get(stuck).status is SagaStatus.FAILED)
        _wait_for(lambda: coord_on.get(sagas.stuck).status is SagaStatus.COMPLETED)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    written = log.read_text()
    if log_format == "json":  # JSON escapes every control character itself
        records = [json.loads(line) for line in written.splitlines()]
        assert {record.get("saga_name") for record in records} >= {hostile.EVIL.name}
        assert any("saga forged: completed" in record["message"] for record in records)
        return
    assert unsafe(written) == [], written
    lines = written.splitlines()
    assert all(RECORD.match(line) or line.startswith("  ") for line in lines), written
    assert not any(line.startswith(FORGED.strip()) for line in lines), written
    assert f"saga {stuck} (evil{SHOWN}): failed" in written
    assert "boom " + SHOWN + "\\n2026-12-03 00:00:00,000 INFO" in written


@pytest.fixture
def coord_on(sagas: Hostile) -> Iterator[Coordinator]:
    """A coordinator on the sagas' database, to check what the command did."""
    coordinator = Coordinator(sagas.url, lease_ttl=5.0)
    try:
        yield coordinator
    finally:
        coordinator.close()
