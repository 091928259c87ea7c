"""PREDICT, the table function of the dialect: its nodes, parser entries and generator methods::

    ... FROM PREDICT(MODEL name [VERSION n], TABLE t | (query) [, opt ...]) [[AS] alias] ...
    ... FROM PREDICT(PIPELINE name [VERSION n], TABLE t | (query) [, opt ...]) ...
    ... FROM PREDICT(MODELS (name [VERSION n], ...) ROUTE BY column, TABLE t | (query) [, opt ...]) ...
    ... FROM PREDICT(MODELS FAMILY name ROUTE BY column, TABLE t | (query) [, opt ...]) ...

``PREDICT`` is not sqlglot's BigQuery ``exp.Predict`` function. Only a PREDICT-shaped call
(:func:`predict_shaped`: ``PREDICT(MODEL name ...`` or ``PREDICT(TABLE ...``) is ours; any other
``predict(...)``, in an expression or a table position, stays an ordinary function call (a user's macro),
and ``PREDICT(MODEL ...)`` outside a table position is a parse error, and so is BigQuery ML's
``ML.PREDICT(MODEL ...)`` (:func:`ml_predict_at`), whose message says to write ``PREDICT``.

Where ``PredictTable`` sits: it is a table function, so in a FROM or JOIN it is wrapped the way sqlglot
wraps every table function, ``exp.Table(this=PredictTable(...), alias=exp.TableAlias | None)``; e.g. the
FROM of ``SELECT * FROM PREDICT(MODEL m, TABLE t) AS p`` is
``From(this=Table(this=PredictTable(...), alias=TableAlias(this=p)))``. Each PredictTable keeps the exact
text it was parsed from in ``meta["source_text"]``.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokens import Token, TokenType

from modelsql.sql.grammar import BARE_NAME_TOKENS, PIPELINE_NO_ALIAS, GrammarGenerator, GrammarParser, ModelRef
from modelsql.sql.registry import option_dict, part, word_at

__all__ = ["ModelSet", "PredictTable", "PredictParsing", "PredictGenerating", "PREDICT_FORM", "ML_PREDICT_ERROR",
           "predict_shaped", "ml_predict_at"]

_MEMBER_NO_ALIAS = "a MODELS (...) list names each member's version with VERSION n, not an alias"
"""Why ``MODELS (m ALIAS a, ...)`` is refused."""

#: The accepted form of PREDICT, shown by its parse errors.
PREDICT_FORM = ("PREDICT(MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n] | MODELS (name, ...) ROUTE BY column "
                "| MODELS FAMILY name ROUTE BY column, TABLE t | (SELECT ...) [, option = value ...])")


@part
class ModelSet(exp.Expression):
    """The models of a routed PREDICT: ``MODELS (m1 [VERSION n], m2, ...) ROUTE BY column`` or
    ``MODELS FAMILY f ROUTE BY column`` (the members of model family ``f``, see ``modelsql.families``).

    Each input row is run by the model its ``ROUTE BY`` column names (NetFuse's multi-model
    inference: the members of one family may run as one merged graph).

    Args:
        expressions: the ``ModelRef`` of each listed model, in order (empty for ``FAMILY``).
        family: ``exp.Identifier``, the family's name, or None.
        route: ``exp.Column``, the column naming each row's model.
    """

    arg_types = {"expressions": False, "family": False, "route": True}


@part
class PredictTable(exp.Expression):
    """The table function ``PREDICT(MODEL m [VERSION n | ALIAS a], TABLE t | (query) [, name = value ...])``.

    Usable wherever DuckDB accepts a table (FROM, JOIN, CTE bodies, subqueries);
    in the tree it is the ``this`` of an ``exp.Table`` that carries the alias.
    Named options may be written ``name = value``, ``name := value`` or
    ``name => value``; all become ``exp.EQ`` and generate as ``name = value``.

    Args:
        this: ``ModelRef``, or ``ModelSet`` for ``PREDICT(MODELS (...) ROUTE BY c, ...)``.
        expression: ``exp.Table`` for ``TABLE t`` / ``TABLE s.t`` (no alias),
            or ``exp.Subquery`` for ``(SELECT ...)`` (any query DuckDB allows in
            parentheses: SELECT, FROM-first, VALUES, WITH, set operations).
        options: list of ``exp.EQ`` (see module docstring), or ``None``.
    """

    EXAMPLES = (
        "SELECT * FROM PREDICT(MODEL m, TABLE t)",
        "SELECT p.* FROM PREDICT(PIPELINE p VERSION 2, (SELECT text FROM t WHERE day = ?), on_null = 'skip') AS p",
        "SELECT * FROM PREDICT(MODELS FAMILY f ROUTE BY model_name, TABLE t)",
    )
    arg_types = {"this": True, "expression": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


def predict_shaped(tokens: t.Sequence[Token], i: int) -> bool:
    """Whether ``tokens[i:]`` open a PREDICT of ours: ``PREDICT (`` (not after a dot) followed by
    ``MODEL <name>``, or by the keyword ``TABLE`` (a PREDICT missing its model, reported as such).

    Any other ``predict(...)`` is an ordinary function call: a user's macro, e.g.
    ``predict(1, 2)`` or ``predict(model, 2)`` over a column named ``model``.
    """
    if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
        return False
    return _predict_form(tokens, i)


def ml_predict_at(tokens: t.Sequence[Token], i: int) -> bool:
    """Whether ``tokens[i:]`` open BigQuery ML's ``ML.PREDICT(MODEL name ...`` (not after a dot): not ours,
    but routed to our parser, which reports it with the spelling that is (:data:`ML_PREDICT_ERROR`)."""
    return (i + 1 < len(tokens) and word_at(tokens[i], "ML") and tokens[i + 1].token_type == TokenType.DOT
            and not (i > 0 and tokens[i - 1].token_type == TokenType.DOT) and _predict_form(tokens, i + 2))


#: The parse error of ``ML.PREDICT(MODEL ...)``.
ML_PREDICT_ERROR = f"ML.PREDICT is BigQuery ML's spelling; write PREDICT, without ML.: {PREDICT_FORM}"


def _predict_form(tokens: t.Sequence[Token], i: int) -> bool:
    """``PREDICT (`` followed by ``MODEL <name>``, ``PIPELINE <name>``, ``MODELS ...`` or ``TABLE`` (or a name
    then ``, TABLE``), wherever it stands."""

    def at(k: int) -> Token | None:
        return tokens[i + k] if i + k < len(tokens) else None

    paren, arg = at(1), at(2)
    if not (word_at(at(0), "PREDICT") and paren is not None and paren.token_type == TokenType.L_PAREN):
        return False
    if arg is not None and arg.token_type == TokenType.TABLE:
        return True
    if _name_then_input(at):  # PREDICT(m, TABLE t): MODEL forgotten, reported as such
        return True
    name = at(3)
    if word_at(at(2), "MODELS") and name is not None and (
            name.token_type in (BARE_NAME_TOKENS | {TokenType.IDENTIFIER, TokenType.L_PAREN})):
        return True
    return (word_at(at(2), "MODEL") or word_at(at(2), "PIPELINE")) and name is not None and (
        name.token_type in (BARE_NAME_TOKENS | {TokenType.IDENTIFIER}))


def _name_then_input(at: t.Callable[[int], Token | None]) -> bool:
    """``PREDICT ( name [VERSION n] , TABLE``: a PREDICT whose MODEL / PIPELINE word is missing."""

    def of_type(k: int, types: t.Collection[TokenType]) -> bool:
        token = at(k)
        return token is not None and token.token_type in types

    if not of_type(2, BARE_NAME_TOKENS | {TokenType.IDENTIFIER}):
        return False
    k = 5 if word_at(at(3), "VERSION") and of_type(4, {TokenType.NUMBER}) else 3
    return of_type(k, {TokenType.COMMA}) and of_type(k + 1, {TokenType.TABLE})


class PredictParsing(GrammarParser):
    """The parser entries of PREDICT: a PREDICT-shaped call in a table position is a :class:`PredictTable`
    (from ``_parse_table_part``); one in an expression position, and ``ML.PREDICT``, are parse errors."""

    # BigQuery's ML.PREDICT builder must not capture a user's `predict(...)` macro.
    FUNCTIONS = {k: v for k, v in DuckDBParser.FUNCTIONS.items() if k != "PREDICT"}

    FUNCTION_PARSERS = {
        **DuckDBParser.FUNCTION_PARSERS,
        "PREDICT": lambda self: self._parse_predict_call(),
    }

    def _parse_column(self) -> exp.Expr | None:
        # ML.PREDICT(MODEL ...) in an expression position: BigQuery ML's spelling, reported as such.
        if ml_predict_at(self._tokens, self._index):
            self._fail(ML_PREDICT_ERROR, self._curr)
        return super()._parse_column()

    def _at_predict_call(self) -> bool:
        return predict_shaped(self._tokens, self._index)

    def _parse_table_part(self, schema: bool = False) -> exp.Expr | None:
        # A table position: PREDICT(...) becomes Table(this=PredictTable) in
        # _parse_table_parts, which then takes alias, joins etc. as usual.
        if not schema and self._at_predict_call():
            return self._parse_predict_table()
        if not schema and ml_predict_at(self._tokens, self._index):
            self._fail(ML_PREDICT_ERROR, self._curr)
        return super()._parse_table_part(schema=schema)

    def _parse_predict_table(self) -> PredictTable:
        token = self._curr
        self._advance(2)  # PREDICT (
        if self._match_word("MODELS"):
            ref: ModelRef | ModelSet = self._parse_model_set()
        else:
            pipeline = self._match_word("PIPELINE")
            if not pipeline and not self._match_word("MODEL"):
                self._fail(f"Expected MODEL <name> as the first argument of PREDICT; the form is {PREDICT_FORM}")
            ref = self._parse_model_ref(allow_alias=not pipeline, no_alias=PIPELINE_NO_ALIAS if pipeline else None)
            if pipeline:
                ref.set("pipeline", True)

        source, options = self._parse_table_function_rest("PREDICT", PREDICT_FORM)
        node = self.expression(
            PredictTable(this=ref, expression=source, options=options or None)
        )
        node.meta["source_text"] = self._source_text(token)
        return node.update_positions(token)

    def _parse_model_set(self) -> ModelSet:
        """``MODELS (m [VERSION n], ...) ROUTE BY c`` or ``MODELS FAMILY f ROUTE BY c`` (MODELS consumed)."""
        token = self._prev
        refs, family = [], None
        if self._match_word("FAMILY"):
            if self._match_word("ROUTE", advance=False) and self._next and self._next.text.upper() == "BY":
                self._fail("Expected a family name after MODELS FAMILY")
            family = self._parse_id_var(any_token=False)
            if not isinstance(family, exp.Identifier):
                self._fail("Expected a family name after MODELS FAMILY")
        elif self._match(TokenType.L_PAREN):
            refs.append(self._parse_model_ref(no_alias=_MEMBER_NO_ALIAS))
            while self._match(TokenType.COMMA):
                refs.append(self._parse_model_ref(no_alias=_MEMBER_NO_ALIAS))
            self._match_r_paren()
        else:
            self._fail("Expected (model, ...) or FAMILY <name> after MODELS")
        if not self._match_text_seq("ROUTE", "BY"):
            self._fail("Expected ROUTE BY <column> after the models: each row names the model that runs it")
        route = self._parse_column()
        if not isinstance(route, exp.Column) or route.table:
            self._fail("Expected a column of the input after ROUTE BY")
        node = self.expression(ModelSet(expressions=refs or None, family=family, route=route))
        return node.update_positions(token)

    def _parse_predict_call(self) -> exp.Expr:
        # PREDICT( in an expression position; `PREDICT (` has been consumed.
        if predict_shaped(self._tokens, self._index - 2):
            self._fail(
                "PREDICT(MODEL ...) is a table function: use it where a table goes "
                "(FROM, JOIN, a subquery)",
                self._tokens[self._index - 2],
            )
        name = self._tokens[self._index - 2].text
        args = self._parse_function_args(alias=True)
        return self.expression(exp.Anonymous(this=name, expressions=args))


class PredictGenerating(GrammarGenerator):
    """Generator methods of PREDICT's nodes."""

    def predicttable_sql(self, expression: PredictTable) -> str:
        source_sql = self._relation_input_sql(expression.expression)
        options = self._options_sql(expression)
        options = f", {options}" if options else ""
        if isinstance(expression.this, ModelSet):
            return f"PREDICT({self.sql(expression, 'this')}, {source_sql}{options})"
        word = "PIPELINE" if expression.this.args.get("pipeline") else "MODEL"
        return f"PREDICT({word} {self.sql(expression, 'this')}, {source_sql}{options})"

    def modelset_sql(self, expression: ModelSet) -> str:
        route = self.sql(expression, "route")
        if expression.args.get("family") is not None:
            return f"MODELS FAMILY {self._name_sql(expression.args['family'])} ROUTE BY {route}"
        refs = ", ".join(self.sql(r) for r in expression.expressions)
        return f"MODELS ({refs}) ROUTE BY {route}"
