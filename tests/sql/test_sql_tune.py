"""Tests of the tuning grammar (modelsql.sql.tune): TUNE MODEL, SHOW / DESCRIBE / DROP STUDY,
and IMPORT / CREATE MODEL ... FROM PYTHON / FROM STUDY.

The forms are also in tests/sql/test_sql_parse.py's STATEMENT_FORMS (registry and round-trip tests);
here are the trees the handlers read, the search-space shapes and the errors.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from modelsql.errors import ProgrammingError
from modelsql.sql import ModelSQL, mentions_models, parse
from modelsql.sql.grammar import ModelRef
from modelsql.sql.models import ImportModel
from modelsql.sql.tune import DescribeStudy, DropStudy, ShowStudies, TuneModel

DESIGN_EXAMPLE = (
    "TUNE MODEL cnn ON TABLE train VALIDATE ON TABLE val TARGET label "
    "SEARCH (lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => (10, 20), gamma => 0.1), "
    "batch_size = CHOICE(32, 64)) USING ASHA WITH (max_epochs = 27, trials = 64, seed = 0);"
)


def parse_one(sql: str) -> exp.Expression:
    trees = parse(sql)
    assert len(trees) == 1, trees
    return trees[0]


def assert_round_trip(tree: exp.Expression) -> None:
    assert tree.find(exp.Command) is None
    for pretty in (False, True):
        generated = tree.sql(dialect=ModelSQL, pretty=pretty)
        assert parse(generated) == [tree], generated


def num(text) -> exp.Literal:
    return exp.Literal.number(text)


def tup(*values) -> exp.Tuple:
    return exp.Tuple(expressions=[num(v) for v in values])


def call(name: str, *args) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def kwarg(name: str, value: exp.Expr) -> exp.Kwarg:
    return exp.Kwarg(this=exp.var(name), expression=value)


# ---------------------------------------------------------------- TUNE MODEL


def test_design_example_tree():
    tree = parse_one(DESIGN_EXAMPLE)
    assert isinstance(tree, TuneModel)
    assert isinstance(tree.this, ModelRef) and tree.this.model_name == "cnn" and tree.this.version_number is None
    assert tree.args["train"] == exp.to_table("train")
    assert tree.args["validate"] == exp.to_table("val")
    assert tree.args["target"] == exp.to_identifier("label")
    search = tree.args["search"]
    assert all(type(item) is exp.EQ and isinstance(item.this, exp.Identifier) for item in search)
    assert [item.this.name for item in search] == ["lr", "batch_size"]
    assert search[0].expression == call(
        "STEP_DECAY",
        kwarg("initial", call("CHOICE", num("0.1"), num("0.05"))),
        kwarg("milestones", tup(10, 20)),
        kwarg("gamma", num("0.1")),
    )
    assert search[1].expression == call("CHOICE", num(32), num(64))
    assert tree.args["algorithm"] == exp.to_identifier("ASHA")
    assert tree.option_values == {"max_epochs": num(27), "trials": num(64), "seed": num(0)}
    assert tree.args["resume"] is False
    assert list(tree.search_space) == ["lr", "batch_size"]
    assert_round_trip(tree)
    assert tree.sql(dialect=ModelSQL) == DESIGN_EXAMPLE.rstrip(";")


def test_query_inputs_version_resume_and_quoted_target():
    tree = parse_one(
        "TUNE MODEL m VERSION 3 ON (SELECT * FROM t WHERE split = 'train') "
        "VALIDATE ON (SELECT * FROM t WHERE split = $1) TARGET \"Label\" SEARCH (a = 1) USING tpe RESUME"
    )
    assert tree.this.version_number == 3
    for key in ("train", "validate"):
        source = tree.args[key]
        assert isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select)
    assert tree.args["validate"].find(exp.Placeholder) is not None
    assert tree.args["target"] == exp.to_identifier("Label", quoted=True)
    assert tree.args["algorithm"].name == "tpe"
    assert tree.args["resume"] is True
    assert tree.args.get("options") is None
    assert_round_trip(tree)


def test_without_validate_the_arg_is_none_and_inputs_are_predicts():
    tree = parse_one("TUNE MODEL m ON TABLE s.t TARGET y SEARCH (a = 1) USING GRID WITH (seed = 0) RESUME")
    assert tree.args.get("validate") is None
    table = tree.args["train"]
    assert isinstance(table, exp.Table) and table.name == "t" and table.db == "s"
    # the same input trees as PREDICT's
    predict = parse_one("SELECT * FROM PREDICT(MODEL m, TABLE s.t)").find(exp.Table).this
    assert predict.expression == table
    for sql in ("(FROM t)", "(VALUES (1, 2))", "(SELECT 1 AS x UNION ALL SELECT 2)"):
        tune = parse_one(f"TUNE MODEL m ON {sql} TARGET y SEARCH (a = 1) USING RANDOM")
        predict = parse_one(f"SELECT * FROM PREDICT(MODEL m, {sql})").find(exp.Table).this
        assert tune.args["train"] == predict.expression
        assert_round_trip(tune)


SPACES = [
    ("CHOICE(0.1, 0.05)", call("CHOICE", num("0.1"), num("0.05"))),
    ("LOGUNIFORM(1e-4, 1e-1)", call("LOGUNIFORM", num("1e-4"), num("1e-1"))),
    # sqlglot would make these its typed Uniform / Rand / Ln: here every call is Anonymous
    ("UNIFORM(0, 1)", call("UNIFORM", num(0), num(1))),
    ("RANDOM(3)", call("RANDOM", num(3))),
    ("LOG(2)", call("LOG", num(2))),
    ("INTEGER(16, 128)", call("INTEGER", num(16), num(128))),
    ("FLOAT(0.5, 1)", call("FLOAT", num("0.5"), num(1))),
    ("choice('adam', 'sgd')", call("choice", exp.Literal.string("adam"), exp.Literal.string("sgd"))),
    (
        "STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => CHOICE((10, 20), (15, 25)), gamma => 0.1, "
        "warmup => 2)",
        call(
            "STEP_DECAY",
            kwarg("initial", call("CHOICE", num("0.1"), num("0.05"))),
            kwarg("milestones", call("CHOICE", tup(10, 20), tup(15, 25))),
            kwarg("gamma", num("0.1")),
            kwarg("warmup", num(2)),
        ),
    ),
    (
        "PIECEWISE(values => (0.1, 0.01, 0.001), milestones => (10, 20))",
        call("PIECEWISE", kwarg("values", tup("0.1", "0.01", "0.001")), kwarg("milestones", tup(10, 20))),
    ),
    # every way of naming an argument is a Kwarg
    ("F(1, a := 2, b = 3, c => 4)", call("F", num(1), kwarg("a", num(2)), kwarg("b", num(3)), kwarg("c", num(4)))),
    ("32", num(32)),
    ("-3", exp.Neg(this=num(3))),
    ("-0.5", exp.Neg(this=num("0.5"))),
    ("'adam'", exp.Literal.string("adam")),
    ("(10, 20)", tup(10, 20)),
    ("(10)", exp.Paren(this=num(10))),
    ("TRUE", exp.true()),
    ("NULL", exp.null()),
    ("relu", exp.column("relu")),
    ("CHOICE(relu, tanh)", call("CHOICE", exp.column("relu"), exp.column("tanh"))),
    ("0.1 * 2", exp.Mul(this=num("0.1"), expression=num(2))),
]


@pytest.mark.parametrize("text,expected", SPACES, ids=[s[0] for s in SPACES])
def test_search_spaces_parse_to_plain_expressions(text, expected):
    tree = parse_one(f"TUNE MODEL m ON TABLE t TARGET y SEARCH (hp = {text}) USING TPE")
    (item,) = tree.args["search"]
    assert type(item) is exp.EQ and item.this == exp.to_identifier("hp")
    assert item.expression == expected, repr(item.expression)
    assert not list(item.expression.find_all(exp.PropertyEQ))
    assert_round_trip(tree)


def test_search_calls_outside_tune_keep_sqlglots_functions():
    # the Anonymous reading is for SEARCH spaces only
    assert isinstance(parse_one("SELECT UNIFORM(0, 1)").expressions[0], exp.Uniform)
    tree = parse(
        "TUNE MODEL m ON TABLE t TARGET y SEARCH (p = UNIFORM(0, 1)) USING TPE; SELECT UNIFORM(0, 1)"
    )
    assert isinstance(tree[0].args["search"][0].expression, exp.Anonymous)
    assert isinstance(tree[1].expressions[0], exp.Uniform)


def test_search_separators_and_placeholders():
    tree = parse_one("TUNE MODEL m ON TABLE t TARGET y SEARCH (a := 1, b => CHOICE(?, $2), c = ?) USING TPE")
    assert [type(i) for i in tree.args["search"]] == [exp.EQ, exp.EQ, exp.EQ]
    assert len(list(tree.find_all(exp.Placeholder))) == 3
    assert "SEARCH (a = 1, b = CHOICE(?, $2), c = ?)" in tree.sql(dialect=ModelSQL)
    assert_round_trip(tree)


@pytest.mark.parametrize("word", ["limit", "order", "default", "version", "model", "type", "target", "search"])
def test_keyword_like_names_round_trip(word):
    # (table names are sqlglot's: it quotes reserved ones when generating, as in PREDICT's TABLE t)
    sql = (f"TUNE MODEL {word} ON TABLE t VALIDATE ON TABLE v TARGET {word} "
           f"SEARCH ({word} = CHOICE(1, 2)) USING {word} WITH ({word} = 1)")
    tree = parse_one(sql)
    assert tree.args["target"] == exp.to_identifier(word)
    assert_round_trip(tree)


def test_explain_tune_reaches_modelsql_and_its_body_parses():
    body = "TUNE MODEL m ON TABLE t TARGET y SEARCH (lr = LOGUNIFORM(1e-4, 1e-1)) USING TPE"
    assert mentions_models(f"EXPLAIN {body}")
    assert mentions_models("explain tune model m on table t target y search (a = 1) using tpe")
    (command,) = parse(f"EXPLAIN {body}")
    assert isinstance(command, exp.Command) and command.this.upper() == "EXPLAIN"
    assert isinstance(parse_one(command.expression.name), TuneModel)
    assert not mentions_models("EXPLAIN SELECT 'TUNE MODEL m'")


# ------------------------------------------------------------- the studies


def test_study_statements():
    assert parse_one("SHOW STUDIES") == ShowStudies()
    assert parse_one("SHOW STUDIES").args == {}
    describe = parse_one('DESCRIBE STUDY "My Study"')
    assert isinstance(describe, DescribeStudy)
    assert describe.this == exp.to_identifier("My Study", quoted=True)
    drop = parse_one("DROP STUDY IF EXISTS s")
    assert isinstance(drop, DropStudy)
    assert drop.this == exp.to_identifier("s") and drop.args["exists"] is True
    assert parse_one("DROP STUDY s").args["exists"] is False
    for tree in (describe, drop):
        assert_round_trip(tree)


@pytest.mark.parametrize("sql", ["DESCRIBE study", "DESCRIBE study.t", "DESCRIBE STUDY.t", "SELECT * FROM study"])
def test_a_table_called_study_stays_duckdbs(sql):
    assert parse(sql) == sqlglot.parse(sql, read="duckdb")
    assert not mentions_models(sql)


# ------------------------------------------------ CREATE MODEL FROM PYTHON / STUDY


def test_create_model_from_python():
    tree = parse_one("CREATE MODEL IF NOT EXISTS m FROM PYTHON 'pkg.models.cnn:build' WITH (width = 64)")
    assert isinstance(tree, ImportModel)
    assert tree.args["source"] == exp.Literal.string("pkg.models.cnn:build")
    assert tree.args["python"] is True
    assert tree.args.get("study") is None and tree.args.get("trial") is None
    assert tree.args["exists"] is True and tree.args["replace"] is False
    assert tree.option_values == {"width": num(64)}
    assert tree.sql(dialect=ModelSQL) == (
        "IMPORT MODEL IF NOT EXISTS m FROM PYTHON 'pkg.models.cnn:build' WITH (width = 64)"
    )
    assert_round_trip(tree)
    assert parse_one("IMPORT MODEL m FROM PYTHON 'a:b'") == parse_one("CREATE MODEL m FROM PYTHON 'a:b'")
    assert parse_one("IMPORT MODEL m FROM PYTHON 'mod:Net.build'").args["source"].name == "mod:Net.build"


def test_create_model_from_study():
    tree = parse_one("CREATE OR REPLACE MODEL m FROM STUDY s TRIAL 12 WITH (a = 'x')")
    assert isinstance(tree, ImportModel)
    assert tree.args.get("source") is None
    assert not tree.args.get("python")
    assert tree.args["study"] == exp.to_identifier("s")
    assert tree.args["trial"] == num(12)
    assert tree.args["replace"] is True
    assert_round_trip(tree)

    best = parse_one("IMPORT MODEL m FROM STUDY \"S t\"")
    assert best.args["study"] == exp.to_identifier("S t", quoted=True)
    assert best.args.get("trial") is None
    assert best.sql(dialect=ModelSQL) == 'IMPORT MODEL m FROM STUDY "S t"'
    assert_round_trip(best)


def test_a_file_import_is_unchanged():
    tree = parse_one("IMPORT MODEL m FROM 'python.onnx'")
    assert tree.args["source"] == exp.Literal.string("python.onnx")
    assert not tree.args.get("python") and tree.args.get("study") is None
    # a quoted word after FROM is a path or a name, never PYTHON / STUDY
    assert parse_one("IMPORT MODEL m FROM 'study'").args["source"] == exp.Literal.string("study")
    with pytest.raises(ProgrammingError, match="quoted file path"):
        parse('IMPORT MODEL m FROM "PYTHON" \'a:b\'')


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "sql,column,text,fragment",
    [
        ("TUNE MODEL ON TABLE t", 12, "ON", "Expected a model name"),
        ("TUNE MODEL m TABLE t TARGET y SEARCH (a = 1) USING TPE", 14, "TABLE",
         "Expected ON TABLE <name> or ON (SELECT ...) after the model name"),
        ("TUNE MODEL m ON t TARGET y SEARCH (a = 1) USING TPE", 17, "t", "Expected TABLE <name> or (SELECT ...) after ON"),
        ("TUNE MODEL m ON (t) TARGET y SEARCH (a = 1) USING TPE", 17, "(", "Expected a query in parentheses after ON"),
        ("TUNE MODEL m ON TABLE", 17, "TABLE", "Expected a table name after TABLE"),
        ("TUNE MODEL m ON TABLE t VALIDATE TABLE v TARGET y SEARCH (a = 1) USING TPE", 34, "TABLE",
         "after VALIDATE"),
        ("TUNE MODEL m ON TABLE t VALIDATE ON v TARGET y SEARCH (a = 1) USING TPE", 37, "v",
         "Expected TABLE <name> or (SELECT ...) after VALIDATE ON"),
        ("TUNE MODEL m ON TABLE t SEARCH (a = 1) USING TPE", 25, "SEARCH", "Expected TARGET <column>"),
        ("TUNE MODEL m ON TABLE t TARGET 'y' SEARCH (a = 1) USING TPE", 32, "'y'", "Expected a column name after TARGET"),
        ("TUNE MODEL m ON TABLE t TARGET y USING TPE", 34, "USING", "Expected SEARCH (name = space, ...)"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH a = 1 USING TPE", 41, "a", "Expected ( after SEARCH"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH () USING TPE", 42, ")", "SEARCH needs at least one hyperparameter"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (lr CHOICE(1, 2)) USING TPE", 45, "CHOICE",
         "Expected = after the hyperparameter name in SEARCH"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (lr) USING TPE", 44, ")",
         "Expected = after the hyperparameter name in SEARCH"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (= 1) USING TPE", 42, "=", "Expected a hyperparameter name"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1, ) USING TPE", 49, ")", "Expected a hyperparameter name"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = ) USING TPE", 46, ")", "Expected a search space after ="),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1 2) USING TPE", 48, "2", "Expecting )"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1) TPE", 49, "TPE", "Expected USING <algorithm>"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1)", 47, ")", "Expected USING <algorithm>"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1) USING 'tpe'", 55, "'tpe'", "Expected a search algorithm"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1) USING TPE WITH (x 1)", 67, "1", "Expected = after the option"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1) USING TPE RESUME x", 66, "x", "Unexpected token"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1) USING TPE RESUME WITH (x = 1)", 66, "WITH",
         "Unexpected token"),
        ("SHOW STUDIES x", 14, "x", "Unexpected token"),
        ("DESCRIBE STUDY s t", 18, "t", "Unexpected token"),
        ("DROP STUDY IF EXISTS", 15, "EXISTS", "Expected a study name"),
        ("DROP STUDY s VERSION 2", 14, "VERSION", "Unexpected token"),
        ("IMPORT MODEL m 'x'", 16, "'x'", "Expected FROM '<file>', FROM PYTHON"),
        ("IMPORT MODEL m FROM x", 21, "x", "Expected a quoted file path, PYTHON 'package.module:function' or STUDY"),
        ("IMPORT MODEL m FROM PYTHON", 21, "PYTHON", "Expected a quoted 'package.module:function' after FROM PYTHON"),
        ("IMPORT MODEL m FROM PYTHON ?", 28, "?", "Expected a quoted 'package.module:function' after FROM PYTHON"),
        ("IMPORT MODEL m FROM PYTHON 'cnn'", 28, "'cnn'", "Expected 'package.module:function' after FROM PYTHON"),
        ("IMPORT MODEL m FROM PYTHON 'a b:c'", 28, "'a b:c'", "Expected 'package.module:function'"),
        ("IMPORT MODEL m FROM PYTHON 'a:b:c'", 28, "'a:b:c'", "Expected 'package.module:function'"),
        ("IMPORT MODEL m FROM STUDY", 21, "STUDY", "Expected a study name after FROM STUDY"),
        ("IMPORT MODEL m FROM STUDY s TRIAL", 29, "TRIAL", "Expected an integer trial number after TRIAL"),
        ("IMPORT MODEL m FROM STUDY s TRIAL 1.5", 35, "1.5", "Expected an integer trial number after TRIAL"),
        ("IMPORT MODEL m FROM STUDY s VERSION 2", 29, "VERSION", "Unexpected token"),
    ],
)
def test_errors_point_at_the_offending_token(sql, column, text, fragment):
    with pytest.raises(ProgrammingError) as info:
        parse(sql)
    error = info.value
    assert error.code == "parse_error"
    assert fragment in str(error), str(error)
    assert (error.line, error.column) == (1, column), str(error)
    assert sql[column - 1:].startswith(text)
    assert str(error).splitlines()[-1].strip() == "^" * len(text)


def test_a_one_item_tuple_in_a_search_space_keeps_its_comma():
    """CHOICE((4,), (4, 4)) is two tuples (hidden_layer_sizes): regenerated as (4) it would be the number 4, another
    study definition; a tuple of one elsewhere (VALUES (4)) is left as DuckDB writes it."""
    tree = parse("TUNE MODEL m ON TABLE t TARGET y SEARCH (h = CHOICE((4,), (4, 4))) USING GRID")[0]
    assert "CHOICE((4,), (4, 4))" in tree.sql(dialect=ModelSQL)
    assert_round_trip(tree)
    assert "(VALUES (4))" in parse("SELECT * FROM (VALUES (4)) v(a)")[0].sql(dialect=ModelSQL)
