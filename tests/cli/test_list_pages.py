"""``saga list`` pages: one default page size shared with the library, and a next-page
hint that repeats the query it continues."""

from __future__ import annotations

import inspect
import json
import os
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from saga.adapters.sql import tables
from sqlalchemy import update

from saga import AsyncCoordinator, Coordinator
from saga._internal.ports import DEFAULT_LIST_LIMIT
from saga.web.list_page import Filters
from tests.cli.conftest import REPO, bare, expire, invoke, run_saga, saga_command

NAME = 'o\'brien "order" $(touch pwned); `x` *'
"""A saga name a shell would mangle or run, were it not quoted."""
KEY = "k 1;'&' | $HOME"


@pytest.fixture
def crowded(db_url: str) -> Iterator[Coordinator]:
    """One saga more than a default page holds, on the test's backend."""
    coordinator = Coordinator(db_url, lease_ttl=5.0)
    try:
        for _ in range(DEFAULT_LIST_LIMIT + 1):
            bare(coordinator, str(uuid.uuid4()), "crowd")
        yield coordinator
    finally:
        coordinator.close()


def test_the_command_and_the_library_page_by_the_same_default(
    db_url: str, crowded: Coordinator
) -> None:
    result = invoke(db_url, "list", "--json")
    assert result.exit_code == 0, result.output
    page = json.loads(result.stdout)
    listed = [row["id"] for row in page["sagas"]]
    assert listed == [view.id for view in crowded.list()]
    assert len(listed) == DEFAULT_LIST_LIMIT
    assert page["next_before"] == listed[-1]  # a full page: there is a next one


def test_every_listing_takes_its_default_from_the_one_constant() -> None:
    defaults = [
        inspect.signature(Coordinator.list).parameters["limit"].default,
        inspect.signature(AsyncCoordinator.list).parameters["limit"].default,
        Filters().limit,
    ]
    assert defaults == [DEFAULT_LIST_LIMIT] * 3
    shown = invoke("sqlite:///unused.db", "list", "--help").stdout
    assert f"[default: {DEFAULT_LIST_LIMIT}]" in " ".join(shown.split())


def _made(
    coord: Coordinator, name: str, created_at: float, *, key: str | None = None, stuck: bool = False
) -> str:
    """A running saga created at ``created_at`` (seconds since the epoch): an old one."""
    saga_id = str(uuid.uuid4())
    bare(coord, saga_id, name, key)
    engine = coord.store.engine  # type: ignore[attr-defined]
    with engine.begin() as connection:
        connection.execute(
            update(tables.instances)
            .where(tables.instances.c.id == saga_id)
            .values(created_at=created_at)
        )
    if stuck:
        expire(coord, saga_id)
    return saga_id


def _pasted(hint: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The hint's command as an operator pastes it: read by a shell, run by the real script."""
    words = shlex.split(hint.removeprefix("more: "))
    assert words[0] == "saga"
    command = shlex.join([*saga_command(), *words[1:]])
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _hint(output: str) -> str:
    last = output.splitlines()[-1]
    assert last.startswith("more: saga "), output
    return last


def test_the_next_page_hint_repeats_every_filter_quoted_for_a_shell(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        stuck = [_made(coord, NAME, 1000.0 + n, stuck=True) for n in range(3)]
        _made(coord, NAME, 1000.5)  # same name, older than the first page, not stuck
        _made(coord, "someone-else", 1000.7, stuck=True)
    query = ["--status", "running", "--name", NAME, "--stuck", "--older-than", "1d", "--wide"]
    first = invoke(db_url, "list", *query, "--limit", "1")
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines()[1].startswith(stuck[2])
    hint = _hint(first.stdout)
    expected = ["saga", "--db", db_url, "list", "--status", "running", "--name", NAME]
    expected += ["--older-than", "1d", "--limit", "1", "--stuck", "--wide", "--before", stuck[2]]
    assert shlex.split(hint.removeprefix("more: ")) == expected
    second = _pasted(hint, tmp_path)
    assert second.returncode == 0, second.stderr
    assert [line.split()[0] for line in second.stdout.splitlines()[1:-1]] == [stuck[1]]
    third = _pasted(_hint(second.stdout), tmp_path)
    assert [line.split()[0] for line in third.stdout.splitlines()[1:-1]] == [stuck[0]]
    assert not (tmp_path / "pwned").exists()


def test_the_next_page_hint_keeps_the_key_and_leaves_the_default_limit_out(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        keyed = [_made(coord, f"n-{n}", 2000.0 + n, key=KEY) for n in range(DEFAULT_LIST_LIMIT + 2)]
    first = invoke(db_url, "list", "--key", KEY)
    assert first.exit_code == 0, first.output
    hint = _hint(first.stdout)
    words = shlex.split(hint.removeprefix("more: "))
    assert words == ["saga", "--db", db_url, "list", "--key", KEY, "--before", keyed[2]]
    second = _pasted(hint, tmp_path)
    assert second.returncode == 0, second.stderr
    rows = second.stdout.splitlines()[1:]
    assert [row.split()[0] for row in rows] == [keyed[1], keyed[0]]  # no next page: no hint


NEWLINE_KEY = "k 1\n2026-12-03 fake-row 'quoted' \"double\""
"""A key a newline, spaces and quotes would cut into several words or lines."""
ESCAPE_KEY = "k\n\x1b[2J\t\u202e"
"""A key with characters no terminal may be sent raw (escape, tab, bidi override)."""


def test_the_next_page_hint_pastes_a_key_with_a_newline_as_one_word(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        keyed = [_made(coord, f"n-{n}", 3000.0 + n, key=NEWLINE_KEY) for n in range(3)]
    first = run_saga("--db", db_url, "list", "--key", NEWLINE_KEY, "--limit", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    hint = first.stdout[first.stdout.index("more: saga ") :].rstrip("\n")
    words = shlex.split(hint.removeprefix("more: "))
    query = ["--key", NEWLINE_KEY, "--limit", "1", "--before", keyed[2]]
    assert words == ["saga", "--db", db_url, "list", *query]
    second = _pasted(hint, tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[1].split()[0] == keyed[1]


def test_the_next_page_hint_writes_other_controls_as_escapes_a_shell_reads_back(
    db_url: str, tmp_path: Path
) -> None:
    with Coordinator(db_url, lease_ttl=5.0) as coord:
        keyed = [_made(coord, f"e-{n}", 4000.0 + n, key=ESCAPE_KEY) for n in range(3)]
    first = run_saga("--db", db_url, "list", "--key", ESCAPE_KEY, "--limit", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "\x1b" not in first.stdout
    assert "\u202e" not in first.stdout
    hint = _hint(first.stdout)
    assert "--key $'k\\n\\x1b[2J\\t\\u202e'" in hint
    command = shlex.join(saga_command()) + hint.removeprefix("more: saga")
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    second = subprocess.run(
        ["bash", "-c", command],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[1].split()[0] == keyed[1]
