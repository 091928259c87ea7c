"""SQL logic tests: end-to-end behaviour written as SQL, in the style of DuckDB's sqllogictest.

Each ``tests/sql/sqllogic/*.test`` file runs top to bottom on one fresh file
database (a PEP 249 connection in autocommit mode). Records, separated by
blank lines::

    statement ok
    <SQL>

    statement error <code>            -- the modelsql Error's .code must equal <code>
    <SQL>

    query
    <SQL>
    ----
    <expected rows, one per line, values separated by a tab; NULL for None>

``${MODELS}`` in SQL (and in expected rows, with ``${SHA256:file}``, a built file's digest) is replaced by a folder holding the ONNX models built by
:func:`_build_models` (plain onnx.helper graphs). Lines starting with ``#`` are comments.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

import modelsql
from conftest import linear_model, save, scale_model

HERE = Path(__file__).parent / "sqllogic"
FILES = sorted(HERE.glob("*.test"))


def _build_models(folder: Path) -> None:
    save(linear_model(np.ones((3, 1), dtype=np.float32)), folder / "sum3.onnx")  # y = a + b + c
    save(linear_model(np.array([[1.0], [-1.0]], dtype=np.float32)), folder / "diff2.onnx")  # y = a - b
    save(scale_model(2.0), folder / "double.onnx")  # y = 2 x
    save(scale_model(3.0), folder / "triple.onnx")  # y = 3 x


def _records(text: str):
    blocks, current = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                blocks.append(current)
                current = []
            continue
        current.append(line)
    if current:
        blocks.append(current)
    for block in blocks:
        head, body = block[0].split(), block[1:]
        if head[0] == "statement":
            yield head[1], (head[2] if len(head) > 2 else None), "\n".join(body), None
        elif head[0] == "query":
            sep = body.index("----") if "----" in body else len(body)
            yield "query", None, "\n".join(body[:sep]), body[sep + 1 :]
        else:
            raise ValueError(f"unknown record {block[0]!r}")


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return repr(round(v, 6))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v)


def _expand(expected: str, models: Path) -> str:
    """An expected row with ``${MODELS}`` and ``${SHA256:file}`` (the digest of a built model file) filled in."""
    expected = re.sub(r"\$\{SHA256:([^}]+)\}",
                      lambda m: hashlib.sha256((models / m.group(1)).read_bytes()).hexdigest(), expected)
    return expected.replace("${MODELS}", str(models))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_sqllogic(path: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    _build_models(models)
    con = modelsql.connect(str(tmp_path / "logic.duckdb"))
    con.autocommit = True
    try:
        for kind, expected_code, sql, expected in _records(path.read_text()):
            sql = sql.replace("${MODELS}", str(models))
            where = f"{path.name}: {sql.splitlines()[0]}"
            if kind == "ok":
                con.execute(sql)
            elif kind == "error":
                with pytest.raises(modelsql.Error) as info:
                    con.execute(sql).fetchall()
                assert info.value.code == expected_code, f"{where}: {info.value.code}: {info.value}"
            else:
                rows = con.execute(sql).fetchall()
                got = ["\t".join(_cell(v) for v in row) for row in rows]
                assert got == [_expand(e, models) for e in expected], where
    finally:
        con.close()
