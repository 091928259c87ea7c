"""The feature columns of statements that train (TUNE, FINETUNE, CREATE MODEL ... FROM PYTHON; issue 22, item 1):
they are bound by PREDICT's rules. Keys (``id``, ``*_id``, a table's PRIMARY KEY and UNIQUE columns) are never
fed, ``features = (...)`` names the columns, and the columns used are recorded: ``DESCRIBE STUDY``'s
``features``, the features of the model made from the study or by FINETUNE, which PREDICT then binds by name.
Real DuckDB files, real training, iris data."""

from __future__ import annotations

import datetime
import json
import re
import textwrap

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from sklearn.datasets import load_iris  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import modelsql  # noqa: E402
from modelsql.errors import ProgrammingError  # noqa: E402

NAMES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
ROWS = np.random.RandomState(0).permutation(150)
TUNE = ("TUNE MODEL mlp ON {on} TARGET label SEARCH (lr = 0.05, batch_size = 32) USING GRID "
        "WITH (max_epochs = 1, seed = 0{extra})")


def _flowers(con, name: str, rows: np.ndarray) -> None:
    """Table ``name``: ``id`` (PRIMARY KEY), ``customer_id``, ``code`` (UNIQUE, a name no rule calls a key), the
    four iris measurements and ``label``."""
    x, y = load_iris(return_X_y=True)
    cols = {"id": rows.astype(np.int32), "customer_id": (rows % 7).astype(np.int32),
            "code": (rows * 3 + 1).astype(np.int32)}
    cols.update({n: x[rows, i].astype(np.float32) for i, n in enumerate(NAMES)})
    cols["label"] = y[rows].astype(np.int64)
    con.register(f"{name}_arrow", pa.table(cols))
    cur = con.cursor()
    cur.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, customer_id INTEGER, code INTEGER UNIQUE, "
                + ", ".join(f"{n} FLOAT" for n in NAMES) + ", label BIGINT)")
    cur.execute(f"INSERT INTO {name} SELECT * FROM {name}_arrow")
    con.commit()


@pytest.fixture
def con(tmp_path):
    c = modelsql.connect(str(tmp_path / "issue22.duckdb"))
    _flowers(c, "flowers", ROWS[:100])
    _flowers(c, "flowers_val", ROWS[100:])
    c.cursor().execute("CREATE MODEL mlp FROM PYTHON 'modelsql.zoo:mlp' WITH (hidden = 8)")
    yield c
    c.close()


def _study_features(cur, study: str) -> list[str]:
    rows = cur.execute(f"DESCRIBE STUDY {study}").fetchall()
    column = [d[0] for d in cur.description].index("features")
    assert len({tuple(r[column]) for r in rows}) == 1  # the same on every trial's row
    return list(rows[0][column])


def _model_input(cur, model: str) -> tuple[str, str]:
    """(shape, detail) of the model's one input in DESCRIBE MODEL."""
    rows = cur.execute(f"DESCRIBE MODEL {model}").fetchall()
    inputs = [r for r in rows if r[0] == "input"]
    assert len(inputs) == 1
    return inputs[0][4], inputs[0][5]


def test_tune_never_feeds_keys_and_records_its_columns(con):
    cur = con.cursor()
    cur.execute(TUNE.format(on="TABLE flowers", extra=""))
    assert cur.fetchone()[1] == "finished"
    options = json.loads(cur.execute("SELECT options FROM modelsql.studies").fetchone()[0])
    # id and customer_id by their names, code as the table's UNIQUE column
    assert options["features"] == NAMES and options["in_features"] == 4
    assert _study_features(cur, "mlp_study") == NAMES
    cur.execute("CREATE MODEL best FROM STUDY mlp_study")
    assert _model_input(cur, "best") == ("[N, 4]", "features: " + ", ".join(NAMES))
    # the version is EVALUATEd on the study's held-out rows and recorded: its log loss is the trial's val_loss
    loss = cur.execute("SELECT metrics[-1] FROM modelsql.trials WHERE study = 'mlp_study'").fetchone()[0]
    recorded = cur.execute("SELECT version, rows, (metrics->>'log_loss')::DOUBLE, options->>'study', input "
                           "FROM modelsql.evaluations WHERE name = 'best'").fetchall()
    assert len(recorded) == 1 and recorded[0][0] == 1 and recorded[0][3] == "mlp_study"
    assert recorded[0][2] == pytest.approx(loss, rel=1e-4) and "held out of flowers" in recorded[0][4]
    assert cur.execute("SELECT origin, study, trial FROM modelsql.model_origins WHERE name = 'best'").fetchone() == \
        ("study", "mlp_study", 0)
    # PREDICT binds exactly those columns by name: the keys pass through, in any column order
    cur.execute("SELECT id, customer_id, code, label FROM PREDICT(MODEL best, (SELECT petal_width, code, id, "
                "sepal_length, customer_id, petal_length, sepal_width FROM flowers_val))")
    rows = cur.fetchall()
    assert len(rows) == 50 and {r[0] for r in rows} == {int(i) for i in ROWS[100:]}


def test_a_query_input_leaves_out_key_names_and_validate_on_reads_the_same_columns(con):
    cur = con.cursor()
    cur.execute(TUNE.format(on="(SELECT id, customer_id, sepal_length, petal_length, label FROM flowers) "
                               "VALIDATE ON TABLE flowers_val", extra=""))
    assert cur.fetchone()[1] == "finished"
    assert _study_features(cur, "mlp_study") == ["sepal_length", "petal_length"]


def test_features_option_names_the_columns_in_order(con):
    cur = con.cursor()
    cur.execute(TUNE.format(on="TABLE flowers", extra=", features = (petal_width, PETAL_LENGTH), study_name = 'two'"))
    assert _study_features(cur, "two") == ["petal_width", "petal_length"]
    cur.execute("CREATE MODEL two FROM STUDY two")
    assert _model_input(cur, "two") == ("[N, 2]", "features: petal_width, petal_length")
    assert cur.execute("SELECT count(*) FROM PREDICT(MODEL two, TABLE flowers_val)").fetchone() == (50,)


@pytest.mark.parametrize("features,code,words", [
    ("(petal_length, petal_widht)", "column_not_found", ['"petal_widht" not found', 'Did you mean "petal_width"']),
    ("3", "invalid_option", ["must name columns"]),
])
def test_bad_features_are_the_statements_error(con, features, code, words):
    cur = con.cursor()
    with pytest.raises(ProgrammingError) as ei:
        cur.execute(TUNE.format(on="TABLE flowers", extra=f", features = {features}"))
    assert ei.value.code == code and all(w in str(ei.value) for w in words), str(ei.value)
    assert "LINE 1:" in str(ei.value)  # it points at the option
    assert cur.execute("SELECT count(*) FROM modelsql.studies").fetchone() == (0,)


def test_only_keys_left_is_an_error_naming_them(con):
    cur = con.cursor()
    with pytest.raises(ProgrammingError) as ei:
        cur.execute(TUNE.format(on="(SELECT id, customer_id, label FROM flowers)", extra=""))
    assert ei.value.code == "invalid_feature" and "id, customer_id" in str(ei.value) and "features" in str(ei.value)


def _pipeline(con) -> None:
    """An under-fitted scaler + logistic regression on the training rows' measurements (fit on an array, so the
    catalog knows no feature names)."""
    x, y = load_iris(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=0.02)).fit(x[ROWS[:100]].astype(np.float32),
                                                                           y[ROWS[:100]])
    con.import_pipeline("pl", pipe, example_input=x[:20].astype(np.float32))


FINETUNE = ("FINETUNE PIPELINE pl ON TABLE flowers VALIDATE ON TABLE flowers_val TARGET label "
            "WITH (epochs = 60, lr = 0.05, seed = 0, device = 'cpu'{extra})")


def test_finetune_leaves_keys_out_and_its_model_records_the_columns(con):
    _pipeline(con)
    cur = con.cursor()
    cur.execute(FINETUNE.format(extra=""))  # code (UNIQUE) fed too would be 5 columns for a 4-wide pipeline
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["chosen"] == "finetuned" and row["version"] == 2
    assert _model_input(cur, "pl_finetuned") == ("[N, 4]", "features: " + ", ".join(NAMES))
    # PREDICT of the new version binds the recorded columns by name, whatever their order
    cur.execute("SELECT id, label FROM PREDICT(PIPELINE pl, (SELECT petal_width, id, petal_length, sepal_width, "
                "sepal_length FROM flowers_val))")
    assert len(cur.fetchall()) == 50


def test_finetune_features_option(con):
    _pipeline(con)
    cur = con.cursor()
    cur.execute("CREATE TABLE shuffled AS SELECT label, petal_width AS pw, sepal_length AS sl, sepal_width AS sw, "
                "petal_length AS pl, id FROM flowers")
    cur.execute("FINETUNE PIPELINE pl ON TABLE shuffled TARGET label WITH (epochs = 60, lr = 0.05, seed = 0, "
                "device = 'cpu', features = (sl, sw, pl, pw))")
    assert cur.fetchone()[2] == "finetuned"
    assert _model_input(cur, "pl_finetuned") == ("[N, 4]", "features: sl, sw, pl, pw")
    cases = [(", features = (petal_length)", "feature_mismatch", "1 feature columns"),
             (", features = (sepal_length, sepal_width, petal_length, petal_widht)", "column_not_found",
              'Did you mean "petal_width"'),
             (", features = (sepal_length, label)", "invalid_option", "TARGET column 'label'"),
             (", features = (sepal_length, SEPAL_LENGTH)", "invalid_option", 'column "SEPAL_LENGTH" twice')]
    for extra, code, words in cases:
        with pytest.raises(ProgrammingError) as ei:
            cur.execute(FINETUNE.format(extra=extra))
        assert ei.value.code == code and words in str(ei.value), str(ei.value)


def test_a_python_programs_example_table_leaves_its_keys_out(con, tmp_path, monkeypatch):
    (tmp_path / "issue22_net.py").write_text(textwrap.dedent("""
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 2)

            def forward(self, x):
                return self.lin(x)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cur = con.cursor()
    cur.execute("CREATE TABLE measured AS SELECT code, " + ", ".join(NAMES) + " FROM flowers")
    cur.execute("ALTER TABLE measured ADD PRIMARY KEY (code)")
    # code, the PRIMARY KEY, is no input: the example is the four measurements, as PREDICT feeds them
    cur.execute("CREATE MODEL net FROM PYTHON 'issue22_net:Net' WITH (example = measured)")
    assert cur.execute("SELECT count(*) FROM PREDICT(MODEL net, TABLE measured)").fetchone() == (100,)


def test_from_study_of_a_study_read_with_parameters_records_its_rows_as_tune_read_them(con):
    """A study read with ``?`` keeps their values and EVALUATE's fingerprint of its ON rows as TUNE read them: the
    version made FROM STUDY is evaluated on the held-out rows, read again with the kept values, and its lineage
    digest is those rows' fingerprint. Once the rows changed, the digest stays TUNE's and no evaluation is recorded
    (the rows split again would hold rows the version was trained on)."""
    cur = con.cursor()
    on = "(SELECT * FROM flowers WHERE id >= ? AND sepal_length > ?)"
    cur.execute(TUNE.format(on=on, extra=""), [0, 0.0])
    assert cur.fetchone()[1] == "finished"
    expected = cur.execute(f"SELECT count(*) FROM {on.replace('?', '0')}").fetchone()[0]
    cur.execute("CREATE MODEL best FROM STUDY mlp_study")
    cur.execute("CREATE OR REPLACE TABLE flowers_now AS SELECT * FROM flowers")
    cur.execute("DELETE FROM flowers WHERE id % 2 = 0")  # the rows change after the TUNE
    con.commit()
    cur.execute("CREATE OR REPLACE MODEL best FROM STUDY mlp_study")
    digests = cur.execute("SELECT version, digest FROM modelsql.model_origins WHERE name = 'best' ORDER BY version"
                          ).fetchall()
    assert [v for v, _ in digests] == [1, 2] and digests[0][1] == digests[1][1]
    assert digests[0][1].startswith(f"rows:{expected}:")
    evaluated = cur.execute("SELECT version FROM modelsql.evaluations WHERE name = 'best'").fetchall()
    assert evaluated == [(1,)]  # the held-out rows of the TUNE's rows; none once they changed


def test_parameters_in_on_and_validate_on_each_read_their_own(con):
    """ON and VALIDATE ON each take the statement's values they name (both were given every value: a mismatch)."""
    cur = con.cursor()
    cur.execute("TUNE MODEL mlp ON (SELECT * FROM flowers WHERE id >= ?) VALIDATE ON (SELECT * FROM flowers_val "
                "WHERE id >= ? AND ? IS NOT NULL) TARGET label SEARCH (lr = 0.05, batch_size = 32) USING GRID "
                "WITH (max_epochs = 1, seed = 0)", [0, 0, datetime.timedelta(days=4)])
    assert cur.fetchone()[1] == "finished"
    cur.execute("CREATE MODEL best FROM STUDY mlp_study")  # the values kept, an interval among them
    assert cur.execute("SELECT rows FROM modelsql.evaluations WHERE name = 'best'").fetchall() == [(50,)]


def test_an_option_error_of_explain_tune_points_at_the_option(con):
    sql = "EXPLAIN\n  " + TUNE.format(on="TABLE flowers", extra=", max_epochs = 0").replace("max_epochs = 1, ", "")
    with pytest.raises(ProgrammingError) as info:
        con.cursor().execute(sql)
    line = sql.splitlines()[1]
    assert (info.value.line, info.value.column) == (2, line.index("max_epochs = 0") + 1)


@pytest.mark.parametrize("on, validate", [
    ('(SELECT sepal_length, sepal_length AS "SEPAL_LENGTH", label FROM flowers)', "TABLE flowers_val"),
    ("TABLE flowers", '(SELECT sepal_length, petal_width AS "Sepal_Length", label FROM flowers_val)'),
])
def test_tune_refuses_an_input_with_two_columns_of_one_name_in_two_cases(con, on, validate):
    """Read as ``SELECT * FROM (query)``, DuckDB renamed the second spelling (``SEPAL_LENGTH_1``) and TUNE trained on a
    column no PREDICT input has; it is refused as CREATE MODEL ... AS refuses it, naming the clause, before any
    trial, and the catalog keeps no study."""
    cur = con.cursor()
    clause = "VALIDATE ON" if validate.startswith("(") else "ON"
    with pytest.raises(ProgrammingError, match=f'TUNE {clause}: the query has two columns named "sepal_length"') as e:
        cur.execute(TUNE.format(on=f"{on} VALIDATE ON {validate}", extra=""))
    assert e.value.code == "duplicate_column"
    assert cur.execute("SELECT count(*) FROM modelsql.studies").fetchone()[0] == 0


def test_finetune_refuses_an_input_with_two_columns_of_one_name_in_two_cases(con):
    _pipeline(con)
    cur = con.cursor()
    on = ('(SELECT sepal_length, sepal_width, petal_length, petal_width, petal_width AS "Petal_Width", label '
          "FROM flowers)")
    with pytest.raises(ProgrammingError, match='FINETUNE ON: the query has two columns named "petal_width"') as e:
        cur.execute(FINETUNE.format(extra="").replace("ON TABLE flowers VALIDATE", f"ON {on} VALIDATE"))
    assert e.value.code == "duplicate_column"
    assert cur.execute("SELECT count(*) FROM modelsql.models WHERE name = 'pl_finetuned'").fetchone()[0] == 0


def test_the_column_check_runs_no_query_and_sees_names_a_sequence_would_hide(con):
    """The names of an ON query are DuckDB's DESCRIBE of it: a query with nextval is read once (a relation of it
    ran it once more, its sequence moving twice per row) and its two spellings of one name are refused (run, DuckDB
    had already renamed the second); a CTE that writes is refused before it runs."""
    cur = con.cursor()
    cur.execute("CREATE SEQUENCE reads; CREATE TABLE journal (i INTEGER)")
    con.commit()
    cur.execute(TUNE.format(on="(SELECT nextval('reads') AS row_id, sepal_length, petal_width, label FROM flowers)",
                            extra=""))
    assert cur.execute("SELECT currval('reads')").fetchone() == (100,)
    with pytest.raises(ProgrammingError, match='two columns named "sepal_length" and "Sepal_Length"'):
        cur.execute(TUNE.format(on="(SELECT nextval('reads') AS row_id, sepal_length, petal_width AS "
                                   '"Sepal_Length", label FROM flowers)', extra=""))
    with pytest.raises(ProgrammingError, match="TUNE ON: .*data-modifying"):
        cur.execute(TUNE.format(on="(WITH w AS (INSERT INTO journal VALUES (1) RETURNING i) SELECT sepal_length, "
                                   "label FROM flowers, w)", extra=""))
    assert cur.execute("SELECT count(*) FROM journal").fetchone() == (0,)


@pytest.mark.parametrize("on, says", [
    ("(SELECT * FROM PREDICT(PIPELINE pl, TABLE flowers))", "PREDICT"),
    ("(SELECT * FROM EVALUATE(MODEL pl_finetuned, TABLE flowers, target = label))", "EVALUATE(...)"),
    ("(SELECT * FROM (SHOW MODELS))", "a listing of modelsql's (SHOW ..., DESCRIBE ...)"),
])
def test_a_table_function_of_modelsqls_in_the_input_is_refused_before_anything_reads_it(con, on, says):
    """FINETUNE checked the input's column names before it refused a PREDICT in it, and failed with an InternalError
    (sqlglot asked for DuckDB SQL of a PREDICT); an EVALUATE(...) in TUNE's input was a bare ValueError."""
    _pipeline(con)
    cur = con.cursor()
    for statement in (FINETUNE.format(extra="").replace("ON TABLE flowers VALIDATE", f"ON {on} VALIDATE"),
                      TUNE.format(on=on, extra="")):
        with pytest.raises(modelsql.NotSupportedError, match=f"ON: an input with {re.escape(says)} is not") as e:
            cur.execute(statement)
        assert e.value.code == "tune_input_predict"
