"""Every ```python block in README.md and docs/*.md runs, so the docs stay true.

Each document's blocks run in order, as one module: the document's text with
everything that is not tested code blanked out, written to ``tmp_path`` and
imported. Line numbers in a traceback are the document's own, and functions
defined in a block are importable as ``module:qualname``, as context-manager
sagas require. The working directory is ``tmp_path`` (so the default
``sqlite:///saga.db`` lands there) and ``SAGA_DATABASE_URL`` is unset.

A block preceded by ``<!-- not-tested -->`` is only compiled, not run: keep
that for the few blocks that need a service the tests do not have. Shell
blocks (```bash, ```console) are never run.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga import Coordinator

ROOT = Path(__file__).resolve().parent.parent
NOT_TESTED = "<!-- not-tested -->"
_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")


def documents() -> list[Path]:
    """README.md and every page under docs/ (pages written later join automatically)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block: its language, first code line (1-based) and text."""

    language: str
    line: int
    code: str
    tested: bool


def blocks(text: str) -> Iterator[Block]:
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, language = opening.groups()
        start = index + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"line {index + 1}: code block is never closed")
        previous = next((line.strip() for line in reversed(lines[:index]) if line.strip()), "")
        if indent and language in ("python", "py"):
            raise AssertionError(f"line {index + 1}: indented python blocks are not run; unindent")
        yield Block(language, start + 1, "\n".join(lines[start:end]), previous != NOT_TESTED)
        index = end + 1


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path.read_text(encoding="utf-8")) if b.language in ("python", "py")]


def as_module(path: Path) -> str:
    """The document's tested code at its own line numbers, everything else blank."""
    length = len(path.read_text(encoding="utf-8").splitlines())
    lines = [""] * length
    for block in python_blocks(path):
        if block.tested:
            for offset, line in enumerate(block.code.splitlines()):
                lines[block.line - 1 + offset] = line
    return "\n".join(lines) + "\n"


def module_name(path: Path) -> str:
    return "doc_" + re.sub(r"\W", "_", path.relative_to(ROOT).with_suffix("").as_posix()).lower()


# -- the harness checks itself ---------------------------------------------------------------


def test_blocks_are_found_with_their_lines_and_markers() -> None:
    text = "\n".join(
        [
            "# Title",
            "```python",
            "x = 1",
            "```",
            "",
            NOT_TESTED,
            "",
            "```python",
            "needs_a_server()",
            "```",
            "```bash",
            "saga demo",
            "```",
        ]
    )
    found = list(blocks(text))
    assert [(b.language, b.line, b.code, b.tested) for b in found] == [
        ("python", 3, "x = 1", True),
        ("python", 9, "needs_a_server()", False),
        ("bash", 12, "saga demo", True),
    ]


def test_readme_and_concepts_have_tested_python_blocks() -> None:
    for name in ("README.md", "docs/concepts.md"):
        assert any(b.tested for b in python_blocks(ROOT / name)), name


def test_not_tested_blocks_are_rare() -> None:
    skipped = [(p.name, b.line) for p in documents() for b in python_blocks(p) if not b.tested]
    assert len(skipped) <= 3, f"too many untested blocks: {skipped}"


# -- the documents ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_untested_blocks_still_compile(path: Path) -> None:
    for block in python_blocks(path):
        if not block.tested:
            compile(block.code, f"{path.name}:{block.line}", "exec")


def runnable_documents() -> list[Path]:
    """Documents with at least one python block to run (the others have nothing to test)."""
    return [p for p in documents() if any(b.tested for b in python_blocks(p))]


@pytest.mark.parametrize("path", runnable_documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_document(path, tmp_path, monkeypatch)
    capsys.readouterr()  # what the examples print is for readers, not for this test


def test_readme_runs_again_against_the_same_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pasted into a script and run twice: the same keys replay their recorded outcomes,
    the failed order's SagaFailed included (its cause rebuilt from the record)."""
    run_document(ROOT / "README.md", tmp_path, monkeypatch)
    run_document(ROOT / "README.md", tmp_path, monkeypatch)
    capsys.readouterr()


def run_document(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Import the document's tested code as a module, in ``tmp_path``."""
    name = module_name(path)
    (tmp_path / f"{name}.py").write_text(as_module(path), encoding="utf-8")
    monkeypatch.delenv("SAGA_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = None
    try:
        module = importlib.import_module(name)
    except Exception as error:
        where = _doc_line(error, tmp_path / f"{name}.py")
        raise AssertionError(f"{path.name}, line {where}: {error!r}") from error
    finally:
        _close_coordinators(module)
        sys.modules.pop(name, None)


def _doc_line(error: BaseException, module_file: Path) -> int | str:
    """The document line the error was raised from (module lines are document lines)."""
    frames = traceback.extract_tb(error.__traceback__)
    lines = [f.lineno for f in frames if f.filename == str(module_file) and f.lineno]
    return lines[-1] if lines else "?"


def _close_coordinators(module: object) -> None:
    for value in list(vars(module).values()) if module is not None else []:
        if isinstance(value, Coordinator):
            value.close()
