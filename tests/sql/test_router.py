"""Routing a text to DuckDB or to modelsql (issue 22, items 2, 4 and 8, part): a text is answered with the
meaning it has, never silently the other.

* ``SHOW models`` / ``VACUUM models`` (and ``pipelines``, ``studies``, ``servers``) are DuckDB's statements on
  a table as well as modelsql's: with such a table they are refused (``ambiguous_statement``), naming the
  spelling of each; without one they are modelsql's.
* Statement types DuckDB's Python client has no name for (``UPDATE EXTENSIONS``, ``CONNECT`` ...) still go to
  DuckDB, and its errors come back as modelsql errors.
* ``ML.PREDICT(...)`` and a pipeline named as a model (or a model as a pipeline) say what to write.

Real DuckDB files through ``modelsql.connect``; nothing is mocked.
"""

from __future__ import annotations

import pytest

import modelsql
from conftest import save, scale_model

WORDS = ["models", "pipelines", "studies", "servers"]


@pytest.fixture
def model_con(con, tmp_path):
    """``con`` with models ``scale`` and ``head``, pipeline ``pp`` of them and table ``t(x FLOAT)``."""
    path = save(scale_model(2.0), tmp_path / "s.onnx")
    con.execute(f"CREATE MODEL scale FROM '{path}'")
    con.execute(f"CREATE MODEL head FROM '{path}'")
    con.execute("CREATE PIPELINE pp AS (scale, head)")
    con.execute("CREATE TABLE t AS SELECT i::FLOAT AS x FROM range(3) r(i)")
    con.commit()
    return con


def ambiguous(con, sql: str) -> modelsql.ProgrammingError:
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute(sql)
    assert info.value.code == "ambiguous_statement", info.value
    return info.value


# ------------------------------------------------------------ 2. SHOW / VACUUM of a table named like ours


@pytest.mark.parametrize("word", WORDS)
def test_show_of_a_table_named_like_a_catalog_listing_is_refused_naming_both_spellings(con, word):
    con.execute(f"CREATE TABLE {word} (a INTEGER)")
    for sql in (f"SHOW {word}", f"show {word.upper()};", f"-- a note\nSHOW {word}", f"SELECT 1; SHOW {word}",
                f"EXPLAIN SHOW {word}", f"SELECT * FROM (SHOW {word})"):
        err = ambiguous(con, sql)
        message = str(err)
        assert f"DESCRIBE {word}" in message.replace(word.upper(), word), message
        assert f"SHOW MODELSQL {word.upper()}" in message, message
    err = ambiguous(con, f"SELECT 42;\n  SHOW {word}")
    assert (err.line, err.column) == (2, 3)
    assert "EXPLAIN DESCRIBE" in str(ambiguous(con, f"EXPLAIN SHOW {word}"))
    # the refusal ran nothing: the transaction goes on
    assert con.execute("SELECT count(*) FROM " + word).fetchall() == [(0,)]


@pytest.mark.parametrize("word", WORDS)
def test_the_unambiguous_spellings_answer_each_meaning(con, word):
    con.execute(f"CREATE TABLE {word} (a INTEGER, b VARCHAR)")
    for sql in (f"DESCRIBE {word}", f'SHOW "{word}"'):
        cur = con.execute(sql)
        assert [r[:2] for r in cur.fetchall()] == [("a", "INTEGER"), ("b", "VARCHAR")], sql
    cur = con.execute(f"SHOW MODELSQL {word.upper()}")
    assert cur.description is not None and cur.description[0][0] != "column_name"
    assert cur.fetchall() == []


def test_a_view_or_temporary_table_is_a_table_too_but_not_one_outside_the_search_path(con):
    con.execute("CREATE VIEW models AS SELECT 1 AS a")
    ambiguous(con, "SHOW models")
    con.execute("CREATE TEMP TABLE pipelines (a INTEGER)")
    ambiguous(con, "SHOW pipelines")
    con.execute("CREATE SCHEMA elsewhere")
    con.execute("CREATE TABLE elsewhere.studies (a INTEGER)")
    assert con.execute("SHOW studies").fetchall() == []  # the catalog's studies: none yet
    assert con.execute("SHOW studies").description[0][0] == "name"


def test_a_table_made_earlier_in_the_same_text_is_seen(con):
    err = ambiguous(con, "CREATE TABLE models (a INTEGER); SHOW models")
    assert "SHOW MODELSQL MODELS" in str(err)


def test_without_such_a_table_the_text_is_modelsqls(model_con):
    names = [r[0] for r in model_con.execute("SHOW models").fetchall()]
    assert names == ["head", "scale"]
    assert model_con.execute("SHOW MODELSQL MODELS").fetchall() == model_con.execute("SHOW models").fetchall()
    assert [r[0] for r in model_con.execute("SHOW pipelines").fetchall()] == ["pp"]
    cur = model_con.execute("VACUUM models")
    assert [d[0] for d in cur.description] == ["blobs_removed", "bytes_freed"]
    with pytest.raises(modelsql.NotSupportedError) as info:
        model_con.execute("EXPLAIN SHOW models")
    assert info.value.code == "explain_not_supported"
    assert str(info.value).startswith("EXPLAIN SHOW MODELS is not supported: model statements have no plan")
    with pytest.raises(modelsql.NotSupportedError) as info:  # named as written, not as the statement's first form
        model_con.execute("EXPLAIN CREATE MODEL m WITH (model_type = 'logistic_reg', target = y) AS SELECT 1 AS y")
    assert str(info.value).startswith("EXPLAIN CREATE MODEL is not supported")


def test_vacuum_of_a_table_named_models_is_refused_naming_both_spellings(model_con):
    con = model_con
    con.execute("CREATE TABLE models (a INTEGER)")
    con.execute("DROP PIPELINE pp")
    con.execute("DROP MODEL head")
    for sql in ("VACUUM models", "vacuum MODELS;", "/* x */ VACUUM models", "EXPLAIN ANALYZE VACUUM models"):
        err = ambiguous(con, sql)
        assert 'vacuum "models"' in str(err).lower() and "VACUUM MODELSQL MODELS" in str(err), err
    con.execute('VACUUM "models"')  # DuckDB's, on the table
    cur = con.execute("VACUUM MODELSQL MODELS")  # modelsql's
    assert [d[0] for d in cur.description] == ["blobs_removed", "bytes_freed"]
    assert [r[0] for r in con.execute("SHOW MODELSQL MODELS").fetchall()] == ["scale"]


# ------------------------------------------------------------ 4. statements modelsql does not know


@pytest.mark.parametrize("sql", [
    "DISCONNECT",
    "CONNECT nowhere",
    "DESTROY EXTERNAL RESOURCE nothing",
    "UPDATE EXTENSIONS (no_such_extension)",
    "SELECT 1; DISCONNECT",
])
def test_statement_types_without_a_name_go_to_duckdb_and_fail_as_modelsql_errors(con, sql):
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute(sql)
    assert info.value.code == "invalid_input", info.value
    con.rollback()
    assert con.execute("SELECT 2").fetchall() == [(2,)]


def test_a_statement_type_without_a_name_returns_duckdbs_rows(con):
    cur = con.execute("UPDATE EXTENSIONS; SELECT 3")
    assert cur.fetchall() == [(3,)]


# ------------------------------------------------------------ 8. what to write instead


@pytest.mark.parametrize("sql,column", [
    ("SELECT * FROM ML.PREDICT(MODEL scale, TABLE t)", 15),
    ("SELECT ml.predict(MODEL scale, TABLE t)", 8),
    ("SELECT * FROM t JOIN ML.PREDICT(MODEL scale, (SELECT * FROM t)) p ON true", 22),
])
def test_bigquery_ml_predict_says_to_write_predict(model_con, sql, column):
    with pytest.raises(modelsql.ProgrammingError) as info:
        model_con.execute(sql)
    err = info.value
    assert err.code == "parse_error"
    assert "ML.PREDICT is BigQuery ML's spelling; write PREDICT, without ML." in str(err)
    assert (err.line, err.column) == (1, column)
    assert "^^" in str(err)


@pytest.mark.parametrize("sql,says", [
    ("SELECT * FROM ML.EVALUATE(MODEL scale, TABLE t)", "write EVALUATE(MODEL m, TABLE t, target = column)"),
    ("SELECT * FROM ml.confusion_matrix(MODEL scale, TABLE t)", "write CONFUSION_MATRIX(MODEL m"),
    ("SELECT * FROM t JOIN ML.ROC_CURVE(MODEL scale, TABLE t) AS r ON true", "write ROC_CURVE(MODEL m"),
    ("SELECT * FROM ML.TRAINING_INFO(MODEL scale)", "DESCRIBE MODEL m"),
    ("SELECT * FROM ML.FEATURE_IMPORTANCE(MODEL scale)", "no feature-importance"),
])
def test_bigquery_ml_table_functions_say_what_to_write(model_con, sql, says):
    with pytest.raises(modelsql.ProgrammingError) as info:
        model_con.execute(sql)
    assert info.value.code == "parse_error" and "is BigQuery ML's table function" in str(info.value)
    assert says in str(info.value) and "^^" in str(info.value)
    assert model_con.execute("SELECT ml.evaluate FROM (SELECT 1 AS evaluate) AS ml").fetchall() == [(1,)]


def test_bigquery_ml_names_in_backticks_and_with_a_dataset(model_con):
    """```scale``` is DuckDB's quoting, so the model; ```ds.scale``` (one quoted name with a dot) is no model here,
    and the error says a name is one word."""
    assert model_con.execute("SELECT count(*) FROM PREDICT(MODEL `scale`, TABLE t)").fetchone()[0] > 0
    with pytest.raises(modelsql.ProgrammingError) as info:
        model_con.execute("SELECT * FROM PREDICT(MODEL `ds.scale`, TABLE t)")
    assert info.value.code == "model_not_found" and "write scale" in str(info.value), str(info.value)


def test_a_users_ml_schema_with_a_column_named_model_is_plain_sql(con):
    con.execute("CREATE SCHEMA ml")
    con.execute("CREATE MACRO ml.evaluate(model, k := 1) AS model + k")
    con.execute('CREATE MACRO ml.roc_curve("model" := 0) AS TABLE SELECT "model" AS v')
    con.execute("CREATE MACRO ml.training_info(model) AS TABLE SELECT model AS v")
    con.execute("CREATE TABLE models_t AS SELECT range AS model FROM range(3)")
    assert con.execute("SELECT ml.evaluate(model, k := 2) FROM models_t").fetchall() == [(2,), (3,), (4,)]
    assert con.execute("SELECT * FROM ml.roc_curve(model := 3)").fetchall() == [(3,)]
    assert con.execute("SELECT * FROM models_t, ml.training_info(model)").fetchall() == [(0, 0), (1, 1), (2, 2)]


def test_a_macro_called_ml_predict_is_still_called_but_not_with_a_model(con):
    con.execute("CREATE SCHEMA ml")
    con.execute("CREATE MACRO ml.predict(a, b) AS a + b")
    assert con.execute("SELECT ml.predict(1, 2)").fetchall() == [(3,)]
    with pytest.raises(modelsql.ProgrammingError, match="write PREDICT, without ML"):
        con.execute("SELECT ml.predict(MODEL m, TABLE t)")


def test_a_pipeline_named_as_a_model_and_a_model_as_a_pipeline_say_the_right_word(model_con):
    with pytest.raises(modelsql.ProgrammingError) as info:
        model_con.execute("SELECT * FROM PREDICT(MODEL pp, TABLE t)")
    assert info.value.code == "model_not_found"
    assert "PREDICT(PIPELINE pp, TABLE t)" in str(info.value)
    with pytest.raises(modelsql.ProgrammingError) as info:
        model_con.execute("SELECT * FROM PREDICT(PIPELINE scale, TABLE t)")
    assert info.value.code == "pipeline_not_found"
    assert "PREDICT(MODEL scale, TABLE t)" in str(info.value)
    assert [r[-1] for r in model_con.execute("SELECT * FROM PREDICT(PIPELINE pp, TABLE t)").fetchall()] == [0, 4, 8]
