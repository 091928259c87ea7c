"""Lineage and tags (issue 25, part 4): every model version records where it came from (a file and its digest,
an object, a Python reference, the query and rows it was trained on, a study's trial, the pipeline FINETUNE started
from) in modelsql.model_origins, the modelsql.lineage view gives the graph, DESCRIBE MODEL shows it; tags on models
and versions (ALTER MODEL m [VERSION n] SET TAG / DROP TAG), as MLflow's registry keeps them."""

from __future__ import annotations

import hashlib

import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

import modelsql
from modelsql.converters import to_onnx


@pytest.fixture
def con(tmp_path):
    c = modelsql.connect(str(tmp_path / "l.duckdb"))
    c.autocommit = True
    x, y = load_iris(return_X_y=True)
    c.execute("CREATE TABLE iris AS SELECT * FROM (SELECT unnest(?) AS f0, unnest(?) AS f1, unnest(?) AS y)",
              [x[:, 0].tolist(), x[:, 1].tolist(), y.tolist()])
    yield c
    c.close()


def test_each_way_in_records_its_origin(con, tmp_path):
    x, y = load_iris(return_X_y=True)
    estimator = LogisticRegression(max_iter=300).fit(x[:, :2], y)
    con.import_model("m", estimator, features=["f0", "f1"])
    proto, *_ = to_onnx(estimator, feature_names=["f0", "f1"])
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    con.execute(f"CREATE OR REPLACE MODEL m FROM '{path}' WITH (features = (f0, f1))")
    con.execute("CREATE OR REPLACE MODEL m WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM iris")
    rows = con.execute("SELECT version, origin, source, digest FROM modelsql.model_origins ORDER BY version").fetchall()
    assert rows[0][:3] == (1, "object", "sklearn:LogisticRegression") and rows[0][3] is None
    assert rows[1] == (2, "file", str(path), "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest())
    assert rows[2][:3] == (3, "query", "SELECT * FROM iris") and rows[2][3].startswith("rows:150:")
    described = {r[0]: r for r in con.execute("DESCRIBE MODEL m VERSION 2").fetchall()}
    assert described["origin"][2] == "file" and str(path) in described["origin"][5]
    con.execute("DROP MODEL m VERSION 2")
    assert [r[0] for r in con.execute("SELECT version FROM modelsql.lineage WHERE name = 'm'").fetchall()] == [1, 3]


def test_the_same_rows_give_the_same_fingerprint_and_other_rows_another(con):
    for i in range(2):
        con.execute("CREATE OR REPLACE MODEL m WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM iris")
    con.execute("CREATE OR REPLACE MODEL m WITH (model_type = 'logistic_reg', target = y) AS "
                "SELECT * FROM iris WHERE f0 > 5")
    digests = [r[0] for r in con.execute("SELECT digest FROM modelsql.model_origins ORDER BY version").fetchall()]
    assert digests[0] == digests[1] != digests[2]


def test_a_pipeline_version_links_to_its_step_versions(con):
    x, y = load_iris(return_X_y=True)
    con.import_model("head", LogisticRegression(max_iter=300).fit(x[:, :2], y), features=["f0", "f1"])
    con.execute("CREATE PIPELINE p AS (head)")
    edges = con.execute("SELECT kind, name, version, relation, parent_kind, parent_name, parent_version "
                        "FROM modelsql.lineage WHERE kind = 'pipeline'").fetchall()
    assert edges == [("pipeline", "p", 1, "step", "model", "head", 1)]


def test_tags_on_models_and_versions(con):
    x, y = load_iris(return_X_y=True)
    con.import_model("m", LogisticRegression(max_iter=300).fit(x[:, :2], y), features=["f0", "f1"])
    con.import_model("m", LogisticRegression(max_iter=300, C=0.1).fit(x[:, :2], y), features=["f0", "f1"],
                     replace=True)
    con.execute("ALTER MODEL m SET TAG owner = 'ana'")
    con.execute("ALTER MODEL m VERSION 2 SET TAG stage = 'staging'")
    con.execute("ALTER MODEL m VERSION 2 SET TAG stage = 'production'")  # replaced
    tags = [(r[2], r[5]) for r in con.execute("DESCRIBE MODEL m VERSION 2").fetchall() if r[0] == "tag"]
    assert tags == [("owner", "ana (the model's)"), ("stage", "production")]
    assert [r for r in con.execute("DESCRIBE MODEL m VERSION 1").fetchall() if r[0] == "tag"][0][2] == "owner"
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("ALTER MODEL m VERSION 2 DROP TAG stag")
    assert info.value.code == "tag_not_found" and 'Did you mean "stage"' in str(info.value)
    assert con.execute("ALTER MODEL m VERSION 2 DROP TAG IF EXISTS stag").rowcount == 0
    assert con.execute("ALTER MODEL m VERSION 2 DROP TAG stage").rowcount == 1
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("ALTER MODEL m VERSION 7 SET TAG a = 'b'")
    assert info.value.code == "version_not_found"
    con.execute("DROP MODEL m")
    assert con.execute("SELECT count(*) FROM modelsql.model_tags").fetchone() == (0,)


def test_imported_pipeline_steps_record_their_origin(con):
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_iris(return_X_y=True)
    pipeline = Pipeline([("sc", StandardScaler()), ("lr", LogisticRegression(max_iter=300))]).fit(x[:, :2], y)
    con.import_pipeline("pp", pipeline, example_input=x[:20, :2], features=["f0", "f1"])
    origins = con.execute("SELECT name, origin, source FROM modelsql.model_origins ORDER BY name").fetchall()
    assert [(n, o) for n, o, _ in origins] == [("pp__lr", "object"), ("pp__sc", "object")]
    assert "step lr of an imported pipeline" in origins[0][2]


def test_a_query_with_parameters_records_their_values(con):
    con.execute("CREATE MODEL m WITH (model_type = 'logistic_reg', target = y) AS SELECT * FROM iris WHERE f0 > ?",
                [4.5])
    source = con.execute("SELECT source FROM modelsql.model_origins WHERE name = 'm'").fetchone()[0]
    assert source == "SELECT * FROM iris WHERE f0 > $1 -- parameters: [4.5]"


def test_training_rows_and_the_validation_evaluation_are_the_rows_as_evaluate_reads_them(con):
    """CREATE MODEL's evaluation of its validation rows is fingerprinted over every column of the query (a key it
    never feeds too), so BEST BY compares it with an EVALUATE of the same rows; rows ``on_null = 'skip'`` left out
    are not among the rows a version was trained on."""
    con.execute("CREATE TABLE t AS SELECT row_number() OVER () AS id, * FROM iris")
    con.execute("CREATE MODEL m WITH (model_type = 'logistic_reg', target = y, validation = 'seq', "
                "validation_size = 0.2) AS SELECT * FROM t ORDER BY id")
    con.execute("CREATE OR REPLACE MODEL m WITH (model_type = 'decision_tree_classifier', target = y, max_depth = 1, "
                "validation = 'none') AS SELECT * FROM t WHERE id <= 120")
    con.execute("EVALUATE MODEL m VERSION 2 ON (SELECT * FROM t WHERE id > 120) TARGET y")
    row = con.execute("ALTER MODEL m SET ALIAS champion = BEST BY accuracy").fetchone()
    assert row[7] == 2 and row[8] is None  # CREATE MODEL's own evaluation of ids 121..150 is compared
    con.execute("CREATE TABLE n AS SELECT * REPLACE (CASE WHEN id % 10 = 0 THEN NULL ELSE f0 END AS f0) FROM t")
    con.execute("CREATE MODEL k WITH (model_type = 'logistic_reg', target = y, on_null = 'skip') AS SELECT * FROM n")
    con.execute("EVALUATE MODEL k ON (SELECT * FROM n WHERE f0 IS NOT NULL) TARGET y")  # exactly its training rows
    with pytest.raises(modelsql.ProgrammingError) as info:
        con.execute("ALTER MODEL k SET ALIAS a = BEST BY accuracy ON (SELECT * FROM n WHERE f0 IS NOT NULL)")
    assert info.value.code == "no_evaluation" and "training query" in str(info.value)


def test_rows_read_through_arrow_are_fingerprinted_in_their_own_types(con):
    """An ENUM or UUID column arrives in Arrow as text: hashed as DuckDB's own type again, the rows a version trained on
    (here without the rows on_null = 'skip' left out) are those an EVALUATE of them reads."""
    con.execute("CREATE TYPE kind AS ENUM ('a', 'b', 'c')")
    con.execute("CREATE TABLE u AS SELECT (['a', 'b', 'c'][(row_number() OVER () % 3)::INT + 1])::kind AS k, "
                "uuid() AS u, CASE WHEN f0 > 7 THEN NULL ELSE f0 END AS f0, f1, y FROM iris")
    con.execute("CREATE MODEL e WITH (model_type = 'logistic_reg', target = y, features = (f0, f1), on_null = 'skip') "
                "AS SELECT * FROM u")
    con.execute("EVALUATE MODEL e ON (SELECT * FROM u WHERE f0 IS NOT NULL) TARGET y")
    with pytest.raises(modelsql.ProgrammingError) as info:  # the version's own training rows: never compared
        con.execute("ALTER MODEL e SET ALIAS a = BEST BY accuracy ON (SELECT * FROM u WHERE f0 IS NOT NULL)")
    assert info.value.code == "no_evaluation" and "training query" in str(info.value)
