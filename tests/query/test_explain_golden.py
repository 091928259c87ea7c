"""Plan tests as golden files: ``tests/query/golden/NAME.sql`` -> the ``modelsql_predict``
rows of its EXPLAIN in ``tests/query/golden/NAME.out`` (DuckDB's own plan below them is
not compared: it is DuckDB's to change). Set ``MODELSQL_UPDATE_GOLDEN=1`` to
rewrite the ``.out`` files after an intended change, then review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import linear_model

HERE = Path(__file__).parent / "golden"
CASES = sorted(HERE.glob("*.sql"))


@pytest.fixture(autouse=True)
def _cpu_only(monkeypatch):
    """Golden plans do not depend on the machine: a GPU, where there is one, is hidden
    (``MODELSQL_DEVICES=cpu``), so EXPLAIN weighs the CPU alone, as on CI."""
    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")


@pytest.fixture
def planned(con):
    con.import_model("sum3", linear_model(np.ones((3, 1), dtype=np.float32)), features=["a", "b", "c"])
    con.execute("CREATE TABLE t AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2 AS c, 'x' AS tag FROM range(4)")
    return con


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_explain_golden(planned, case: Path) -> None:
    rows = planned.execute("EXPLAIN " + case.read_text().strip().rstrip(";")).fetchall()
    ours = "\n\n".join(value for key, value in rows if key == "modelsql_predict") + "\n"
    golden = case.with_suffix(".out")
    if os.environ.get("MODELSQL_UPDATE_GOLDEN"):
        golden.write_text(ours)
    assert ours == golden.read_text()
