"""One registry of error codes (issue 23): every code modelsql raises is in ``modelsql.errors.CODES`` with its
meaning, every code there is raised somewhere, and ``docs/errors.md`` documents each (it is what
``codes_markdown`` generates: ``python -m modelsql.engine.documents`` rewrites it)."""

from __future__ import annotations

import ast
from pathlib import Path

from modelsql import duckdb_errors, errors

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "modelsql"

PASSED_ON = {
    # (file, the expression given as ``code=``): a code taken from DuckDB's translation tables, from another
    # error (a child process's, a failed trial's) or from a caller checked here (option_error's callers)
    ("duckdb_errors.py", "_CATALOG_CODES.get(code, code) if catalog else code"),
    ("duckdb_errors.py", "code"),
    ("operators/backends/tvm_build.py", "e['code']"),
    ("engine/tune/run.py", "code"),
    ("engine/options/schema.py", "code"),
}
"""``code=`` arguments that are neither literals nor an error's own ``.code``: each passes on a code some other
site raised."""

BUILT_OTHERWISE = {
    "trial_failed": "engine/tune/run.py",  # _every_trial_failed's default, and tuning/executor.py's
    "worker_died": "engine/tune/run.py",  # a TaskOutcome's error tuple when the worker process died
}
"""Codes that reach an error's constructor from a tuple, not a ``code=`` literal: (code, a file holding it)."""


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _raised() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """({code: files raising it}, {(file, expression)} of ``code=`` arguments that are not literals)."""
    codes: dict[str, set[str]] = {}
    dynamic: set[tuple[str, str]] = set()
    for path in SOURCE.rglob("*.py"):
        name = str(path.relative_to(SOURCE))
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            found: list[str] = []
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "code":
                        literal = _strings(kw.value)
                        if literal and isinstance(kw.value, (ast.Constant, ast.IfExp)):
                            found += literal
                        elif not (isinstance(kw.value, ast.Attribute) and kw.value.attr == "code"):
                            dynamic.add((name, ast.unparse(kw.value)))  # err.code: another error's, passed on
                callee = ast.unparse(node.func)
                if callee.endswith("option_error") and len(node.args) > 2:
                    found += _strings(node.args[2])
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == ["code"]:
                        found += _strings(stmt.value)
            for code in found:
                codes.setdefault(code, set()).add(name)
    return codes, dynamic


def _translated() -> set[str]:
    """The codes DuckDB's errors are translated to (modelsql/duckdb_errors.py's tables)."""
    tables = vars(duckdb_errors)
    out = {code for _, _, code in tables["_BY_CLASS_NAMES"]}
    out |= set(tables["_CATALOG_CODES"].values())
    out |= {code for _, _, code, _ in tables["_BY_MESSAGE"]}
    return out


def test_every_code_raised_is_registered():
    codes, _ = _raised()
    missing = {c: sorted(files) for c, files in codes.items() if c not in errors.CODES}
    missing.update({c: ["duckdb_errors.py"] for c in _translated() if c not in errors.CODES})
    missing.update({c: [f] for c, f in BUILT_OTHERWISE.items() if c not in errors.CODES})
    assert not missing, f"add these codes to modelsql.errors.CODES: {missing}"


def test_no_code_is_made_up_at_run_time():
    _, dynamic = _raised()
    assert dynamic <= PASSED_ON, f"code= given something other than a literal: {sorted(dynamic - PASSED_ON)}"


def test_the_codes_built_otherwise_are_in_their_files():
    for code, name in BUILT_OTHERWISE.items():
        assert f'"{code}"' in (SOURCE / name).read_text(), (code, name)


def test_every_registered_code_is_raised_somewhere():
    codes, _ = _raised()
    used = set(codes) | _translated() | set(BUILT_OTHERWISE)
    stale = sorted(set(errors.CODES) - used)
    assert not stale, f"registered but never raised (remove them from CODES): {stale}"


def test_every_code_has_a_meaning():
    for code, meaning in errors.CODES.items():
        assert code == code.lower() and code.replace("_", "").isalnum(), code
        assert meaning and "\n" not in meaning and not meaning.endswith("."), code


def test_docs_errors_md_documents_every_code():
    """Regenerate with ``python -m modelsql.engine.documents``."""
    text = (ROOT / "docs" / "errors.md").read_text()
    assert text == errors.codes_markdown()
    for code in errors.CODES:
        assert f"| `{code}` |" in text
