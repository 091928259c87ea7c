"""Planner rules as golden files: ``tests/query/golden/rules/<rule>/<case>.sql`` -> the ``modelsql_plan``
row of its EXPLAIN with ``connection.optimize`` off in ``<case>.before`` and on in ``<case>.after``.

The plan text's estimates come from the cost function's documented defaults (no profile
traces), so it is the same on every machine; each case is also explained twice per mode to
check that nothing in it (a counter, a registered function's name) changes between runs.
DuckDB's own plan below the modelsql rows is not compared: it is DuckDB's to change.
Set ``MODELSQL_UPDATE_GOLDEN=1`` to rewrite the ``.before``/``.after`` files after an
intended change, then review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import modelsql
from conftest import linear_model, make_model
from modelsql.engine.query.rules import RULES

HERE = Path(__file__).parent / "golden" / "rules"
CASES = sorted(HERE.glob("*/*.sql"))


def two_outputs_model():
    """``y = a + b + c`` and ``z = 2a + 2b + 2c``: two outputs, so pruning one is visible."""
    return make_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("MatMul", ["x", "W2"], ["z"])],
        [("x", TensorProto.FLOAT, ["N", 3])],
        [("y", TensorProto.FLOAT, ["N", 1]), ("z", TensorProto.FLOAT, ["N", 1])],
        [("W", np.ones((3, 1), dtype=np.float32)), ("W2", np.full((3, 1), 2.0, dtype=np.float32))],
    )


def relu_model():
    """``y = relu(a + b + c)``: the signature of ``m1`` with another architecture (another fingerprint)."""
    return make_model(
        [helper.make_node("MatMul", ["x", "W"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        [("x", TensorProto.FLOAT, ["N", 3])], [("y", TensorProto.FLOAT, ["N", 1])],
        [("W", np.ones((3, 1), dtype=np.float32))],
    )


@pytest.fixture(scope="module")
def _cpu_only():
    """Golden plans do not depend on the machine: a GPU, where there is one, is hidden
    (``MODELSQL_DEVICES=cpu``), so EXPLAIN weighs the CPU alone, as on CI."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODELSQL_DEVICES", "cpu")
        yield


@pytest.fixture(scope="module")
def ruled(_cpu_only, tmp_path_factory):
    """Models ``m1`` (y = a+b+c), ``m2`` (y = 2(a+b+c)): one family; ``two`` (outputs y and z), ``relu``
    (y = relu(a+b+c)) over features a, b, c;
    pipelines ``p1`` = (front, h1), ``p2`` = (front, h2), ``p3`` = (front2, h1), where ``front`` and
    ``front2`` are different [N,3] -> [N,3] maps; table ``t(id, a, b, c, tag)`` of 4 rows. One connection for
    the module: the cases only EXPLAIN."""
    con = modelsql.connect(str(tmp_path_factory.mktemp("golden") / "golden.duckdb"))
    yield _models_and_pipelines(con)
    con.close()


def _models_and_pipelines(con):
    con.import_model("m1", linear_model(np.ones((3, 1), dtype=np.float32)), features=["a", "b", "c"])
    con.import_model("m2", linear_model(np.full((3, 1), 2.0, dtype=np.float32)), features=["a", "b", "c"])
    con.import_model("two", two_outputs_model(), features=["a", "b", "c"])
    con.import_model("relu", relu_model(), features=["a", "b", "c"])
    con.import_model("front", linear_model(2 * np.eye(3, dtype=np.float32), output_name="h"), features=["a", "b", "c"])
    con.import_model("front2", linear_model(3 * np.eye(3, dtype=np.float32), output_name="h"), features=["a", "b", "c"])
    con.import_model("h1", linear_model(np.ones((3, 1), dtype=np.float32), input_name="h"))
    con.import_model("h2", linear_model(np.full((3, 1), 5.0, dtype=np.float32), input_name="h"))
    for name, steps in (("p1", "front, h1"), ("p2", "front, h2"), ("p3", "front2, h1")):
        con.execute(f"CREATE PIPELINE {name} AS ({steps})")
    con.execute("CREATE TABLE t AS SELECT range AS id, range::DOUBLE AS a, 1.0 AS b, 2 AS c, 'x' AS tag FROM range(4)")
    con.commit()
    return con


def plan_text(con, query: str, optimize: bool) -> str:
    con.optimize = optimize
    try:
        texts = [[v for k, v in con.execute("EXPLAIN " + query).fetchall() if k == "modelsql_plan"] for _ in range(2)]
    finally:
        con.optimize = True
    assert len(texts[0]) == 1, texts[0]
    assert texts[0] == texts[1], "the plan text changed between two EXPLAINs of the same statement"
    return texts[0][0] + "\n"


def test_every_rule_has_golden_cases():
    assert {c.parent.name for c in CASES} == {r.__name__ for r in RULES}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.stem}" for c in CASES])
def test_rule_golden(ruled, case: Path) -> None:
    query = case.read_text(encoding="utf-8").strip().rstrip(";")
    got = {".before": plan_text(ruled, query, False), ".after": plan_text(ruled, query, True)}
    if os.environ.get("MODELSQL_UPDATE_GOLDEN"):
        for suffix, text in got.items():
            case.with_suffix(suffix).write_text(text, encoding="utf-8")
    for suffix, text in got.items():
        assert text == case.with_suffix(suffix).read_text(encoding="utf-8"), suffix
    rule = case.parent.name
    before, after = got[".before"], got[".after"]
    assert "note:" not in before and "SharedInput" not in before and "MaterializedCTE" not in before
    if case.stem.startswith("declined"):
        assert f"note: {rule}" in after
        assert "SharedInput" not in after and "MaterializedCTE" not in after
    elif rule == "predict_share_input":
        assert "SharedInput #0" in after or "MaterializedCTE" in after
    elif rule == "pipeline_share_steps":
        assert "SharedSteps" not in before
        assert "SharedSteps #0" in after or "note: pipeline_share_steps" in after
