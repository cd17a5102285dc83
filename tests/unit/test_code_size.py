"""Issue 30's size limits, kept: no module of the library over 450 lines and no
function over 40, so that a rule stays readable in one screen. Measured on the source
tree (the package and its adapters), as `wc -l` and the AST see it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "saga").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")])
MODULE_LINES = 450
FUNCTION_LINES = 40


def test_the_sources_are_found() -> None:
    assert len(SOURCES) > 100


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_is_too_long(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_no_function_is_too_long() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)"
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > FUNCTION_LINES
    ]
    assert too_long == []
