"""Issue 6, items 11 and 12: how parameters are read, and the documented way to import a
scikit-learn pipeline that selects columns by name.

Parameters: a sequence is read by index ``0 .. len - 1``, as sqlite3 and psycopg read
one, so a sequence whose iteration differs from its indexing binds what indexing gives,
and an exception from its own ``__len__`` or ``__getitem__`` reaches the caller
unchanged (sqlite3 lets it propagate too).

scikit-learn: the README's way is a pandas DataFrame (pandas comes with the ``sklearn``
extra): a ``ColumnTransformer`` pipeline fitted on one, imported with
``import_model``, predicts by column name what the estimator predicts. Real DuckDB
files, real skl2onnx and ONNX Runtime, scikit-learn's shipped wine data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import modelsql

# ----------------------------------------------------------------------- item 11: parameters


class ReversedIteration(Sequence):
    """Indexing gives ``values``; iteration gives them backwards."""

    def __init__(self, values) -> None:
        self.values = list(values)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i):
        return self.values[i]

    def __iter__(self):
        return iter(reversed(self.values))


class LengthFails(Sequence):
    """``__len__`` raises; indexing alone would give one value, then IndexError."""

    class Boom(Exception):
        pass

    def __len__(self) -> int:
        raise self.Boom("no length today")

    def __getitem__(self, i):
        if i >= 1:
            raise IndexError(i)
        return 1


class ItemFails(Sequence):
    """Two values long; reading the second raises."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        if i == 1:
            raise KeyError("second value unreadable")
        return 1


def test_sequence_is_read_by_index(con):
    assert con.execute("SELECT ?, ?", ReversedIteration([1, 2])).fetchall() == [(1, 2)]
    assert con.execute("SELECT $1 || $2", ReversedIteration(["a", "b"])).fetchone() == ("ab",)


def test_executemany_reads_each_sequence_by_index(con):
    cur = con.cursor()
    cur.execute("CREATE TABLE t (id INTEGER, s VARCHAR)")
    cur.executemany("INSERT INTO t VALUES (?, ?)", [ReversedIteration([1, "a"]), ReversedIteration([2, "b"])])
    assert cur.rowcount == 2
    assert cur.execute("SELECT id, s FROM t ORDER BY id").fetchall() == [(1, "a"), (2, "b")]


def test_error_from_len_or_getitem_reaches_the_user(con):
    cur = con.cursor()
    with pytest.raises(LengthFails.Boom, match="no length today"):
        cur.execute("SELECT ?", LengthFails())
    with pytest.raises(KeyError, match="second value unreadable"):
        cur.execute("SELECT ?, ?", ItemFails())
    with pytest.raises(LengthFails.Boom):
        cur.executemany("SELECT ?", [[1], LengthFails()])
    assert cur.execute("SELECT ?", [7]).fetchone() == (7,)  # the cursor still works


def test_parameters_that_cannot_be_indexed_or_are_a_mapping(con):
    with pytest.raises(modelsql.ProgrammingError, match="must be a sequence") as exc:
        con.execute("SELECT ?", {"a": 1}.values())  # sized and iterable, not indexable
    assert exc.value.code == "invalid_argument"
    with pytest.raises(modelsql.NotSupportedError, match="qmark") as exc:
        con.execute("SELECT ?", {"a": 1})
    assert exc.value.code == "paramstyle"


def test_numpy_scalars_and_arrays_as_parameters(con):
    values = np.array([3, 4], dtype=np.int64)  # an array is a sequence of NumPy scalars
    assert con.execute("SELECT ? + ?", values).fetchone() == (7,)
    assert con.execute("SELECT ?, ?", (np.float32(0.5), np.bool_(True))).fetchone() == (0.5, True)


# ----------------------------------------------------------------------- item 12: pandas


def test_sklearn_and_dev_extras_install_pandas():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for extra in ("sklearn", "dev"):
        names = {re.match(r"[\w.-]+", req).group(0).lower() for req in extras[extra]}
        assert "pandas" in names, (extra, extras[extra])


def test_column_transformer_pipeline_fitted_on_a_dataframe(con):
    """The README's way: fit on a pandas DataFrame, import, PREDICT binds columns by name."""
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df, y = load_wine(as_frame=True, return_X_y=True)
    assert isinstance(df, pd.DataFrame)
    df["hue_band"] = np.where(df["hue"] > 1.0, "high", "low")  # a text column, one-hot encoded
    numeric = ["alcohol", "malic_acid", "color_intensity", "proline", "flavanoids"]
    pipe = make_pipeline(
        ColumnTransformer([("num", StandardScaler(), numeric), ("text", OneHotEncoder(), ["hue_band"])]),
        LogisticRegression(max_iter=1000),
    ).fit(df, y)
    con.import_model("wine", pipe)

    # the table has every column, in another order, plus an id: PREDICT picks by name
    table = df[list(reversed(df.columns))].assign(id=np.arange(len(df)))
    con.register("wine_frame", table)
    con.execute("CREATE TABLE wine AS SELECT * FROM wine_frame")
    con.unregister("wine_frame")
    con.commit()
    rows = con.execute("SELECT id, label, probabilities FROM PREDICT(MODEL wine, TABLE wine) ORDER BY id").fetchall()

    assert [r[0] for r in rows] == list(range(len(df)))
    np.testing.assert_array_equal([r[1] for r in rows], pipe.predict(df))
    np.testing.assert_allclose(np.array([r[2] for r in rows]), pipe.predict_proba(df), atol=1e-5)


def test_pipeline_columns_keep_their_own_names_and_unused_ones_are_not_needed(tmp_path):
    """skl2onnx renames "a/b" to a_b (and a real a_b to a_b1): PREDICT must bind the pipeline's own
    column names, never another column that happens to have the changed name; columns the
    ColumnTransformer drops are not needed in the table."""
    pd = pytest.importorskip("pandas")
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rs = np.random.RandomState(0)
    X = pd.DataFrame({"a/b": rs.rand(200), "c": rs.rand(200), "unused col": rs.rand(200)})
    pipe = make_pipeline(ColumnTransformer([("n", StandardScaler(), ["a/b", "c"])]), LogisticRegression())
    pipe.fit(X, (X["a/b"] > 0.5).astype(int))
    con = modelsql.connect(str(tmp_path / "c.duckdb"))
    con.import_model("m", pipe, example_input=X)
    inputs = [r[2] for r in con.execute("DESCRIBE MODEL m").fetchall() if r[0] == "input"]
    assert inputs == ["a/b", "c"]
    con.register("t", X.drop(columns=["unused col"]).assign(a_b=1 - X["a/b"], id=range(200)))
    got = [r[0] for r in con.execute("SELECT label FROM PREDICT(MODEL m, TABLE t) ORDER BY id").fetchall()]
    assert got == pipe.predict(X).tolist()
    con.close()
