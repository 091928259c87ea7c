"""The layout rules of docs/architecture.md, checked on the source: no import cycles between
modelsql's modules; the packages below the engine never import it or the client; the engine's query
and artifacts packages import no statement family and not the statement loop; the client imports only the
session, import_model and import_pipeline from the engine; no module reads another's underscored names; and
``import modelsql`` loads no package a statement needs (ONNX, ONNX Runtime, torch, TVM, the server, ...). And the
tests' own layout (docs/architecture.md, "Tests"): one folder per feature, unique module names, no test module
importing another, and every test file a document names there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "modelsql"


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


LOWER = ("sql", "serving", "storage", "catalog", "operators", "converters", "onnxformat", "analyses", "netfuse",
         "tuning", "costmodel", "recursive", "finetune", "datasets", "metrics", "estimators")
"""The packages below the engine: none imports ``modelsql.engine`` or ``modelsql.client`` at run time."""

FAMILIES = ("modelsql.engine.models", "modelsql.engine.pipelines", "modelsql.engine.serve", "modelsql.engine.tune",
            "modelsql.engine.profile", "modelsql.engine.finetune", "modelsql.engine.evaluate")
"""The statement families: each sits on the query and artifacts packages, never below them."""


def _runtime_imports(room: str) -> list[tuple[str, str]]:
    """(module, imported module or module.name) for every run-time modelsql import under ``modelsql/room``."""
    return [(_module(path), full) for path in (ROOT / room).rglob("*.py") for target, names, runtime in _imports(path)
            if runtime for full in [target] + [f"{target}.{n}" for n in names]]


@pytest.mark.parametrize("room", LOWER)
def test_the_lower_packages_never_import_the_engine_or_the_client(room) -> None:
    bad = [(m, t) for m, t in _runtime_imports(room) if t.startswith(("modelsql.engine", "modelsql.client"))]
    assert not bad, bad


@pytest.mark.parametrize("room", ["tuning", "costmodel", "recursive", "finetune", "metrics", "estimators"])
def test_the_pure_libraries_never_import_the_catalog(room) -> None:
    bad = [(m, t) for m, t in _runtime_imports(room) if t.startswith("modelsql.catalog")]
    assert not bad, bad


@pytest.mark.parametrize("room, above", [
    ("engine/query", FAMILIES + ("modelsql.engine.session", "modelsql.engine.explain", "modelsql.engine.query_handler")),
    ("engine/artifacts", FAMILIES + ("modelsql.engine.session", "modelsql.engine.explain", "modelsql.engine.query")),
    ("engine", ("modelsql.client",)),
])
def test_the_engine_s_packages_import_nothing_above_them(room, above) -> None:
    """The query package (the PREDICT planner) and the artifacts package never import a statement family,
    the statement loop or the registry above them; nothing in the engine imports the client."""
    bad = [(m, t) for m, t in _runtime_imports(room) if t.startswith(above)]
    assert not bad, bad


def test_the_client_uses_only_the_session_its_results_and_import_model() -> None:
    used = {(t, tuple(n)) for t, n, _ in _imports(ROOT / "client/dbapi.py") if t.startswith("modelsql.engine")}
    assert used <= {("modelsql.engine.session", ("Session",)), ("modelsql.engine.result", ("Result",)),
                    ("modelsql.engine.models.statements", ("import_model",)),
                    ("modelsql.engine.pipelines.import_pipeline", ("import_pipeline",))}, used


def test_no_module_imports_another_modules_underscored_names() -> None:
    for path in ROOT.rglob("*.py"):
        for target, names, _ in _imports(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{_module(path)} imports {private} from {target}"


HEAVY = ("torch", "tvm", "tvm_ffi", "ray", "sklearn", "skl2onnx", "optuna", "uvicorn", "starlette", "onnx",
         "onnxruntime", "pandas")
"""Packages ``import modelsql`` must not import: each statement that needs one imports it (issue 22)."""


def _load_time_imports(path: Path) -> tuple[set[str], set[str]]:
    """(modelsql modules, other top-level packages) that importing ``path`` imports: the imports of its body,
    its classes' bodies and its top-level ``if`` / ``try`` blocks, not those inside functions."""
    tree = ast.parse(path.read_text())
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    ours, others = set(), set()

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                if name.startswith("modelsql"):
                    ours.update([name] + [f"{name}.{a.name}" for a in node.names])
                elif name and node.level == 0:
                    others.add(name.split(".")[0])
            elif isinstance(node, ast.Import):
                for a in node.names:
                    (ours.add(a.name) if a.name.startswith("modelsql") else others.add(a.name.split(".")[0]))
            visit(ast.iter_child_nodes(node))

    visit(tree.body)
    return ours, others


def test_import_modelsql_imports_no_statement_s_heavy_package() -> None:
    """The modules ``import modelsql`` loads (with every package above each) import none of :data:`HEAVY`
    when they load; plain SQL and the client need none of them (``engine/session.py`` imports the
    statements' handler modules on the first statement that mentions models)."""
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    seen: set[str] = set()
    todo = ["modelsql"]
    while todo:
        m = todo.pop()
        if m in seen or m not in modules:
            continue
        seen.add(m)
        parts = m.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        ours, _ = _load_time_imports(modules[m])
        todo.extend(ours)
    bad = {m: sorted(others & set(HEAVY)) for m in seen for others in [_load_time_imports(modules[m])[1]]
           if others & set(HEAVY)}
    assert not bad, f"loaded by import modelsql, these import what a statement needs: {bad}"


OUTSIDE = ("../shared", "shared/research", "shared/external", "DESIGN.md", "-measurements.md")
"""Names of files outside the repository: a clone does not have them, so no module or document may send a
reader there (tests may use ``../shared`` material when it is present, and skip with a reason when not)."""


def test_no_module_or_document_names_a_file_outside_the_repository() -> None:
    top = ROOT.parent
    paths = [*ROOT.rglob("*.py"), *(top / "docs").rglob("*.md"), *(top / "benchmarks").glob("*.py"),
             top / "README.md", top / "pyproject.toml", top / ".ci" / "run"]
    bad = [(str(p.relative_to(top)), name) for p in paths for name in OUTSIDE if name in p.read_text()]
    assert not bad, bad


TESTS = ROOT.parent / "tests"
FEATURES = ("client", "sql", "engine", "query", "models", "pipelines", "serve", "tune", "profile", "netfuse",
            "finetune", "evaluate")
"""The folders of tests/, one per feature (docs/architecture.md, "Tests")."""


def test_tests_are_in_feature_folders_with_unique_names() -> None:
    """Every test module is in a feature folder, no two share a name (the folders are not packages, so pytest
    imports each module by its name alone), and none imports another test module, in itself or in a child
    process it starts: shared helpers are the support modules beside conftest.py."""
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 50
    misplaced = [str(p.relative_to(TESTS)) for p in modules if p.parent.parent != TESTS or p.parent.name not in FEATURES]
    assert not misplaced, f"test modules outside the feature folders {FEATURES}: {misplaced}"
    names = [p.name for p in modules]
    assert sorted({n for n in names if names.count(n) > 1}) == []
    importing = [(str(p.relative_to(TESTS)), m.group(0).strip()) for p in [*modules, *TESTS.glob("*.py")]
                 for m in re.finditer(r"^\s*(?:from|import)\s+test_\w+", p.read_text(), re.M)]
    assert not importing, importing


def test_every_test_file_a_document_names_exists() -> None:
    """README, docs/, pyproject.toml, .ci/run, benchmarks/, modelsql's own comments and the tests name test
    files and folders (``tests/engine/test_layout.py``, ``tests/profile/test_tvm_*.py``,
    ``tests/query/golden/rules``): each must be there, so none is left naming a file that moved."""
    top = ROOT.parent
    paths = [*ROOT.rglob("*.py"), *(top / "docs").rglob("*.md"), *(top / "benchmarks").rglob("*.py"),
             *(top / "benchmarks").rglob("*.sh"), top / "README.md", top / "pyproject.toml", top / ".ci" / "run",
             *TESTS.rglob("*.py")]
    named = {(str(p.relative_to(top)), name) for p in paths
             for name in re.findall(r"\btests/[\w/.*-]*\w", p.read_text())}
    assert len(named) > 20
    # a placeholder in capitals (tests/query/golden/NAME.sql) stands for any name
    missing = sorted((where, name) for where, name in named
                     if not any(top.glob(re.sub(r"(?<=/)[A-Z]+(?=[./]|$)", "*", name))))
    assert not missing, missing
