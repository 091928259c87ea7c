"""The layout rules of docs/architecture.md, checked on the source: no import cycles between
modelsql's modules, operators/ never imports planner/ at run time, the client imports only the
session, import_model and import_pipeline from the planner, and no module reads another's underscored names."""

from __future__ import annotations

import pytest

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "modelsql"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str], bool]]:
    """(imported module, names, at run time) for every modelsql import in ``path``."""
    tree = ast.parse(path.read_text())
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    type_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            if name.startswith("modelsql"):
                out.append((name, [a.name for a in node.names], id(node) not in type_only))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("modelsql"):
                    out.append((a.name, [], id(node) not in type_only))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        for target, names, runtime in _imports(path):
            if not runtime:
                continue
            for name in names or [None]:
                sub = f"{target}.{name}" if name else target
                graph[m].add(sub if sub in modules else target)
    return {m: {t for t in ts if t in modules and t != m} for m, ts in graph.items()}


def test_no_import_cycles() -> None:
    graph = _graph()
    # a package importing its own submodules (``from . import ddl``) is not a cycle of jobs
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("room", ["operators", "tuning", "costmodel", "recursive", "finetune"])
def test_operators_and_tuning_do_not_import_the_planner(room) -> None:
    for path in (ROOT / room).rglob("*.py"):
        bad = [t for t, _, runtime in _imports(path) if runtime and t.startswith(("modelsql.planner", "modelsql.catalog"))
               and not (room == "operators" and t.startswith("modelsql.catalog"))]
        assert not bad, f"{path.name} imports {bad}"


def test_the_client_uses_only_the_session_and_import_model() -> None:
    used = {(t, tuple(n)) for t, n, _ in _imports(ROOT / "dbapi.py") if t.startswith("modelsql.planner")}
    assert used <= {("modelsql.planner.session", ("Session",)), ("modelsql.planner.ddl", ("import_model",)),
                    ("modelsql.planner.pipeline_import", ("import_pipeline",))}, used


def test_no_module_imports_another_modules_underscored_names() -> None:
    for path in ROOT.rglob("*.py"):
        for target, names, _ in _imports(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{_module(path)} imports {private} from {target}"
