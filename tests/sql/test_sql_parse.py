"""Tests of modelsql's SQL dialect (modelsql.sql): nodes, round-trips, errors, text helpers.

Convention (docs/architecture.md, "Adding a statement"): every form round-trips, parse(gen(parse(x))) == parse(x),
and parses to its own node, never sqlglot's exp.Command fallback.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.errors import InternalError, ProgrammingError
from modelsql.sql import (
    DIALECT,
    MODEL_NODES,
    STATEMENT_NODES,
    DescribeModel,
    DropModel,
    ExportModel,
    ImportModel,
    ModelRef,
    ModelSet,
    ModelSQL,
    ModelSQLGenerator,
    ModelSQLParser,
    ModelSQLTokenizer,
    PredictTable,
    ShowModels,
    StatementTable,
    VacuumModels,
    mentions_models,
    number_placeholders,
    parse,
    to_duckdb_sql,
)
from modelsql.sql.dialect import DEMOTED_COMMANDS, statement_at
from modelsql.sql.finetune import FinetunePipeline
from modelsql.sql.models import TrustModel
from modelsql.sql.pipelines import CreatePipeline, DescribePipeline, DropPipeline, ExportPipeline, ShowPipelines
from modelsql.sql.profile import CompileModel, ProfileModel
from modelsql.sql.registry import statement
from modelsql.sql.serve import Serve, ShowServers, StopServer
from modelsql.sql.tune import DescribeStudy, DropStudy, ShowStudies, TuneModel


def parse_one(sql: str) -> exp.Expression:
    trees = parse(sql)
    assert len(trees) == 1, trees
    return trees[0]


def assert_round_trip(tree: exp.Expression) -> None:
    for pretty in (False, True):
        generated = tree.sql(dialect=ModelSQL, pretty=pretty)
        again = parse(generated)
        assert again == [tree], (generated, again)


# --------------------------------------------------------------- every form

STATEMENT_FORMS = [
    ("IMPORT MODEL digits_mlp FROM 'digits_mlp.onnx'", ImportModel),
    ("import model if not exists digits_mlp from 'digits_mlp.onnx'", ImportModel),
    ("IMPORT MODEL m FROM 'm.onnx' WITH (opset = 17, name = 'x')", ImportModel),
    ("IMPORT MODEL m FROM ?", ImportModel),
    ("IMPORT MODEL m FROM $1", ImportModel),
    ("CREATE MODEL m FROM 'm.onnx'", ImportModel),
    ("CREATE OR REPLACE MODEL m FROM 'm.onnx'", ImportModel),
    ("CREATE OR REPLACE MODEL IF NOT EXISTS \"My Model\" FROM 'm.onnx' WITH (a = 1)", ImportModel),
    ("DROP MODEL m", DropModel),
    ("TRUST MODEL m", TrustModel),
    ("trust model \"My Model\" version 2", TrustModel),
    ("PROFILE MODEL m", ProfileModel),
    ("PROFILE MODEL m VERSION 2 WITH (batch_sizes = (1, 8), threads = (1, 2), repeat = 20)", ProfileModel),
    ("PROFILE PIPELINE p ON TABLE t WITH (repeat = 3)", ProfileModel),
    ("PROFILE MODEL m ON (SELECT * FROM t LIMIT 100)", ProfileModel),
    ("COMPILE MODEL m FOR 'llvm'", CompileModel),
    ("FINETUNE PIPELINE p ON TABLE train TARGET label", FinetunePipeline),
    ("FINETUNE PIPELINE p VERSION 2 ON (SELECT * FROM t) VALIDATE ON TABLE v TARGET y WITH (epochs = 300, "
     "temperature = 0.1, test = holdout)", FinetunePipeline),
    ("COMPILE MODEL m VERSION 2 FOR 'llvm' WITH (tune_trials = 64, batch_size = 8)", CompileModel),
    ("DROP MODEL IF EXISTS m", DropModel),
    ("DROP MODEL m VERSION 2", DropModel),
    ("drop model if exists m version 12", DropModel),
    ("SHOW MODELS", ShowModels),
    ("show models", ShowModels),
    ("SHOW MODELSQL MODELS", ShowModels),
    ("DESCRIBE MODEL m", DescribeModel),
    ("DESCRIBE MODEL m VERSION 3", DescribeModel),
    ("EXPORT MODEL m TO 'out.onnx'", ExportModel),
    ("EXPORT MODEL m VERSION 1 TO 'out.onnx'", ExportModel),
    ("VACUUM MODELS", VacuumModels),
    ("vacuum models", VacuumModels),
    ("VACUUM modelsql MODELS", VacuumModels),
    ("CREATE PIPELINE p AS (tfidf, head)", CreatePipeline),
    ("CREATE PIPELINE p AS (tfidf VERSION 2 AS featurize, head) WITH (description = 'x')", CreatePipeline),
    ("create or replace pipeline if not exists \"P q\" as (m)", CreatePipeline),
    ("DROP PIPELINE p", DropPipeline),
    ("DROP PIPELINE IF EXISTS p VERSION 3", DropPipeline),
    ("SHOW PIPELINES", ShowPipelines),
    ("show modelsql pipelines", ShowPipelines),
    ("DESCRIBE PIPELINE p", DescribePipeline),
    ("DESCRIBE PIPELINE p VERSION 2", DescribePipeline),
    ("EXPORT PIPELINE p TO 'p.onnx'", ExportPipeline),
    ("EXPORT PIPELINE p VERSION 1 TO ?", ExportPipeline),
    ("SERVE PIPELINE p", Serve),
    ("SERVE PIPELINE p VERSION 2 (reserved_threads = 2), MODEL m ON PORT 8100 WITH (max_batch_size = 32)", Serve),
    ("SERVE PIPELINE p ON HOST '0.0.0.0' PORT 9000", Serve),
    ("SERVE ADD PIPELINE q ON PORT 8100", Serve),
    ("serve remove model m", Serve),
    ("STOP SERVER", StopServer),
    ("STOP SERVER ON PORT 8100", StopServer),
    ("SHOW SERVERS", ShowServers),
    ("SHOW MODELSQL SERVERS", ShowServers),
    ("IMPORT MODEL m FROM PYTHON 'models.cnn:build'", ImportModel),
    ("CREATE MODEL IF NOT EXISTS m FROM PYTHON 'pkg.models.cnn:Net.build' WITH (width = 64)", ImportModel),
    ("CREATE OR REPLACE MODEL m FROM PYTHON 'cnn:build'", ImportModel),
    ("IMPORT MODEL m FROM STUDY s", ImportModel),
    ("CREATE MODEL m FROM STUDY s TRIAL 12", ImportModel),
    ("create or replace model if not exists \"M\" from study \"S t\" trial 0 with (a = 1)", ImportModel),
    ("TUNE MODEL cnn ON TABLE train VALIDATE ON TABLE val TARGET label "
     "SEARCH (lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => (10, 20), gamma => 0.1), "
     "batch_size = CHOICE(32, 64)) USING ASHA WITH (max_epochs = 27, trials = 64, seed = 0);", TuneModel),
    ("TUNE MODEL m VERSION 2 ON (SELECT * FROM t WHERE split = 'train') "
     "VALIDATE ON (SELECT * FROM t WHERE split = ?) TARGET \"Label\" "
     "SEARCH (lr = LOGUNIFORM(1e-4, 1e-1), p = UNIFORM(0, 1), width = INTEGER(16, 128), x = -3, "
     "opt = 'adam', ms = (10, 20), "
     "sched = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => CHOICE((10, 20), (15, 25)), gamma => 0.1, "
     "warmup => 2), pw = PIECEWISE(values => (0.1, 0.01, 0.001), milestones => (10, 20))) USING TPE RESUME", TuneModel),
    ("tune model m on table s.t target y search (a := choice(1, 2), b => uniform(0, 1)) using random "
     "with (trials = 4) resume", TuneModel),
    ("TUNE MODEL m ON (FROM t) TARGET y SEARCH (a = 1) USING GRID", TuneModel),
    ("SHOW STUDIES", ShowStudies),
    ("show studies", ShowStudies),
    ("SHOW MODELSQL STUDIES", ShowStudies),
    ("DESCRIBE STUDY s", DescribeStudy),
    ('DESCRIBE STUDY "My Study"', DescribeStudy),
    ("DROP STUDY s", DropStudy),
    ("DROP STUDY IF EXISTS s", DropStudy),
]


@pytest.mark.parametrize("sql,node_type", STATEMENT_FORMS)
def test_statement_forms_parse_to_their_node_and_round_trip(sql, node_type):
    tree = parse_one(sql)
    assert type(tree) is node_type
    assert tree.find(exp.Command) is None
    assert_round_trip(tree)


PREDICT_FORMS = [
    "SELECT * FROM PREDICT(MODEL m, TABLE t)",
    "SELECT * FROM PREDICT(PIPELINE p, TABLE t)",
    "SELECT * FROM PREDICT(PIPELINE p VERSION 2, (SELECT text FROM t), execution = 'batch') AS q",
    "SELECT * FROM PREDICT(MODELS (a, b VERSION 2) ROUTE BY model_name, TABLE t)",
    "SELECT * FROM PREDICT(MODELS FAMILY \"Fam\" ROUTE BY m, (SELECT * FROM t), batch_size = 4) AS p",
    "SELECT * FROM PREDICT(MODEL m VERSION 2, TABLE t)",
    "SELECT * FROM PREDICT(MODEL m, TABLE s.t)",
    "SELECT * FROM PREDICT(MODEL m, TABLE db.s.t) AS p",
    "SELECT * FROM PREDICT(MODEL m, TABLE t) p",
    "SELECT * FROM PREDICT(MODEL m, TABLE t) AS p(a, b)",
    "SELECT * FROM predict(model m, table t)",
    "FROM PREDICT(MODEL m, TABLE t)",
    "SELECT label, count(*) FROM PREDICT(MODEL digits_mlp, TABLE digits) GROUP BY label",
    "SELECT * FROM PREDICT(MODEL m, (SELECT id, text FROM reviews WHERE day = ?))",
    "SELECT * FROM PREDICT(MODEL m, (SELECT id FROM reviews WHERE day = $1)) AS p",
    "SELECT * FROM PREDICT(MODEL m, (WITH q AS (SELECT 1 AS x) SELECT * FROM q))",
    "SELECT * FROM PREDICT(MODEL m, (SELECT 1 AS x UNION ALL SELECT 2))",
    "SELECT * FROM PREDICT(MODEL m, (FROM t))",
    "SELECT * FROM PREDICT(MODEL m, (VALUES (1), (2)))",
    "SELECT * FROM PREDICT(MODEL m, TABLE t, on_null = 'skip')",
    "SELECT * FROM PREDICT(MODEL m, TABLE t, on_null := 'skip', batch_size => 1024)",
    "SELECT * FROM PREDICT(MODEL m, TABLE t, backend = 'onnxruntime', batch_size = 1024)",
    "SELECT * FROM PREDICT(MODEL m, TABLE t, features = (a, b), names = ('a', 'b'))",
    "SELECT * FROM PREDICT(MODEL m, TABLE t, batch_size = ?, threshold = -0.5, strict = TRUE)",
    "SELECT * FROM a, PREDICT(MODEL m, TABLE a) AS p",
    "SELECT * FROM t JOIN PREDICT(MODEL m, TABLE t) AS p ON t.id = p.id",
    "SELECT * FROM t LEFT JOIN PREDICT(MODEL m, (SELECT * FROM t WHERE x > ?)) p USING (id)",
    "SELECT * FROM PREDICT(MODEL a, TABLE t) p JOIN PREDICT(MODEL b VERSION 1, TABLE t) q ON p.id = q.id",
    "WITH p AS (SELECT * FROM PREDICT(MODEL m, TABLE t)) SELECT * FROM p",
    "WITH p AS (SELECT * FROM PREDICT(MODEL m, TABLE t) AS x) SELECT count(*) FROM p WHERE p.label = ?",
    "SELECT * FROM (SELECT * FROM PREDICT(MODEL m, TABLE t)) AS sub",
    "SELECT * FROM t WHERE id IN (SELECT id FROM PREDICT(MODEL m, TABLE t) AS p WHERE p.label = $1)",
    "SELECT * FROM t WHERE id IN (SELECT id FROM PREDICT(MODEL m, (SELECT * FROM t WHERE a = ?)) p)",
    "INSERT INTO out SELECT * FROM PREDICT(MODEL m, TABLE t)",
    "CREATE TABLE out AS SELECT * FROM PREDICT(MODEL m, TABLE t) AS p",
]


@pytest.mark.parametrize("sql", PREDICT_FORMS)
def test_predict_forms_round_trip_and_sit_in_a_table(sql):
    tree = parse_one(sql)
    assert tree.find(exp.Command) is None
    predicts = list(tree.find_all(PredictTable))
    assert predicts, tree
    for node in predicts:
        assert isinstance(node.this, (ModelRef, ModelSet))
        assert isinstance(node.expression, (exp.Table, exp.Subquery))
        # wrapped the way sqlglot wraps table functions
        assert isinstance(node.parent, exp.Table)
        assert node.arg_key == "this"
    assert_round_trip(tree)


# -------------------------------------------------------------- node shapes


def test_import_model_args():
    tree = parse_one(
        "IMPORT MODEL IF NOT EXISTS digits FROM 'd.onnx' WITH (opset = 17, name = 'x', "
        "flag = true, off = FALSE, none = NULL, backend = onnxruntime, features = (a, b, c), "
        "cols = ('a', 'b'), neg = -1.5, one = (a), empty = (), nested = (a, (1, 2)), p = ?)"
    )
    assert isinstance(tree, ImportModel)
    assert tree.args["exists"] is True
    assert tree.args["replace"] is False
    ref = tree.this
    assert isinstance(ref, ModelRef)
    assert ref.this == exp.to_identifier("digits")
    assert ref.args.get("version") is None
    assert ref.model_name == "digits" and ref.version_number is None
    assert tree.args["source"] == exp.Literal.string("d.onnx")
    options = tree.args["options"]
    assert all(isinstance(o, exp.EQ) and isinstance(o.this, exp.Identifier) for o in options)
    values = tree.option_values
    assert list(values) == [
        "opset", "name", "flag", "off", "none", "backend", "features", "cols", "neg", "one",
        "empty", "nested", "p",
    ]
    assert values["opset"] == exp.Literal.number(17)
    assert values["name"] == exp.Literal.string("x")
    assert values["flag"] == exp.true()
    assert values["off"] == exp.false()
    assert isinstance(values["none"], exp.Null)
    assert values["backend"] == exp.to_identifier("onnxruntime")
    assert values["features"] == exp.Tuple(expressions=[exp.to_identifier(c) for c in "abc"])
    assert values["cols"] == exp.Tuple(expressions=[exp.Literal.string("a"), exp.Literal.string("b")])
    assert values["neg"] == exp.Neg(this=exp.Literal.number("1.5"))
    assert values["one"] == exp.Tuple(expressions=[exp.to_identifier("a")])
    assert values["empty"] == exp.Tuple(expressions=[])
    assert isinstance(values["nested"].expressions[1], exp.Tuple)
    assert isinstance(values["p"], exp.Placeholder)
    assert_round_trip(tree)


def test_create_model_forms():
    plain = parse_one("CREATE MODEL m FROM 'm.onnx'")
    assert isinstance(plain, ImportModel) and plain.args["replace"] is False
    # CREATE MODEL is IMPORT MODEL: same tree, generated as IMPORT MODEL
    assert plain == parse_one("IMPORT MODEL m FROM 'm.onnx'")
    assert plain.sql(dialect=ModelSQL) == "IMPORT MODEL m FROM 'm.onnx'"

    replace = parse_one("CREATE OR REPLACE MODEL m FROM 'm.onnx' WITH (features = ('a', 'b'))")
    assert isinstance(replace, ImportModel)
    assert replace.args["replace"] is True
    assert replace.args["exists"] is False
    assert replace.sql(dialect=ModelSQL) == (
        "CREATE OR REPLACE MODEL m FROM 'm.onnx' WITH (features = ('a', 'b'))"
    )


def test_drop_describe_export_args():
    drop = parse_one("DROP MODEL IF EXISTS m VERSION 2")
    assert isinstance(drop, DropModel)
    assert drop.args["exists"] is True
    assert drop.this.args["version"] == exp.Literal.number(2)
    assert drop.this.version_number == 2
    assert parse_one("DROP MODEL m").args["exists"] is False

    describe = parse_one("DESCRIBE MODEL m VERSION 3")
    assert isinstance(describe, DescribeModel)
    assert describe.this.model_name == "m" and describe.this.version_number == 3

    export = parse_one("EXPORT MODEL m VERSION 1 TO 'out.onnx'")
    assert isinstance(export, ExportModel)
    assert export.args["target"] == exp.Literal.string("out.onnx")
    assert export.this.version_number == 1

    assert parse_one("SHOW MODELS").args == {}
    assert parse_one("VACUUM MODELS").args == {}


def test_quoted_model_names_keep_their_quotes():
    tree = parse_one('DROP MODEL "My Model"')
    assert tree.this.this == exp.to_identifier("My Model", quoted=True)
    assert tree.sql(dialect=ModelSQL) == 'DROP MODEL "My Model"'


def test_backticks_quote_names_as_duckdb_allows():
    tree = parse_one("SELECT * FROM PREDICT(MODEL `my model`, TABLE `t`)")
    assert tree.find(ModelRef).this == exp.to_identifier("my model", quoted=True)
    assert to_duckdb_sql(parse_one("SELECT `a b` FROM `t`")) == 'SELECT "a b" FROM "t"'


@pytest.mark.parametrize("sql, dotted", [
    ("SELECT * FROM PREDICT(MODEL ds.m, TABLE t)", "ds.m"),
    ("SELECT * FROM EVALUATE(MODEL ds.m, TABLE t, target = y)", "ds.m"),
    ("EVALUATE MODEL proj.ds ON TABLE t TARGET y", "proj.ds"),
    ("DESCRIBE MODEL ds.m", "ds.m"),
    ("DROP MODEL IF EXISTS ds.m", "ds.m"),
    ("ALTER MODEL ds.m SET ALIAS a = VERSION 1", "ds.m"),
    ("CREATE MODEL ds.m WITH (model_type = 'linear_reg', target = y) AS SELECT * FROM t", "ds.m"),
    ("SELECT 1; DESCRIBE PIPELINE ds.p", "ds.p"),
    ("DESCRIBE MODEL proj.ds.m", "proj.ds.m"),
    ("SELECT * FROM (DESCRIBE MODEL ds.m)", "ds.m"),
    ("CREATE MODEL m FROM STUDY ds.s", "ds.s"),
    ('SELECT * FROM PREDICT(MODEL "my ds"."my model", TABLE t)', '"my ds"."my model"'),
])
def test_a_dotted_model_name_says_names_are_one_word(sql, dotted):
    """BigQuery ML's ``dataset.model``: a clear error pointing at it, whether our statement or DuckDB's parser
    would have failed on it."""
    assert mentions_models(sql)
    with pytest.raises(ProgrammingError) as info:
        parse(sql)
    assert info.value.code == "parse_error" and "one word" in str(info.value) and dotted in str(info.value)
    last = dotted.split(".")[-1]
    assert f"write {last}\n" in str(info.value) and "^" * len(dotted) in str(info.value)  # the last part, as written
    column = sql.splitlines()[0].index(dotted) + 1 if "\n" not in sql else None
    assert info.value.column == column, str(info.value)


@pytest.mark.parametrize("sql, says", [
    ("SELECT * FROM PREDICT(MODEL m VERSION 2 ALIAS champion, TABLE t)", "VERSION n or ALIAS a, not both"),
    ("EVALUATE PIPELINE p ALIAS a ON TABLE t", "a pipeline has no aliases"),
    ("SELECT * FROM PREDICT(PIPELINE p ALIAS a, TABLE t)", "a pipeline has no aliases"),
    ("FINETUNE PIPELINE p ALIAS a ON TABLE t TARGET y", "a pipeline has no aliases"),
    ("SELECT * FROM PREDICT(MODELS (m ALIAS a, n) ROUTE BY r, TABLE t)", "MODELS (...) list names each member's"),
    ("DROP MODEL m ALIAS a", "where a statement uses one version"),
])
def test_alias_where_none_is_taken_says_why(sql, says):
    with pytest.raises(ProgrammingError) as info:
        parse(sql)
    assert info.value.code == "parse_error" and says in str(info.value), str(info.value)


@pytest.mark.parametrize("word", ["limit", "order", "default", "version", "model", "table", "type"])
def test_keyword_like_names_round_trip(word):
    for sql in (
        f"DROP MODEL {word} VERSION 3",
        f"IMPORT MODEL m FROM 'x' WITH ({word} = 1, b = {word}, c = ({word}, 1))",
        f"SELECT * FROM PREDICT(MODEL {word}, TABLE t, {word} => {word})",
    ):
        assert_round_trip(parse_one(sql))


def test_model_ref_carries_name_position():
    sql = "SELECT *\nFROM PREDICT(MODEL   digits, TABLE t)"
    ref = parse_one(sql).find(ModelRef)
    start = ref.meta["start"]
    assert sql[start : ref.meta["end"] + 1] == "digits"
    assert ref.meta["line"] == 2


def test_predict_table_shape_in_from_clause():
    tree = parse_one(
        "SELECT * FROM PREDICT(MODEL m VERSION 2, TABLE s.t, features = (a, b)) AS p"
    )
    table = tree.args["from_"].this
    assert isinstance(table, exp.Table)
    assert table.alias == "p"
    node = table.this
    assert isinstance(node, PredictTable)
    assert node.this.model_name == "m" and node.this.version_number == 2
    source = node.expression
    assert isinstance(source, exp.Table)
    assert source.name == "t" and source.db == "s"
    assert source.args.get("alias") is None
    assert node.option_values["features"] == exp.Tuple(
        expressions=[exp.to_identifier("a"), exp.to_identifier("b")]
    )


def test_predict_subquery_input_and_option_separators():
    tree = parse_one(
        "SELECT * FROM PREDICT(MODEL m, (SELECT id FROM t WHERE d = ?), "
        "a = 1, b := 'x', c => onnxruntime) p"
    )
    node = tree.find(PredictTable)
    assert isinstance(node.expression, exp.Subquery)
    assert isinstance(node.expression.this, exp.Select)
    assert node.expression.find(exp.Placeholder) is not None
    assert [o.this.name for o in node.args["options"]] == ["a", "b", "c"]
    assert all(type(o) is exp.EQ for o in node.args["options"])
    # every separator is generated as `=`
    assert "a = 1, b = 'x', c = onnxruntime" in tree.sql(dialect=ModelSQL)


def test_predict_in_join_cte_and_where_in():
    sql = (
        "WITH scored AS (SELECT * FROM PREDICT(MODEL m, TABLE reviews) AS s) "
        "SELECT r.id FROM reviews r "
        "JOIN PREDICT(MODEL m2 VERSION 4, (SELECT * FROM reviews WHERE day = $1)) AS q ON r.id = q.id "
        "WHERE r.id IN (SELECT id FROM PREDICT(MODEL m3, TABLE reviews) x WHERE x.label = ?)"
    )
    tree = parse_one(sql)
    nodes = list(tree.find_all(PredictTable))
    assert sorted(n.this.model_name for n in nodes) == ["m", "m2", "m3"]
    assert sorted(n.parent.alias for n in nodes) == ["q", "s", "x"]
    join = tree.args["joins"][0]
    assert isinstance(join.this, exp.Table) and isinstance(join.this.this, PredictTable)
    assert_round_trip(tree)


def test_multiple_statements():
    trees = parse("SELECT 1; IMPORT MODEL m FROM 'a.onnx';; SHOW MODELS;\nDROP MODEL m;")
    assert [type(t) for t in trees] == [exp.Select, ImportModel, ShowModels, DropModel]
    assert parse("") == []
    assert parse("  ;  ") == []


def test_comments_before_our_statements_stay_before():
    tree = parse_one("-- note\nDROP MODEL m")
    assert tree.sql(dialect=ModelSQL) == "/* note */ DROP MODEL m"
    assert_round_trip(tree)


# ---------------------------------------------------- plain SQL stays plain

PLAIN_SQL = [
    "SELECT model, models, predict FROM predict",
    "SELECT * FROM modelsql.models WHERE name = 'm'",
    'SELECT "model" FROM t',
    "CREATE TABLE models (model VARCHAR, predict DOUBLE)",
    "DROP TABLE model",
    "DESCRIBE model",
    "DESCRIBE model.t",
    "DESCRIBE t",
    "DESCRIBE SELECT 1",
    "SHOW TABLES",
    "SELECT * FROM read_csv('x.csv') AS r(a)",
    "SELECT * FROM t WHERE a = ? AND b = $2",
    "ALTER TABLE t DROP model",
    "INSERT INTO t VALUES (1, 'predict(model m, table t)')",
    "DESCRIBE study",
    "DESCRIBE study.t",
    "SELECT study, trial, search, target, python FROM studies",
    "CREATE TABLE study (tune INT, python VARCHAR)",
    "DROP TABLE study",
]


@pytest.mark.parametrize("sql", PLAIN_SQL)
def test_plain_duckdb_sql_parses_as_duckdb_does(sql):
    assert parse(sql) == sqlglot.parse(sql, read="duckdb")
    assert not mentions_models(sql)


def test_vacuum_other_than_models_stays_duckdbs_command():
    for sql in ("VACUUM", "VACUUM ANALYZE t", "vacuum analyze t(a, b)"):
        tree = parse_one(sql)
        assert isinstance(tree, exp.Command)
        assert tree == sqlglot.parse_one(sql, read="duckdb")
        assert tree.sql(dialect=ModelSQL) == sqlglot.parse_one(sql, read="duckdb").sql("duckdb")


def test_our_statements_start_only_at_the_start_of_a_statement():
    # a quoted word is a name, not one of our words
    assert parse_one('SHOW "MODELS"') == sqlglot.parse_one('SHOW "MODELS"', read="duckdb")
    # not at a statement start: DuckDB's reading (here errors, as DuckDB's own parser)
    for sql in ("SELECT * FROM DESCRIBE MODEL m", "WITH q AS (SELECT 1) SHOW MODELS"):
        with pytest.raises(ProgrammingError):
            parse(sql)
    # a listing of ours in parentheses is a relation (as DuckDB reads its own SHOW and DESCRIBE there)
    assert isinstance(parse("SELECT * FROM (DESCRIBE MODEL m)")[0].find(StatementTable).this, DescribeModel)
    # but after a semicolon it is a statement start
    assert [type(t) for t in parse("SELECT 1; DESCRIBE MODEL m; VACUUM")] == [
        exp.Select, DescribeModel, exp.Command,
    ]


def test_create_or_replace_with_if_not_exists_keeps_both_flags():
    # the planner refuses the pair; the tree must carry both for it to
    tree = parse_one("CREATE OR REPLACE MODEL IF NOT EXISTS m FROM 'm.onnx'")
    assert tree.args["replace"] is True and tree.args["exists"] is True


def test_predict_as_a_plain_function_is_anonymous():
    tree = parse_one("SELECT predict(a, b) FROM t")
    func = tree.expressions[0]
    assert isinstance(func, exp.Anonymous)  # not BigQuery's exp.Predict
    assert func.name.upper() == "PREDICT"
    assert_round_trip(tree)


def test_to_duckdb_sql():
    tree = parse_one("SELECT a, count(*) FROM t WHERE b = $1 GROUP BY a")
    assert to_duckdb_sql(tree) == "SELECT a, COUNT(*) FROM t WHERE b = $1 GROUP BY a"
    with_predict = parse_one("SELECT * FROM PREDICT(MODEL m, TABLE t) AS p")
    with pytest.raises(InternalError) as info:
        to_duckdb_sql(with_predict)
    assert info.value.code == "internal_error"
    # once the planner swaps the node for a plain table, it generates
    with_predict.find(PredictTable).replace(exp.to_identifier("arrow_scan_0"))
    assert to_duckdb_sql(with_predict) == "SELECT * FROM arrow_scan_0 AS p"


# ------------------------------------------------------------------- errors


def caret_column(message: str) -> tuple[str, int]:
    """Return (LINE text, 1-based column of the first caret) from an error message."""
    lines = message.splitlines()
    (index,) = [i for i, ln in enumerate(lines) if ln.startswith("LINE ")]
    source, caret = lines[index], lines[index + 1]
    prefix = source.index(": ") + 2
    return source, caret.index("^") - prefix + 1


def test_error_carries_line_column_and_caret_for_multiline_statement():
    sql = "SELECT *\nFROM PREDICT(MODEL m,\n   TABLE)\nWHERE x = 1"
    with pytest.raises(ProgrammingError) as info:
        parse(sql)
    error = info.value
    assert error.code == "parse_error"
    assert (error.line, error.column) == (3, 9)
    message = str(error)
    assert message.startswith("Parser Error: ")
    assert "Expected a table name after TABLE" in message
    source, column = caret_column(message)
    assert source == "LINE 3:    TABLE)"
    assert column == 9
    assert sql.splitlines()[2][column - 1] == ")"


@pytest.mark.parametrize(
    "sql,line,column,text,fragment",
    [
        ("IMPORT MODEL FROM 'x'", 1, 14, "FROM", "Expected a model name"),
        ("SELECT 1;\nDROP MODEL m VERSION x", 2, 22, "x", "integer version"),
        ("IMPORT MODEL m VERSION 2 FROM 'x'", 1, 16, "VERSION", "VERSION cannot be given"),
        ("IMPORT MODEL m 'x'", 1, 16, "'x'", "Expected FROM"),
        ("IMPORT MODEL m FROM x", 1, 21, "x", "quoted file path"),
        ("IMPORT MODEL m FROM 'x' WITH (a 1)", 1, 33, "1", "Expected ="),
        ("EXPORT MODEL m 'x'", 1, 16, "'x'", "Expected TO"),
        ("SHOW MODELS extra", 1, 13, "extra", "Unexpected token"),
        ("SELECT * FROM PREDICT(TABLE t)", 1, 23, "TABLE", "Expected MODEL"),
        ("SELECT * FROM PREDICT(MODEL m)", 1, 30, ")", "after the model"),
        ("SELECT * FROM PREDICT(MODEL m, t)", 1, 32, "t", "TABLE <name> or (SELECT"),
        ("SELECT * FROM\n  PREDICT(MODEL m, (t))", 2, 20, "(", "query in parentheses"),
        ("SELECT * FROM PREDICT(MODEL m, TABLE t, x)", 1, 42, ")", "Expected ="),
        ("SELECT * FROM PREDICT(MODEL m, TABLE t, x = )", 1, 45, ")", "option value"),
        ("SELECT PREDICT(MODEL m, TABLE t)", 1, 8, "PREDICT", "table function"),
        ("SELECT 'abc", 1, 8, "'", "unterminated"),
        ("SELECT 1 +\n  /* oops", 2, 3, "/", "unterminated"),
        ("SELECT * FROM", 1, 10, "FROM", "end of input"),
        ("IMPORT MODEL m FROM PYTHON x", 1, 28, "x", "quoted 'package.module:function'"),
        ("IMPORT MODEL m FROM PYTHON 'cnn.build'", 1, 28, "'cnn.build'", "a colon, then the function"),
        ("CREATE MODEL m FROM STUDY 's'", 1, 27, "'s'", "Expected a study name"),
        ("CREATE MODEL m FROM STUDY s TRIAL x", 1, 35, "x", "integer trial number"),
        ("TUNE MODEL m TABLE t TARGET y SEARCH (a = 1) USING TPE", 1, 14, "TABLE", "Expected ON TABLE <name>"),
        ("TUNE MODEL m ON TABLE t SEARCH (a = 1) USING TPE", 1, 25, "SEARCH", "Expected TARGET <column>"),
        ("TUNE MODEL m ON TABLE t TARGET y USING TPE", 1, 34, "USING", "Expected SEARCH (name = space"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH () USING TPE", 1, 42, ")", "at least one hyperparameter"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a CHOICE(1, 2)) USING TPE", 1, 44, "CHOICE",
         "Expected = after the hyperparameter name"),
        ("TUNE MODEL m ON TABLE t TARGET y SEARCH (a = 1) TPE", 1, 49, "TPE", "Expected USING <algorithm>"),
        ("DROP STUDY", 1, 6, "STUDY", "Expected a study name"),
        ("WITH v AS (SELECT 1) EVALUATE MODEL m ON TABLE v TARGET y", 1, 22, "EVALUATE", "write the WITH in its input"),
        ("WITH v AS (SELECT (1)),\n w AS (SELECT 2)\nTUNE MODEL m ON TABLE v TARGET y SEARCH (a = 1) USING TPE", 3, 1,
         "TUNE", "does not follow a WITH clause"),
    ],
)
def test_parse_errors_point_at_the_offending_token(sql, line, column, text, fragment):
    with pytest.raises(ProgrammingError) as info:
        parse(sql)
    error = info.value
    assert error.code == "parse_error"
    assert (error.line, error.column) == (line, column), str(error)
    assert fragment in str(error)
    source, caret = caret_column(str(error))
    assert source == f"LINE {line}: {sql.splitlines()[line - 1]}"
    assert caret == column
    assert sql.splitlines()[line - 1][column - 1 :].startswith(text)
    # the whole token is underlined
    caret_line = str(error).splitlines()[-1]
    assert caret_line.strip() == "^" * min(len(text), len(caret_line.strip()))


# ---------------------------------------------------------- mentions_models

MENTIONS = [
    "IMPORT MODEL m FROM 'x.onnx'",
    "import model m from 'x.onnx'",
    "CREATE MODEL m FROM 'x.onnx'",
    "create or replace model m from 'x.onnx'",
    "DROP MODEL m",
    "DESCRIBE MODEL m.t",  # not DuckDB (a syntax error there): our parser says a model name is one word
    "SELECT name FROM (SHOW MODELS) WHERE aliases IS NOT NULL",
    "SELECT * FROM t JOIN (DESCRIBE MODEL m) AS d ON true",
    "DROP MODEL IF EXISTS m",
    "SHOW MODELS",
    "DESCRIBE MODEL m",
    "EXPORT MODEL m TO 'x.onnx'",
    "VACUUM MODELS",
    "SELECT * FROM PREDICT(MODEL m, TABLE t)",
    "select * from predict (model m, table t)",
    "SELECT 1; DROP MODEL m",
    "-- comment\nSHOW MODELS;",
    "EXPLAIN SELECT * FROM PREDICT(MODEL m, TABLE t)",
    "SELECT * FROM t WHERE id IN (SELECT id FROM PREDICT(MODEL m, TABLE t))",
    "TUNE MODEL m ON TABLE t TARGET y SEARCH (a = CHOICE(1, 2)) USING TPE",
    "EXPLAIN TUNE MODEL m ON TABLE t TARGET y SEARCH (a = CHOICE(1, 2)) USING TPE",
    "SHOW STUDIES",
    "DESCRIBE STUDY s",
    "DROP STUDY IF EXISTS s",
    "CREATE MODEL m FROM STUDY s TRIAL 3",
]

NOT_MENTIONS = [
    "SELECT 1",
    "SELECT 'predict(model m, table t)'",
    "SELECT 'IMPORT MODEL m FROM x'",
    'SELECT "model", "predict" FROM t',
    'SELECT * FROM "predict"(1)',
    "SELECT * FROM modelsql.models",
    "SELECT * FROM modelsql.model_versions WHERE model = 'm'",
    "SELECT model, models, predict FROM predict",
    "SELECT * FROM s.predict(1)",
    "CREATE TABLE models (model INT)",
    "DROP TABLE model",
    "DESCRIBE model",
    "DESCRIBE model.t",
    "DESCRIBE MODEL 'm'",
    "SELECT * FROM (SHOW TABLES)",
    "SELECT * FROM (DESCRIBE t)",
    "DESCRIBE study",
    "DESCRIBE study.t",
    "SELECT 'TUNE MODEL m'",
    'TUNE "MODEL" m',
    'SHOW "MODELS"',
    'DROP "MODEL" m',
    "VACUUM",
    "VACUUM ANALYZE models",
    "-- PREDICT(MODEL m, TABLE t)\nSELECT 1",
    "/* DROP MODEL m */ SELECT 1",
    "EXPLAIN SELECT 'predict('",
    "SELECT 'unterminated",
    "",
]


@pytest.mark.parametrize("sql", MENTIONS)
def test_mentions_models_true(sql):
    assert mentions_models(sql) is True


@pytest.mark.parametrize("sql", NOT_MENTIONS)
def test_mentions_models_false(sql):
    assert mentions_models(sql) is False


# ------------------------------------------------------ number_placeholders


@pytest.mark.parametrize(
    "sql,expected,count",
    [
        ("SELECT 1", "SELECT 1", 0),
        ("SELECT ?", "SELECT $1", 1),
        (
            "SELECT ?, '?', \"?\", ? -- ?\n /* ? */ FROM t WHERE a = ? AND b = 'it''s ?'",
            "SELECT $1, '?', \"?\", $2 -- ?\n /* ? */ FROM t WHERE a = $3 AND b = 'it''s ?'",
            3,
        ),
        ("SELECT $$ ? $$, ?", "SELECT $$ ? $$, $1", 1),
        ("SELECT E'\\'?', ?", "SELECT E'\\'?', $1", 1),
        ("SELECT  ?  ,\n\t?", "SELECT  $1  ,\n\t$2", 2),
        ("SELECT ?; SELECT ?", "SELECT $1; SELECT $2", 2),
        ("SELECT * FROM PREDICT(MODEL m, (SELECT * FROM t WHERE a = ?), k = ?)",
         "SELECT * FROM PREDICT(MODEL m, (SELECT * FROM t WHERE a = $1), k = $2)", 2),
        ("EXPLAIN SELECT * FROM t WHERE a = ? AND b = '?'",
         "EXPLAIN SELECT * FROM t WHERE a = $1 AND b = '?'", 1),
        ("SELECT * FROM t WHERE a = $1", "SELECT * FROM t WHERE a = $1", 0),
        ("SELECT ?2, '?1' FROM t WHERE a = ?1", "SELECT $2, '?1' FROM t WHERE a = $1", 0),  # DuckDB's ?NNN
    ],
)
def test_number_placeholders(sql, expected, count):
    assert number_placeholders(sql) == (expected, count)


def test_number_placeholders_output_parses_with_numbered_placeholders():
    text, count = number_placeholders("SELECT * FROM PREDICT(MODEL m, (SELECT * FROM t WHERE a = ?)) WHERE b = ?")
    assert count == 2
    names = [p.name for p in parse_one(text).find_all(exp.Placeholder)]
    assert sorted(names) == ["1", "2"]


def test_number_placeholders_rejects_untokenizable_text():
    with pytest.raises(ProgrammingError) as info:
        number_placeholders("SELECT ?, 'abc")
    assert info.value.code == "parse_error"
    assert (info.value.line, info.value.column) == (1, 11)


def test_number_placeholders_before_cast_shorthand():
    """sqlglot reads ``?::`` as one token; the ``?`` in it is still a placeholder."""
    from modelsql.sql import number_placeholders

    assert number_placeholders("SELECT ?::DOUBLE AS x, ? AS y, '?::' AS z") == (
        "SELECT $1::DOUBLE AS x, $2 AS y, '?::' AS z",
        2,
    )


# ------------------------------------------------- the statement registry
#
# A statement is one node class (with its WORDS) registered by @statement, one
# parser entry ModelSQLParser._parse_<key>, one generator method
# ModelSQLGenerator.<key>_sql (and the planner's handler). These tests iterate
# over the registry, so a node missing any of them fails here.

STATEMENT_WORD_SEQUENCES = [
    pytest.param(node, words, id=f"{node.__name__}:{'_'.join(words)}")
    for node in STATEMENT_NODES
    for words in node.WORDS
]


def test_registry_holds_every_statement_node_once():
    assert len(set(STATEMENT_NODES)) == len(STATEMENT_NODES)
    assert {ImportModel, DropModel, ShowModels, DescribeModel, ExportModel, VacuumModels} <= set(
        STATEMENT_NODES
    )
    assert set(STATEMENT_NODES) <= set(MODEL_NODES)
    assert ModelRef in MODEL_NODES and PredictTable in MODEL_NODES


@pytest.mark.parametrize("node", STATEMENT_NODES, ids=lambda n: n.__name__)
def test_every_registered_node_has_words_a_parser_entry_and_a_generator_method(node):
    assert node.WORDS and all(isinstance(words, tuple) and words for words in node.WORDS)
    assert callable(getattr(ModelSQLParser, f"_parse_{node.key}", None)), (
        f"ModelSQLParser needs a parser entry _parse_{node.key}(self, words)"
    )
    assert callable(getattr(ModelSQLGenerator, f"{node.key}_sql", None)), (
        f"ModelSQLGenerator needs a generator method {node.key}_sql(self, expression)"
    )
    # the node's EXAMPLES (the registry requires them) and any form of it in STATEMENT_FORMS round-trip
    forms = [*node.EXAMPLES, *(sql for sql, node_type in STATEMENT_FORMS if node_type is node)]
    for sql in forms:
        tree = parse_one(sql)
        again = parse(tree.sql(dialect=DIALECT))
        assert again == [tree], (sql, again)


@pytest.mark.parametrize("node,words", STATEMENT_WORD_SEQUENCES)
def test_every_word_sequence_has_an_example_that_parses_to_its_node(node, words):
    forms = [sql for sql in node.EXAMPLES if tuple(sql.upper().split()[: len(words)]) == words]
    assert forms, f"add an example starting {' '.join(words)} to {node.__name__}.EXAMPLES"


@pytest.mark.parametrize("node,words", STATEMENT_WORD_SEQUENCES)
def test_registered_words_route_to_modelsql_at_a_statement_start(node, words):
    head = " ".join(words)
    for sql in (
        f"{head} m",
        f"{head.lower()} m",
        f"SELECT 1; {head} m",
        f"-- a note\n{head} m",
        f"/* {head} */ {head} m",
        f"{head} m; SELECT 1",
        f"EXPLAIN {head} m",
    ):
        assert mentions_models(sql) is True, sql
        tokens = ModelSQLTokenizer(dialect=DIALECT).tokenize(sql)
        starts = [
            i for i, tok in enumerate(tokens)
            if (i == 0 or tokens[i - 1].token_type == TokenType.SEMICOLON)
            and statement_at(tokens, i) is not None
        ]
        if not sql.startswith("EXPLAIN"):
            assert [statement_at(tokens, i)[0] for i in starts] == [node], sql


@pytest.mark.parametrize("node,words", STATEMENT_WORD_SEQUENCES)
def test_registered_words_do_not_route_inside_strings_comments_or_quoted_names(node, words):
    head = " ".join(words)
    texts = [
        f"SELECT '{head} m'",
        f"SELECT $${head} m$$",
        f"-- {head} m\nSELECT 1",
        f"/* {head} m */ SELECT 1",
        f"SELECT 1 /* ; {head} m */",
        f'SELECT 1 AS "{head} m"',
        f"WITH q AS (SELECT 1) {head} m",  # not at a statement start
    ]
    for k in range(len(words)):  # each word quoted in turn
        texts.append(" ".join(f'"{w}"' if j == k else w for j, w in enumerate(words)) + " m")
    for sql in texts:
        assert mentions_models(sql) is False, sql


def test_word_sequences_are_tried_longest_first_and_only_unquoted():
    tokens = ModelSQLTokenizer(dialect=DIALECT).tokenize("CREATE OR REPLACE MODEL m FROM 'x'")
    assert statement_at(tokens, 0) == (ImportModel, ("CREATE", "OR", "REPLACE", "MODEL"))
    tokens = ModelSQLTokenizer(dialect=DIALECT).tokenize('CREATE OR REPLACE "MODEL" m')
    assert statement_at(tokens, 0) is None
    # DESCRIBE MODEL's condition: a name follows that is not the start of a dotted name
    for sql, expected in [
        ("DESCRIBE MODEL m", DescribeModel),
        ('DESCRIBE MODEL "m" VERSION 2', DescribeModel),
        ("DESCRIBE MODEL", None),
        ("DESCRIBE MODEL m.t", None),
        ("DESCRIBE MODEL 'm'", None),
        ("DESCRIBE model.t", None),
    ]:
        found = statement_at(ModelSQLTokenizer(dialect=DIALECT).tokenize(sql), 0)
        assert (found[0] if found else None) is expected, sql


def test_demoted_commands_are_derived_from_the_registry():
    # VACUUM is a COMMAND to DuckDB's tokenizer; VACUUM MODELS needs it a plain word
    duckdb_tokenizer = sqlglot.Dialect.get_or_raise("duckdb").tokenizer_class
    first_words = {words[0] for node in STATEMENT_NODES for words in node.WORDS}
    assert "VACUUM" in DEMOTED_COMMANDS
    assert DEMOTED_COMMANDS == {
        w for w in first_words if duckdb_tokenizer.KEYWORDS.get(w) in duckdb_tokenizer.COMMANDS
    }
    assert not DEMOTED_COMMANDS & set(ModelSQLTokenizer.KEYWORDS)


def test_statement_decorator_rejects_nodes_without_valid_words():
    before = list(STATEMENT_NODES)
    with pytest.raises(TypeError, match="WORDS"):
        @statement
        class NoWords(exp.Expression):
            arg_types = {}

    with pytest.raises(TypeError, match="upper-case"):
        @statement
        class LowerWords(exp.Expression):
            WORDS = (("list", "models"),)
            arg_types = {}

    with pytest.raises(TypeError, match="upper-case"):
        @statement
        class FlatWords(exp.Expression):
            WORDS = ("LIST", "MODELS")
            arg_types = {}

    with pytest.raises(ValueError, match="already starts ShowModels"):
        @statement
        class Clash(exp.Expression):
            WORDS = (("SHOW", "MODELS"),)
            arg_types = {}

    assert STATEMENT_NODES == before
