"""The ``modelsql`` command, run for real in a subprocess (``python -m modelsql.client.cli``).

Covers ``-c`` (results, errors with a LINE excerpt and no traceback), ``run FILE``
(statement splitting that respects strings and comments, stopping at the first
error with its position in the file), ``--database``, the shell driven through
stdin (multi-line statements, dot-commands, ``.mode``, ``.help``), tables that
fit the terminal (``$COLUMNS``: values cut, never wrapped; hidden columns named),
``--format line``, ``--version``, and ``quickstart`` end to end (plausible
accuracies, models in the catalog, a re-run leaves the catalog as one run does).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import modelsql
from modelsql.client.cli import is_complete, split_statements
from modelsql.client.display import format_value


def run_cli(tmp_path, *args, stdin: str | None = None, timeout: float = 120, columns: int | None = None):
    """Run ``python -m modelsql.client.cli`` in ``tmp_path``; ``columns`` is the terminal width
    (``$COLUMNS``; without it output is 120 characters wide, as when piped)."""
    env = dict(os.environ)
    env["HOME"] = str(tmp_path)  # keep ~/.modelsql_history out of the real home
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    env.pop("MODELSQL_TRACEBACK", None)
    return subprocess.run(
        [sys.executable, "-m", "modelsql.client.cli", *args],
        cwd=tmp_path,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


# ----------------------------------------------------------------------- -c


def test_command_prints_result(tmp_path):
    r = run_cli(tmp_path, "-d", "t.duckdb", "-c", "SELECT 42 AS answer, 'a;b' AS s, [0.5, 0.25]::FLOAT[2] AS p")
    assert r.returncode == 0, r.stderr
    assert "answer" in r.stdout and "42" in r.stdout and "a;b" in r.stdout
    assert "[0.5, 0.25]" in r.stdout
    assert "1 row" in r.stdout
    assert r.stderr == ""


def test_command_several_statements_print_each(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "-c", "SELECT 1 AS first_one; SELECT 2 AS second_one")
    assert r.returncode == 0, r.stderr
    assert "first_one" in r.stdout and "second_one" in r.stdout


def test_command_syntax_error(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "-c", "SELECT 1 +\nFROM t")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert "ProgrammingError" in r.stderr and "parse_error" in r.stderr
    assert re.search(r"^LINE 2: FROM t$", r.stderr, re.M), r.stderr
    caret = r.stderr.splitlines()[r.stderr.splitlines().index("LINE 2: FROM t") + 1]
    assert caret.strip().startswith("^") and caret.index("^") == len("LINE 2: ")
    assert r.stdout == ""


def test_command_model_error_without_traceback(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "-c", "CREATE TABLE t AS SELECT 1.0 AS a; SELECT * FROM PREDICT(MODEL nope, TABLE t)")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "nope" in r.stderr


def test_csv_and_json_formats(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "--format", "csv", "-c", "SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, NULL ORDER BY a")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["a,b", "1,x", "2,"]
    r = run_cli(tmp_path, "-d", ":memory:", "-f", "json", "-c", "SELECT 1 AS a, [1, 2] AS b")
    assert r.stdout.strip() == '{"a": 1, "b": [1, 2]}'


def test_long_result_is_shortened(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "-c", "SELECT range AS i FROM range(1000)")
    assert r.returncode == 0, r.stderr
    assert "1,000 rows (50 shown)" in r.stdout
    shown = [int(n) for n in re.findall(r"│\s+(\d+) │", r.stdout)]
    assert shown == list(range(25)) + list(range(975, 1000))


def test_version(tmp_path):
    r = run_cli(tmp_path, "--version")
    assert r.returncode == 0
    assert r.stdout.startswith(f"modelsql {modelsql.__version__}")
    r = subprocess.run([sys.executable, "-m", "modelsql", "-c", "SELECT 41 + 1"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)  # python -m modelsql is the shell too
    assert r.returncode == 0 and "42" in r.stdout, r.stderr


def test_bad_arguments(tmp_path):
    r = run_cli(tmp_path, "-c", "SELECT 1", "quickstart")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------- --database


def test_database_option_creates_file(tmp_path):
    r = run_cli(tmp_path, "--database", "sub.duckdb", "-c", "CREATE TABLE t AS SELECT 7 AS x")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "sub.duckdb").exists()
    with modelsql.connect(str(tmp_path / "sub.duckdb")) as con:
        assert con.execute("SELECT x FROM t").fetchall() == [(7,)]


def test_default_database_is_in_working_directory(tmp_path):
    r = run_cli(tmp_path, "-c", "CREATE TABLE t AS SELECT 1 AS x")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "modelsql.duckdb").exists()


# ----------------------------------------------------------------------- run FILE

SCRIPT = """\
-- a script; with comments
CREATE TABLE t (id INTEGER, s VARCHAR);
INSERT INTO t VALUES (1, 'a;b'), (2, 'it''s; here');  /* a ; in a comment */
SELECT id, s FROM t ORDER BY id;
SELECT count(*) AS semis
FROM t
WHERE s LIKE '%;%';
SELECT $$dollar;quoted$$ AS d
"""


def test_run_file(tmp_path):
    (tmp_path / "script.sql").write_text(SCRIPT)
    r = run_cli(tmp_path, "--database", "r.duckdb", "run", "script.sql")
    assert r.returncode == 0, r.stderr
    assert "a;b" in r.stdout and "it's; here" in r.stdout
    assert re.search(r"│\s+2 │", r.stdout)  # both rows contain ';'
    assert "dollar;quoted" in r.stdout
    with modelsql.connect(str(tmp_path / "r.duckdb")) as con:
        assert con.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_run_file_database_after_subcommand(tmp_path):
    (tmp_path / "s.sql").write_text("CREATE TABLE u AS SELECT 3 AS y;")
    r = run_cli(tmp_path, "run", "s.sql", "--database", "after.duckdb")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "after.duckdb").exists()


def test_run_file_stops_at_first_error(tmp_path):
    (tmp_path / "bad.sql").write_text(
        "CREATE TABLE t AS SELECT 1 AS x;\n"
        "SELECT 'before' AS marker;\n"
        "SELECT x\n"
        "  FROM t WHERE;\n"
        "CREATE TABLE never AS SELECT 1;\n"
    )
    r = run_cli(tmp_path, "--database", "b.duckdb", "run", "bad.sql")
    assert r.returncode == 1
    assert "before" in r.stdout
    assert "Traceback" not in r.stderr
    # positioned in the file: line 4, with the excerpt renumbered to the file's lines
    assert r.stderr.startswith("bad.sql:4:"), r.stderr
    assert "LINE 4:" in r.stderr and "^" in r.stderr
    with modelsql.connect(str(tmp_path / "b.duckdb")) as con:
        tables = {row[0] for row in con.execute("SHOW TABLES").fetchall()}
    assert "t" in tables and "never" not in tables


def test_run_missing_file(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "run", "nope.sql")
    assert r.returncode == 1
    assert "nope.sql" in r.stderr and "Traceback" not in r.stderr


# ----------------------------------------------------------------------- shell


def test_shell_through_stdin(tmp_path):
    stdin = (
        "CREATE TABLE shelltab AS\n"
        "  SELECT 41 + 1 AS x;\n"
        ".tables\n"
        "SELECT x,\n"
        "       'semi;colon' AS s\n"
        "FROM shelltab;\n"
        "SELECT missing_column FROM shelltab;\n"
        "SELECT 'still running' AS after_error;\n"
        ".quit\n"
        "SELECT 'not reached' AS nope;\n"
    )
    r = run_cli(tmp_path, "-d", "shell.duckdb", stdin=stdin)
    assert "Traceback" not in r.stderr
    assert "shelltab" in r.stdout  # .tables
    assert "42" in r.stdout and "semi;colon" in r.stdout
    assert "missing_column" in r.stderr
    assert "still running" in r.stdout
    assert "not reached" not in r.stdout
    assert r.returncode == 1  # piped input with a failed statement


def test_shell_help_models_and_eof(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", stdin=".help\n.models\nSELECT 5 AS five")  # EOF ends the last statement
    assert r.returncode == 0, r.stderr
    assert ".tables" in r.stdout  # help text
    assert "name" in r.stdout  # SHOW MODELS header
    assert "five" in r.stdout


def test_shell_models_lists_the_catalog_beside_a_user_table_named_models(tmp_path):
    """``.models`` is the catalog's listing: a user's table named ``models`` (which makes a plain
    ``SHOW MODELS`` ambiguous, issue 22) does not turn it into an error."""
    r = run_cli(tmp_path, "-d", ":memory:", "-f", "csv",
                stdin="CREATE TABLE models (x INTEGER);\n.models\nSHOW MODELS;\n")
    assert r.stdout.startswith("name,"), r.stdout  # the catalog's header, printed by .models
    assert r.stderr.count("ambiguous_statement") == 1, r.stderr  # the plain spelling alone names the ambiguity


@pytest.fixture
def models_db(tmp_path, digits_pipe):
    """Name of a database file in tmp_path holding model ``digits`` (64 named features,
    so its SHOW MODELS row is far wider than a terminal)."""
    with modelsql.connect(str(tmp_path / "m.duckdb")) as con:
        con.import_model("digits", digits_pipe, features=[f"pixel_{i}" for i in range(64)])
    return "m.duckdb"


def _show_models_columns(tmp_path, db) -> list[str]:
    with modelsql.connect(str(tmp_path / db), read_only=True) as con:
        return [d[0] for d in con.execute("SHOW MODELS").description]


def test_show_models_fits_80_columns_and_names_hidden_ones(tmp_path, models_db):
    r = run_cli(tmp_path, "-d", models_db, "-c", "SHOW MODELS", columns=80)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, r.stdout
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 1 and "digits" in rows[0], r.stdout  # one line: no value wraps
    shown = re.findall(r"┃ (\w+)\s", lines[1])
    footer = " ".join(lines[next(i for i, line in enumerate(lines) if line.startswith("└")) + 1:])
    hidden = [c.strip() for c in re.search(r"hidden: ([\w, ]+)\)", footer).group(1).split(",")]
    assert shown[0] == "name" and len(shown) >= 4, r.stdout
    assert sorted(shown + hidden) == sorted(_show_models_columns(tmp_path, models_db)), r.stdout
    assert ".mode line" in footer


def test_mode_line_shows_every_column_whole(tmp_path, models_db):
    r = run_cli(tmp_path, "-d", models_db, stdin=".mode\n.mode line\nSHOW MODELS;\n.mode\n", columns=80)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("current mode: table\n") and "current mode: line" in r.stdout
    names = _show_models_columns(tmp_path, models_db)
    width = max(map(len, names))
    for name in names:
        assert re.search(rf"^ *{name} = \S", r.stdout, re.M), (name, r.stdout)
        assert f"{name:>{width}} = " in r.stdout
    assert "pixel_0, pixel_1" in r.stdout and "pixel_63" in r.stdout  # text is not cut
    assert "┃" not in r.stdout


def test_format_line_and_bad_mode(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "-f", "line", "-c",
                "SELECT 1 AS a, 'x y' AS long_name UNION ALL SELECT 2, NULL ORDER BY a")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "        a = 1\nlong_name = x y\n\n        a = 2\nlong_name = NULL\n"
    r = run_cli(tmp_path, "-d", ":memory:", stdin=".mode wide\nSELECT 1 AS still_here;\n")
    assert r.returncode == 1
    assert 'Unknown mode "wide"' in r.stderr and "line" in r.stderr
    assert "still_here" in r.stdout


def test_wide_values_are_cut_not_wrapped(tmp_path):
    sql = ("SELECT TIMESTAMPTZ '2026-01-02 03:04:05.678+00' AS created_at, "
           "repeat('word ', 40) AS long_text, 42 AS answer")
    r = run_cli(tmp_path, "-d", ":memory:", "-c", sql, columns=80)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, r.stdout
    (row,) = [line for line in lines if line.startswith("│")]
    assert "2026-01-02 03:04:05.678" in row and "42" in row and re.search(r"│ word word[ \w]*… │", row)
    assert "long values cut in long_text" in " ".join(lines[-2:])


def test_arrays_in_a_narrow_column_show_fewer_elements(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", "-c",
                "SELECT 1 AS id, range(1000, 1020) AS arr, repeat('x', 50) AS pad", columns=34)
    assert r.returncode == 0, r.stderr
    assert "│ [1000, 1001, … (20)] │" in r.stdout, r.stdout  # not "[1000, 1001, 100…"
    assert "hidden: pad" in " ".join(r.stdout.split())


def test_explain_plan_is_shown_whole(tmp_path):
    sql = ("EXPLAIN SELECT g, count(*) AS n FROM (SELECT range % 7 AS g FROM range(1000)) "
           "WHERE g > 1 GROUP BY g ORDER BY n DESC")
    with modelsql.connect(":memory:") as con:
        plan = "\n".join(value for _, value in con.execute(sql).fetchall())
    assert len(plan) > 400  # longer than the 200 characters a table cell keeps of one line
    r = run_cli(tmp_path, "-d", ":memory:", "-c", sql)
    assert r.returncode == 0, r.stderr
    for line in plan.splitlines():
        if line.strip():
            assert line.rstrip() in r.stdout, (line, r.stdout)


def test_help_documents_predict_options_and_explain(tmp_path):
    from modelsql.engine.options.declared import STATEMENTS

    r = run_cli(tmp_path, "-d", ":memory:", stdin=".help\n")
    assert r.returncode == 0, r.stderr
    for option in ("on_null", "features", "batch_size", "backend", "execution"):
        assert re.search(rf"^  {option} = ", r.stdout, re.M), option  # each with its values
    flat = " ".join(r.stdout.split())
    for options in STATEMENTS:  # every statement's options, from their declarations
        assert f"{options.statement}: {', '.join(options.names)}" in flat, options.statement
    assert "EXPLAIN [ANALYZE]" in r.stdout and ".mode" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


def test_help_of_a_statement_lists_its_options(tmp_path):
    r = run_cli(tmp_path, "-d", ":memory:", stdin=".help serve\n.help TUNE\n")
    assert r.returncode == 0, r.stderr
    assert "Options of SERVE" in r.stdout and "  max_batch_size (integer; default 32)" in r.stdout
    assert "[from 1 to 1,048,576]" in r.stdout and "Options of TUNE MODEL" in r.stdout
    r = run_cli(tmp_path, "-d", ":memory:", stdin=".help nothing\n")
    assert r.returncode == 1 and "statements with options: PREDICT" in r.stderr


# ----------------------------------------------------------------------- helpers (in process)


def test_split_statements_respects_strings_and_comments():
    text = "SELECT ';' AS a; -- c;\nSELECT 2 /* ; */;\n\nSELECT $$x;y$$, E'\\';' ;  SELECT 4"
    stmts = split_statements(text)
    assert [s.text for s in stmts] == [
        "SELECT ';' AS a;",
        "-- c;\nSELECT 2 /* ; */;",
        "SELECT $$x;y$$, E'\\';' ;",
        "SELECT 4",
    ]
    assert [s.line for s in stmts] == [1, 1, 4, 4]
    assert split_statements(" ; ;\n-- only a comment\n") == []


def test_is_complete():
    assert is_complete("SELECT 1;")
    assert is_complete("SELECT 1; -- trailing comment")
    assert not is_complete("SELECT 1")
    assert not is_complete("SELECT ';")
    assert not is_complete("SELECT 1 /* ; ")
    assert not is_complete("   ")


def test_format_value_shortens_arrays():
    assert format_value([0.01, 0.98, 0.005, 0.001, 0.002, 0.0, 0.0, 0.0, 0.0, 0.004]) == "[0.01, 0.98, 0.005, … (10)]"
    assert format_value((1, 2)) == "[1, 2]"
    assert format_value(None) == "NULL"
    assert format_value(1.0) == "1.0"


# ----------------------------------------------------------------------- quickstart


def _accuracies(stdout: str) -> dict[str, float]:
    m = re.search(r"Overall test accuracy:(.*)", stdout)
    assert m, stdout[-2000:]
    return {name: float(acc) for name, acc in re.findall(r"(\w+) ([01]\.\d+)", m.group(1))}


def test_quickstart_end_to_end(tmp_path):
    started = time.perf_counter()
    r = run_cli(tmp_path, "quickstart", timeout=300)  # default database: ./modelsql.duckdb
    elapsed = time.perf_counter() - started
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    assert "Traceback" not in r.stderr
    out = r.stdout
    # the SQL is shown before its results
    assert "FROM PREDICT(MODEL digits_mlp, TABLE digits_test)" in out
    assert out.index("GROUP BY target") < out.index("│       9 │")
    assert "SHOW MODELS" in out and "storage" in out and "DESCRIBE MODEL digits_mlp" in out
    assert "TUNE MODEL digits_cnn" in out and "digits_cnn_study │ finished" in out
    acc = _accuracies(out)
    assert set(acc) == {"digits_mlp", "breast_cancer_logreg", "iris_forest"}, acc
    assert all(a > 0.8 for a in acc.values()), acc
    assert str(tmp_path / "modelsql.duckdb") in out
    assert elapsed < 120, elapsed

    with modelsql.connect(str(tmp_path / "modelsql.duckdb"), read_only=True) as con:
        names = {row[0] for row in con.execute("SHOW MODELS").fetchall()}
        assert {"digits_mlp", "breast_cancer_logreg", "iris_forest"} <= names
        tables = {row[0] for row in con.execute("SHOW TABLES").fetchall()}
        assert {"digits_train", "digits_test", "breast_cancer_test", "iris_test"} <= tables
        n, correct = con.execute(
            "SELECT count(*), sum((label = target)::INT) FROM PREDICT(MODEL digits_mlp, TABLE digits_test)"
        ).fetchone()
        assert n == 450 and correct / n > 0.8

    assert "earlier run" not in out
    first = _catalog_state(tmp_path)

    # re-runnable on the same database: it says it replaces the models, and leaves the
    # catalog and the store as one run does (one version of each, the same blobs)
    r2 = run_cli(tmp_path, "quickstart", timeout=300)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert _accuracies(r2.stdout) == acc  # deterministic
    assert "digits_cnn_study │ finished │       4 │" in r2.stdout  # the study resumed: nothing to train
    with modelsql.connect(str(tmp_path / "modelsql.duckdb"), read_only=True) as con:
        assert con.execute("SELECT epochs_trained FROM modelsql.studies").fetchone() == (12,)
    said = " ".join(r2.stdout.split())
    assert "Replacing the models of an earlier run: breast_cancer_logreg, digits_mlp, iris_forest" in said
    assert _catalog_state(tmp_path) == first
    # the trainable the study tuned is listed too, of kind 'trainable' (issue 22 item 8)
    assert {name: versions for name, versions, *_ in first[0]} == {
        "digits_mlp": 1, "breast_cancer_logreg": 1, "iris_forest": 1, "digits_cnn": 1}
    with modelsql.connect(str(tmp_path / "modelsql.duckdb"), read_only=True) as con:
        cur = con.execute("SHOW MODELS")
        cols = [d[0] for d in cur.description]
        shown = {row[0]: (row[cols.index("kind")], row[cols.index("inputs")]) for row in cur.fetchall()}
        assert shown["digits_cnn"] == ("trainable", "factory: modelsql.zoo:cnn")
    # the study validated on training rows (not the test table) and says what its figures mean
    assert "FROM digits_train WHERE id % 5 = 0" in r2.stdout
    assert "never on the test table" in said and "lowest val_loss" in said


def _catalog_state(tmp_path):
    """(name, versions, param_count, logical_bytes) per model, the storage row, and the blob files."""
    with modelsql.connect(str(tmp_path / "modelsql.duckdb"), read_only=True) as con:
        cur = con.execute("SHOW MODELS")
        cols = [d[0] for d in cur.description]
        models = sorted(tuple(row[cols.index(c)] for c in ("name", "versions", "param_count", "logical_bytes"))
                        for row in cur.fetchall())
        storage = con.execute("SELECT * FROM modelsql.storage").fetchall()
    blobs = sorted(p.name for p in (tmp_path / "modelsql.duckdb.blobs").rglob("*") if p.is_file())
    return models, storage, blobs


CONSOLE_SCRIPT = shutil.which("modelsql", path=str(Path(sys.executable).parent)) or shutil.which("modelsql")
"""The console script of this environment (beside its Python, also when the environment is not activated)."""


@pytest.mark.skipif(CONSOLE_SCRIPT is None, reason="console script not installed")
def test_console_script(tmp_path):
    r = subprocess.run([CONSOLE_SCRIPT, "--version"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("modelsql ")


def test_json_format_is_strict_json(tmp_path):
    import json as _json

    r = run_cli(tmp_path, "-d", ":memory:", "-f", "json", "-c",
                "SELECT 'nan'::DOUBLE AS a, ['inf'::FLOAT, 1.5] AS b, INTERVAL 1 DAY AS c")
    assert r.returncode == 0, r.stderr
    row = _json.loads(r.stdout.strip(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert row == {"a": None, "b": [None, 1.5], "c": "P1DT0S"}


@pytest.mark.parametrize("own", ["model", "table"])
def test_quickstart_leaves_a_users_own_models_and_tables_alone(tmp_path, own):
    """./modelsql.duckdb is the shell's default: a model or table of the quickstart's names that an
    earlier run did not make is the user's, and the quickstart refuses rather than replace it."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    db = str(tmp_path / "modelsql.duckdb")
    with modelsql.connect(db) as con:
        if own == "model":
            X, y = load_iris(return_X_y=True)
            con.import_model("iris_forest", LogisticRegression(max_iter=500).fit(X, y))
        else:
            con.execute("CREATE TABLE iris_train AS SELECT 42 AS mine")
    r = run_cli(tmp_path, "quickstart", timeout=120)
    assert r.returncode != 0
    assert "quickstart did not make" in r.stderr + r.stdout and "--database" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
    with modelsql.connect(db, read_only=True) as con:
        if own == "model":
            assert con.execute("SELECT source FROM modelsql.models").fetchall() == [("sklearn:LogisticRegression",)]
        else:
            assert con.execute("SELECT * FROM iris_train").fetchall() == [(42,)]


def test_line_mode_arrays_whole_help_options_and_a_closed_pipe(tmp_path):
    r = run_cli(tmp_path, "--format", "line", "-c", "SELECT range(30) AS a, 'x' || chr(10) || 'y' AS t")
    assert "a = [0, 1, 2" in r.stdout and "28, 29]" in r.stdout  # every element, none cut
    assert "t = x\n    y" in r.stdout  # a second line sits under the value
    r = run_cli(tmp_path, stdin=".help\n")
    assert "on_error = 'error' | 'null' | 'skip'" in r.stdout and "isolate_rows = true | false" in r.stdout
    shell = f"{sys.executable} -m modelsql.client.cli --format csv -c 'SELECT * FROM range(300000)' | head -2"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", shell], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.split() == ["range", "0"] and "Error" not in r.stderr and r.returncode == 0, r.stderr
