"""No import circles in saga and saga.adapters, counting every import the source
names: function-local ones and those under ``TYPE_CHECKING`` too (a circle hidden
in a function is still a circle)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"saga": ROOT / "saga", "saga.adapters": ROOT / "adapters"}

_I = "saga._internal"
ENGINE_MAY_NOT_IMPORT = ("threading", "asyncio", "concurrent", "saga.adapters", f"{_I}.store")
ENGINE_MAY_NOT_IMPORT += (f"{_I}.drivers", f"{_I}.coordinator", f"{_I}.aio", f"{_I}.scope")
"""The engine is sans-I/O: no threads, no event loop, no store, no driver, no shell."""


def _modules() -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for package, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = [part for part in path.relative_to(root).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            name = ".".join([package, *(parts[:-1] if is_package else parts)])
            found[name] = (path, is_package)
    return found


def _imported(name: str, path: Path, is_package: bool, known: set[str]) -> Iterator[str]:
    """The modules of ``known`` that ``path`` imports, anywhere in it."""
    here = name if is_package else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
            submodules = [n for n in names if n in known]
            yield from submodules
            if len(submodules) < len(names) and base in known:
                yield base  # a name defined in the module itself


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: set(_imported(name, path, is_package, known)) - {name}
        for name, (path, is_package) in modules.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def test_the_graph_sees_function_local_imports() -> None:
    graph = _graph()
    assert "saga.adapters.sql" in graph["saga._internal.store"]  # imported inside open_store
    assert "saga.adapters.sql.writes" in graph["saga.adapters.sql.pg_async"]  # relative


def test_no_import_circle() -> None:
    assert [sorted(circle) for circle in _circles(_graph())] == []


def _every_import(path: Path) -> Iterator[str]:
    """Every module ``path`` names in an import statement (absolute imports only:
    saga uses no relative ones outside the adapters)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_the_engine_imports_no_threading_asyncio_store_or_driver() -> None:
    engine = sorted((ROOT / "saga" / "_internal" / "engine").glob("*.py"))
    assert len(engine) > 5
    for path in engine:
        for imported in _every_import(path):
            banned = [b for b in ENGINE_MAY_NOT_IMPORT if f"{imported}.".startswith(f"{b}.")]
            assert not banned, f"{path.name} imports {imported}"


ENGINE_MAY_NOT_REACH = ("threading", "asyncio", "concurrent", "socket", "getpass", "select")
ENGINE_MAY_NOT_REACH += ("subprocess", "importlib", "sqlite3", "sqlalchemy", "psycopg")
ENGINE_MAY_NOT_REACH += ENGINE_MAY_NOT_IMPORT
"""What does I/O (threads, an event loop, the network, the OS user, importing code, a
database), which the engine may not reach through any module it imports either."""

STILL_REACHED: set[tuple[str, str]] = set()
"""Where the engine still reaches I/O, each to be cut: the test fails when one is
cut (strike it here) and when one is added."""


def _reached_from(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    seen: set[str] = set()
    stack = list(start)
    while stack:
        module = stack.pop()
        if module not in seen:
            seen.add(module)
            stack.extend(graph[module])
    return seen


def test_what_the_engine_reaches_through_its_imports() -> None:
    """Transitively: a module the engine imports may not import I/O either (the
    direct check above missed asyncio, reached through saga.context)."""
    graph, modules = _graph(), _modules()
    reached = _reached_from(
        graph, [name for name in graph if name.startswith("saga._internal.engine")]
    )
    found = {
        (module, banned)
        for module in reached
        for imported in _every_import(modules[module][0])
        for banned in ENGINE_MAY_NOT_REACH
        if f"{imported}.".startswith(f"{banned}.")
    }
    assert found == STILL_REACHED


def test_the_storage_modules_import_no_driver() -> None:
    graph = _graph()
    drivers = {f"{_I}.drivers.threads", f"{_I}.drivers.tasks", f"{_I}.coordinator", f"{_I}.aio"}
    storage = [name for name in graph if name.startswith("saga.adapters.sql")]
    storage += [f"{_I}.{name}" for name in ("ports", "record", "errors", "status", "_statuses")]
    for name in storage:
        assert not graph[name] & drivers, name
