"""The evaluation statement of the dialect: its node, parser entry and generator method::

    EVALUATE MODEL | PIPELINE name [VERSION n] ON TABLE t | ON (query) TARGET column [WITH (opt, ...)]

BigQuery ML's ``ML.EVALUATE``, as a statement: one row of the metrics the task calls for, computed over the
model's predictions of the input's rows against the TARGET column.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.grammar import GrammarGenerator, GrammarParser
from modelsql.sql.registry import option_dict, statement

__all__ = ["EvaluateModel", "EvaluateParsing", "EvaluateGenerating", "EVALUATE_FORM"]

#: The accepted form of EVALUATE, shown by its parse errors.
EVALUATE_FORM = ("EVALUATE MODEL | PIPELINE name [VERSION n] ON TABLE t | ON (SELECT ...) TARGET column "
                 "[WITH (option = value, ...)]")


@statement
class EvaluateModel(exp.Expression):
    """``EVALUATE MODEL | PIPELINE name [VERSION n] ON TABLE t | ON (query) TARGET column [WITH (...)]``: the
    metrics of the model's (or pipeline's) predictions of the input's rows against the TARGET column, as one
    row, recorded in the catalog (``modelsql.evaluations``).

    Args:
        this: ``ModelRef`` (``version`` pinned or ``None``; ``pipeline`` set for EVALUATE PIPELINE).
        source: ``exp.Table`` for ``ON TABLE t`` or ``exp.Subquery`` for ``ON (SELECT ...)``.
        target: ``exp.Identifier``, the column holding the true values.
        options: list of ``exp.EQ`` (``average``, ``positive``, ``threshold``, ``features``), or ``None``.
    """

    WORDS = (("EVALUATE", "MODEL"), ("EVALUATE", "PIPELINE"))
    EXAMPLES = (
        "EVALUATE MODEL m ON TABLE test TARGET label",
        "EVALUATE PIPELINE p VERSION 2 ON (SELECT * FROM reviews WHERE day > ?) TARGET sentiment "
        "WITH (average = 'weighted')",
    )
    arg_types = {"this": True, "source": True, "target": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


class EvaluateParsing(GrammarParser):
    """Parser entry ``_parse_evaluatemodel(words)`` (the words consumed)."""

    def _parse_evaluatemodel(self, words: tuple[str, ...]) -> EvaluateModel:
        ref = self._parse_model_ref()
        if words[1] == "PIPELINE":
            ref.set("pipeline", True)
        if not self._match(TokenType.ON):
            self._fail(f"Expected ON TABLE <name> or ON (SELECT ...) after the model: the rows to evaluate on; "
                       f"the form is {EVALUATE_FORM}")
        source = self._parse_input_after("ON")
        if not self._match_word("TARGET"):
            self._fail(f"Expected TARGET <column> after the input: the column of true values; the form is "
                       f"{EVALUATE_FORM}")
        token = self._curr
        target = self._parse_id_var(any_token=False)
        if not isinstance(target, exp.Identifier):
            self._fail("Expected a column name after TARGET", token)
        node = EvaluateModel(this=ref, source=source, target=target, options=self._parse_with_options())
        return t.cast(EvaluateModel, self.expression(node))


class EvaluateGenerating(GrammarGenerator):
    """Generator method of EVALUATE."""

    def evaluatemodel_sql(self, expression: EvaluateModel) -> str:
        word = "PIPELINE" if expression.this.args.get("pipeline") else "MODEL"
        options = self._options_sql(expression)
        return (f"EVALUATE {word} {self.sql(expression, 'this')} ON "
                f"{self._relation_input_sql(expression.args['source'])} TARGET "
                f"{self._name_sql(expression.args['target'])}" + (f" WITH ({options})" if options else ""))
