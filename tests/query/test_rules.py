"""Planner rules: what each rewrites, shown in EXPLAIN, and that no rule changes an answer.

Every query here runs twice, with ``connection.optimize`` on and off (DuckDB's
verification mode does the same for its optimizer), and the answers must match.
"""

from __future__ import annotations

import numpy as np
import pytest

from modelsql.engine.query.references import referenced_names  # noqa: F401
from modelsql.engine.query.rules import predict_prune_outputs  # noqa: F401

QUERIES = [
    "SELECT id, label FROM PREDICT(MODEL digits, TABLE digits) ORDER BY id",
    "SELECT label, count(*) AS n FROM PREDICT(MODEL digits, TABLE digits) GROUP BY label ORDER BY label",
    "SELECT id, probabilities FROM PREDICT(MODEL digits, TABLE digits) WHERE id < 20 ORDER BY id",
    "SELECT * FROM PREDICT(MODEL digits, TABLE digits) ORDER BY id LIMIT 30",
    "SELECT p.* FROM PREDICT(MODEL digits, TABLE digits) AS p ORDER BY id LIMIT 30",
    "SELECT id, COLUMNS('prob.*') FROM PREDICT(MODEL digits, TABLE digits) ORDER BY id LIMIT 30",
    "WITH p AS (SELECT * FROM PREDICT(MODEL digits, TABLE digits)) SELECT target, avg((label = target)::INT) "
    "FROM p GROUP BY target ORDER BY target",
    "SELECT count(*) FROM PREDICT(MODEL digits, TABLE digits)",
]


def _outputs_line(con, query: str) -> str:
    rows = con.execute("EXPLAIN " + query).fetchall()
    text = [value for key, value in rows if key == "modelsql_predict"]
    assert len(text) == 1, rows[:2]
    return next(line for line in text[0].splitlines() if line.startswith("outputs:"))


def _normalize(rows):
    out = []
    for row in rows:
        out.append(tuple(tuple(np.round(v, 6)) if isinstance(v, (list, tuple)) else v for v in row))
    return out


@pytest.mark.parametrize("query", QUERIES)
def test_rules_never_change_the_answer(digits_con, query):
    con = digits_con
    con.optimize = True
    optimized = con.execute(query).fetchall()
    con.optimize = False
    plain = con.execute(query).fetchall()
    con.optimize = True
    assert len(plain) > 0
    assert _normalize(optimized) == _normalize(plain)


def test_prune_outputs_keeps_only_what_is_read(digits_con):
    con = digits_con
    assert _outputs_line(con, QUERIES[0]) == "outputs: label BIGINT"
    assert _outputs_line(con, QUERIES[2]) == "outputs: probabilities FLOAT[10]"
    both = "outputs: label BIGINT, probabilities FLOAT[10]"
    for q in (QUERIES[3], QUERIES[4], QUERIES[5], QUERIES[6]):  # *, p.*, COLUMNS(...), a CTE passing * on
        assert _outputs_line(con, q) == both, q
    con.optimize = False
    assert _outputs_line(con, QUERIES[0]) == both


def test_prune_outputs_count_star_is_not_a_select_star(digits_con):
    assert _outputs_line(digits_con, QUERIES[1]) == "outputs: label BIGINT"
