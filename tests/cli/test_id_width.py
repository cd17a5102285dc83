"""Saga ids in tables are never cut mid-width: the first characters on a terminal too
narrow for whole ids, whole ids when piped, with ``--wide`` and in ``--json``; the
short ids name the sagas back.

The terminal is a real one (a pseudo-terminal of a chosen width) around the real
``saga`` script, so that rich decides as it does for an operator.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import termios
from pathlib import Path

import pytest

from saga import Coordinator
from tests.cli.conftest import APP, REPO, World, bare, run_saga, saga_command

SGR = re.compile(r"\x1b\[[0-9;]*m")
NARROW, ROOMY = 80, 400
"""Columns of a terminal where a list of whole ids does not fit, and one where it does."""


def on_terminal(columns: int, *args: str, cwd: Path) -> str:
    """What ``saga ARGS`` prints with its stdout on a terminal ``columns`` wide."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environment = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"}
    for name in ("COLUMNS", "LINES", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "SAGA_FAULTS"):
        environment.pop(name, None)  # the terminal's own size decides, as for an operator
    with subprocess.Popen(
        [*saga_command(), *args], cwd=cwd, env=environment, stdout=terminal, stderr=subprocess.PIPE
    ) as child:
        os.close(terminal)
        output = _read_all(controller)
        assert child.wait(timeout=60) == 0, child.stderr.read() if child.stderr else ""
    return SGR.sub("", output.decode()).replace("\r\n", "\n")


def _read_all(controller: int) -> bytes:
    """Everything written to the terminal, read as it comes (so the child never blocks)."""
    chunks = []
    try:
        while chunk := os.read(controller, 65536):
            chunks.append(chunk)
    except OSError:  # EIO: the child closed its side of the terminal
        pass
    finally:
        os.close(controller)
    return b"".join(chunks)


def saga(world: World, *args: str) -> list[str]:
    return ["--db", world.url, "--app", APP, *args]


def first_column(text: str) -> list[str]:
    """The first word of each table row: after the header (whose cells may wrap over
    lines above it), not on a row's wrapped lines, and not the next-page line."""
    lines = text.splitlines()
    rows = lines[next(i for i, line in enumerate(lines) if line.startswith("ID ")) + 1 :]
    return [row.split()[0] for row in rows if row[:1].strip() and not row.startswith("more:")]


def world_ids(world: World) -> list[str]:
    return [world.stuck_imperative, world.stuck, world.failed, world.compensated, world.completed]


def test_a_narrow_terminal_shows_short_ids_that_name_the_sagas_back(
    world: World, tmp_path: Path
) -> None:
    shown = first_column(on_terminal(NARROW, *saga(world, "list"), cwd=tmp_path))
    assert shown == [saga_id[:8] for saga_id in world_ids(world)]
    named = run_saga(*saga(world, "show", shown[1], "--json"), cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["id"] == world.stuck


def test_whole_ids_when_they_fit_when_piped_with_wide_and_in_json(
    world: World, tmp_path: Path
) -> None:
    whole = world_ids(world)
    assert first_column(on_terminal(ROOMY, *saga(world, "list"), cwd=tmp_path)) == whole
    assert first_column(on_terminal(NARROW, *saga(world, "list", "--wide"), cwd=tmp_path)) == whole
    piped = run_saga(*saga(world, "list"), cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert first_column(piped.stdout) == whole
    listed = on_terminal(NARROW, *saga(world, "list", "--json"), cwd=tmp_path)
    assert [row["id"] for row in json.loads(listed)["sagas"]] == whole


def test_short_ids_grow_where_two_on_the_screen_share_their_start(
    world: World, coord: Coordinator, tmp_path: Path
) -> None:
    twins = ["abcd1234-0000-4000-8000-000000000001", "abcd1234-1111-4000-8000-000000000002"]
    for saga_id in twins:
        bare(coord, saga_id, "twin")
    shown = first_column(on_terminal(NARROW, *saga(world, "list", "--name", "twin"), cwd=tmp_path))
    assert shown == ["abcd1234-1", "abcd1234-0"]  # newest first; past the dash, not on it
    for short, saga_id in zip(shown, reversed(twins), strict=True):
        named = run_saga(*saga(world, "history", short, "--json"), cwd=tmp_path)
        assert named.returncode == 0, named.stderr
        assert json.loads(named.stdout)["id"] == saga_id


@pytest.mark.parametrize("wide", [False, True])
def test_diff_shortens_ids_as_list_does(world: World, tmp_path: Path, wide: bool) -> None:
    args = saga(world, "diff", world.completed, world.compensated, *(["--wide"] if wide else []))
    text = on_terminal(NARROW, *args, cwd=tmp_path)
    rows = [line.split() for line in text.splitlines() if line.startswith(("left", "right"))]
    ids = [world.completed, world.compensated]
    assert [row[1] for row in rows] == (ids if wide else [saga_id[:8] for saga_id in ids])
