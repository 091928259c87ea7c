"""Evaluation in the dialect: the statement and the table functions, their nodes, parser entries and generator
methods::

    EVALUATE MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n] ON TABLE t | ON (query) [TARGET column]
        [WITH (opt, ...)]
    ... FROM EVALUATE(MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n], TABLE t | (query)
        [, target = column] [, opt ...]) ...
    ... FROM CONFUSION_MATRIX(MODEL ..., TABLE t | (query), target = column [, opt ...]) ...
    ... FROM ROC_CURVE(MODEL ..., TABLE t | (query), target = column [, opt ...]) ...

BigQuery ML's ``ML.EVALUATE``, ``ML.CONFUSION_MATRIX`` and ``ML.ROC_CURVE``: the statement gives (and records)
one row of the metrics the task calls for, computed over the model's predictions of the input's rows against
the TARGET column; the table functions give the same row, the confusion counts or the ROC curve as a table in
any query (recording nothing). A call is ours only when shaped so (:func:`evaluation_shaped`: the name, ``(``,
then ``MODEL`` or ``PIPELINE`` and a name), so a user's function of one of these names still works.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from modelsql.sql.grammar import BARE_NAME_TOKENS, PIPELINE_NO_ALIAS, GrammarGenerator, GrammarParser, ModelRef
from modelsql.sql.registry import option_dict, part, statement, word_at

__all__ = ["EvaluateModel", "EvaluationTable", "EvaluateParsing", "EvaluateGenerating", "EVALUATE_FORM",
           "EVALUATION_FUNCTIONS", "evaluation_shaped", "ml_function_at", "ML_FUNCTIONS"]

#: The table functions of evaluation.
EVALUATION_FUNCTIONS = ("EVALUATE", "CONFUSION_MATRIX", "ROC_CURVE")

#: The accepted form of EVALUATE, shown by its parse errors.
EVALUATE_FORM = ("EVALUATE MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n] ON TABLE t | ON (SELECT ...) [TARGET column] "
                 "[WITH (option = value, ...)]")


@statement
class EvaluateModel(exp.Expression):
    """``EVALUATE MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n] ON TABLE t | ON (query) [TARGET column]
    [WITH (...)]``:
    the metrics of the model's (or pipeline's) predictions of the input's rows against the TARGET column (by
    default the one the version was trained to predict, as BigQuery ML's ``ML.EVALUATE`` reads the training's label
    column), as one row, recorded in the catalog (``modelsql.evaluations``).

    Args:
        this: ``ModelRef`` (``version`` pinned or ``None``; ``pipeline`` set for EVALUATE PIPELINE).
        source: ``exp.Table`` for ``ON TABLE t`` or ``exp.Subquery`` for ``ON (SELECT ...)``.
        target: ``exp.Identifier``, the column holding the true values, or ``None`` (the version's own target).
        options: list of ``exp.EQ`` (``average``, ``positive``, ``threshold``, ``features``), or ``None``.
    """

    WORDS = (("EVALUATE", "MODEL"), ("EVALUATE", "PIPELINE"))
    EXAMPLES = (
        "EVALUATE MODEL m ON TABLE test TARGET label",
        "EVALUATE PIPELINE p VERSION 2 ON (SELECT * FROM reviews WHERE day > ?) TARGET sentiment "
        "WITH (average = 'weighted')",
    )
    arg_types = {"this": True, "source": True, "target": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


def evaluation_shaped(tokens: t.Sequence[Token], i: int) -> bool:
    """Whether ``tokens[i:]`` open a table function of ours: ``EVALUATE (``, ``CONFUSION_MATRIX (`` or
    ``ROC_CURVE (`` (not after a dot), then ``MODEL`` or ``PIPELINE`` and a name."""
    if i >= len(tokens) or (i > 0 and tokens[i - 1].token_type == TokenType.DOT):
        return False
    paren = tokens[i + 1] if i + 1 < len(tokens) else None
    return (any(word_at(tokens[i], f) for f in EVALUATION_FUNCTIONS) and paren is not None
            and paren.token_type == TokenType.L_PAREN and _model_named(tokens, i + 2))


def _model_named(tokens: t.Sequence[Token], k: int) -> bool:
    """Whether ``tokens[k:]`` open ``MODEL name`` or ``PIPELINE name`` (a word, not ``model`` as a column)."""
    name = tokens[k + 1] if k + 1 < len(tokens) else None
    return (k < len(tokens) and (word_at(tokens[k], "MODEL") or word_at(tokens[k], "PIPELINE"))
            and name is not None and name.token_type in (BARE_NAME_TOKENS | {TokenType.IDENTIFIER}))


ML_FUNCTIONS = {
    "EVALUATE": "write EVALUATE(MODEL m, TABLE t, target = column) (or the statement EVALUATE MODEL m ON TABLE t "
                "TARGET column)",
    "CONFUSION_MATRIX": "write CONFUSION_MATRIX(MODEL m, TABLE t, target = column)",
    "ROC_CURVE": "write ROC_CURVE(MODEL m, TABLE t, target = column)",
    "TRAINING_INFO": "DESCRIBE MODEL m shows how a version was trained (its training rows, split, seconds), and "
                     "SELECT * FROM modelsql.evaluations its recorded metrics",
    "TRIAL_INFO": "SELECT * FROM modelsql.trials WHERE study = '...' lists a study's trials and their metrics",
    "FEATURE_IMPORTANCE": "modelsql has no feature-importance function",
}
"""BigQuery ML's ``ML.<function>(MODEL ...)`` table functions a user from it types, and what to write here (the
parse error says it)."""


def ml_function_at(tokens: t.Sequence[Token], i: int) -> t.Optional[str]:
    """The name of BigQuery ML's table function ``ML.<name>(MODEL m ...`` opening at ``tokens[i]`` (not after a
    dot), one of :data:`ML_FUNCTIONS`; None for anything else (a user's macro ``ml.evaluate(model, k := 1)`` over a
    column named model)."""
    if i + 3 >= len(tokens) or not word_at(tokens[i], "ML") or tokens[i + 1].token_type != TokenType.DOT:
        return None
    if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
        return None
    name = tokens[i + 2].text.upper()
    if name not in ML_FUNCTIONS or tokens[i + 3].token_type != TokenType.L_PAREN:
        return None
    return name if _model_named(tokens, i + 4) else None  # (a user's ml.f(model, ...) is not it)


@part
class EvaluationTable(exp.Expression):
    """The table functions ``EVALUATE(...)``, ``CONFUSION_MATRIX(...)`` and ``ROC_CURVE(...)``, wrapped as every
    table function is (``exp.Table(this=EvaluationTable(...), alias=...)``).

    Args:
        this: ``ModelRef`` (``pipeline`` set for ``PIPELINE``).
        expression: ``exp.Table`` for ``TABLE t`` or ``exp.Subquery`` for ``(SELECT ...)``.
        function: the function's name, upper case (one of :data:`EVALUATION_FUNCTIONS`).
        options: list of ``exp.EQ`` (``target`` and EVALUATE's options), or ``None``.
    """

    EXAMPLES = (
        "SELECT * FROM EVALUATE(MODEL m, TABLE test, target = label)",
        "SELECT * FROM CONFUSION_MATRIX(MODEL m VERSION 2, (SELECT * FROM test WHERE day > ?), target = label)",
        "SELECT threshold, recall, false_positive_rate FROM ROC_CURVE(MODEL m, TABLE test, target = label)",
    )
    arg_types = {"this": True, "expression": True, "function": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


def as_table_function(stmt: "EvaluateModel") -> exp.Select:
    """``SELECT * FROM EVALUATE(...)`` of the statement's model, input, TARGET (its ``target`` option) and options:
    the query whose one row is the statement's (what EXPLAIN EVALUATE shows the plan of; nothing is recorded)."""
    options = [o.copy() for o in stmt.args.get("options") or []]
    target = stmt.args.get("target")
    if target is not None:
        options.append(exp.EQ(this=exp.to_identifier("target"), expression=target.copy()))
    call = EvaluationTable(this=stmt.this.copy(), expression=stmt.args["source"].copy(), function="EVALUATE",
                           options=options or None)
    call.meta["source_text"] = "EVALUATE"
    return exp.select(exp.Star()).from_(exp.Table(this=call))


class EvaluateParsing(GrammarParser):
    """Parser entry ``_parse_evaluatemodel(words)`` (the words consumed)."""

    def _parse_evaluatemodel(self, words: tuple[str, ...]) -> EvaluateModel:
        ref = self._parse_model_ref(allow_alias=words[1] == "MODEL",
                                    no_alias=PIPELINE_NO_ALIAS if words[1] == "PIPELINE" else None)
        if words[1] == "PIPELINE":
            ref.set("pipeline", True)
        if not self._match(TokenType.ON):
            self._fail(f"Expected ON TABLE <name> or ON (SELECT ...) after the model: the rows to evaluate on; "
                       f"the form is {EVALUATE_FORM}")
        source = self._parse_input_after("ON")
        target = None
        if self._match_word("TARGET"):
            token = self._curr
            target = self._parse_id_var(any_token=False)
            if not isinstance(target, exp.Identifier):
                self._fail("Expected a column name after TARGET", token)
        node = EvaluateModel(this=ref, source=source, target=target, options=self._parse_with_options())
        return t.cast(EvaluateModel, self.expression(node))

    def _parse_table_part(self, schema: bool = False) -> exp.Expr | None:
        # A table position: EVALUATE(MODEL ...), CONFUSION_MATRIX(...), ROC_CURVE(...) are EvaluationTables.
        if not schema and evaluation_shaped(self._tokens, self._index):
            return self._parse_evaluation_table()
        ml = None if schema else ml_function_at(self._tokens, self._index)
        if ml is not None:  # BigQuery ML's spelling: say what to write here
            self._fail(f"ML.{ml} is BigQuery ML's table function; {ML_FUNCTIONS[ml]}", self._curr)
        return super()._parse_table_part(schema=schema)

    def _parse_evaluation_table(self) -> EvaluationTable:
        token = self._curr
        function = token.text.upper()
        form = f"{function}(MODEL name [VERSION n | ALIAS a], TABLE t | (SELECT ...), target = column [, option = value ...])"
        self._advance(2)  # NAME (
        pipeline = self._match_word("PIPELINE")
        if not pipeline:
            self._match_word("MODEL")
        ref: ModelRef = self._parse_model_ref(allow_alias=not pipeline,
                                              no_alias=PIPELINE_NO_ALIAS if pipeline else None)
        if pipeline:
            ref.set("pipeline", True)
        source, options = self._parse_table_function_rest(function, form)
        node = self.expression(EvaluationTable(this=ref, expression=source, function=function,
                                               options=options or None))
        node.meta["source_text"] = self._source_text(token)  # (an output column is named by it, as PREDICT's)
        return t.cast(EvaluationTable, node.update_positions(token))


class EvaluateGenerating(GrammarGenerator):
    """Generator methods of EVALUATE and the evaluation table functions."""

    def evaluationtable_sql(self, expression: EvaluationTable) -> str:
        word = "PIPELINE" if expression.this.args.get("pipeline") else "MODEL"
        options = self._options_sql(expression)
        return (f"{expression.args['function']}({word} {self.sql(expression, 'this')}, "
                f"{self._relation_input_sql(expression.expression)}" + (f", {options}" if options else "") + ")")

    def evaluatemodel_sql(self, expression: EvaluateModel) -> str:
        word = "PIPELINE" if expression.this.args.get("pipeline") else "MODEL"
        options = self._options_sql(expression)
        target = expression.args.get("target")
        return (f"EVALUATE {word} {self.sql(expression, 'this')} ON "
                f"{self._relation_input_sql(expression.args['source'])}"
                + (f" TARGET {self._name_sql(target)}" if target is not None else "")
                + (f" WITH ({options})" if options else ""))
