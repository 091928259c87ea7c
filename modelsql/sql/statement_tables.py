"""A statement of ours that lists rows (``SHOW MODELS``, ``DESCRIBE MODEL m``, ``SHOW STUDIES`` ...) read as a
relation in parentheses, as DuckDB reads its own ``SHOW`` and ``DESCRIBE`` (``SELECT name FROM (SHOW MODELS)
WHERE aliases IS NOT NULL``): :class:`StatementTable`, which the engine computes before the query around it is
planned, as the evaluation table functions are."""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from modelsql.sql.grammar import GrammarGenerator, GrammarParser
from modelsql.sql.registry import part, statement_words_at, word_at

__all__ = ["StatementTable", "row_statement_at", "StatementTableParsing", "StatementTableGenerating"]

_LISTING_WORDS = ("SHOW", "DESCRIBE")
"""The first words of the statements of ours that only list rows."""


def row_statement_at(tokens: t.Sequence[Token], i: int) -> t.Optional[tuple[type[exp.Expression], tuple[str, ...]]]:
    """``(node class, words)`` of the statement of ours that lists rows (``SHOW ...``, ``DESCRIBE ...``) whose
    words open ``tokens[i:]`` (longest words first, the node's ``ONLY_IF`` holding); None for anything else."""
    return statement_words_at(tokens, i, _LISTING_WORDS)


@part
class StatementTable(exp.Expression):
    """``(SHOW MODELS)`` and the other listings of ours in a FROM, wrapped as every table function is
    (``exp.Table(this=StatementTable(...), alias=...)``).

    Args:
        this: the statement node (a ``SHOW`` or ``DESCRIBE`` of ours).
    """

    EXAMPLES = (
        "SELECT name, aliases FROM (SHOW MODELS) WHERE aliases IS NOT NULL",
        "SELECT * FROM (DESCRIBE MODEL m) AS d WHERE d.role = 'input'",
    )
    arg_types = {"this": True}


class StatementTableParsing(GrammarParser):
    """``(SHOW MODELS)`` where a table may stand; DuckDB's own ``(SHOW TABLES)`` kept as written (sqlglot reads
    ``SHOW`` there as a table named SHOW aliased by the next word), so a query that also holds a PREDICT runs it as
    DuckDB would."""

    def _parse_table(self, schema: bool = False, joins: bool = False, *args: t.Any, **kwargs: t.Any) -> exp.Expr | None:
        depth = self._open_parentheses() if not schema else 0
        found = row_statement_at(self._tokens, self._index + depth) if depth else None
        if found is None and depth == 1 and word_at(self._next, "SHOW"):
            return self._parse_duckdb_listing()
        if found is None:
            return super()._parse_table(schema, joins, *args, **kwargs)
        start, index = self._curr, self._index
        self._advance(depth)
        listing = self._parse_listing(*found)
        closed = 0
        while closed < depth and self._match(TokenType.R_PAREN):  # ((SHOW MODELS)), as DuckDB reads ((SHOW TABLES))
            closed += 1
        if closed < depth and depth > 1:  # ((SHOW MODELS) JOIN ...): the outer parentheses hold a join
            self._retreat(index)
            return super()._parse_table(schema, joins, *args, **kwargs)
        if closed < depth:
            self._fail(f"Expected ) after {' '.join(found[1])} read as a relation", self._curr)
        listing.meta["source_text"] = self._source_text(start)  # (an output column is named by it, as PREDICT's)
        table = self.expression(exp.Table(this=listing, alias=self._parse_table_alias()))
        return t.cast(exp.Expr, table.update_positions(start))

    def _open_parentheses(self) -> int:
        """How many opening parentheses follow one another from the current token."""
        depth = 0
        while self._index + depth < len(self._tokens) and self._tokens[self._index + depth].token_type == TokenType.L_PAREN:
            depth += 1
        return depth

    def _parse_statement(self) -> exp.Expr | None:
        # A CTE's body: WITH x AS (SHOW MODELS) is SELECT * FROM (SHOW MODELS); DuckDB's WITH x AS (SHOW t), as written
        inside = self._index > 0 and self._prev is not None and self._prev.token_type == TokenType.L_PAREN
        found = row_statement_at(self._tokens, self._index) if inside else None
        if found is None and inside and word_at(self._curr, "SHOW"):
            return self.expression(exp.select("*").from_(exp.Subquery(this=self._duckdb_show())))
        if found is None:
            return super()._parse_statement()
        start = self._curr
        listing = self._parse_listing(*found)
        listing.meta["source_text"] = f"({self._source_text(start)})"
        return self.expression(exp.select("*").from_(exp.Table(this=listing)))

    def _parse_listing(self, node: type[exp.Expression], words: tuple[str, ...]) -> StatementTable:
        """The listing ``node`` whose ``words`` open the text here, as a :class:`StatementTable`."""
        self._advance(len(words))
        return StatementTable(this=getattr(self, f"_parse_{node.key}")(words))

    def _parse_duckdb_listing(self) -> exp.Expr:
        """``(SHOW ...)`` of DuckDB's, up to its closing parenthesis, as a subquery of DuckDB's command as written
        (:meth:`_duckdb_show`), with its alias."""
        start = self._curr
        self._advance()
        command = self._duckdb_show()
        if not self._match(TokenType.R_PAREN):
            self._fail("Expected ) after (SHOW ...", start)
        listing = exp.Subquery(this=command, alias=self._parse_table_alias())
        return t.cast(exp.Expr, self.expression(listing).update_positions(start))

    def _duckdb_show(self) -> exp.Expr:
        """DuckDB's ``SHOW ...`` from the current token up to the parenthesis closing it (not consumed), as written;
        ``SHOW [ALL] TABLES`` without the tables modelsql registers while a statement runs (``__msql_...``: table
        functions computed before planning, batch PREDICT inputs)."""
        start, depth = self._curr, 0
        while self._next is not None and not (depth == 0 and self._next.token_type == TokenType.R_PAREN):
            depth += (self._next.token_type == TokenType.L_PAREN) - (self._next.token_type == TokenType.R_PAREN)
            self._advance()
        words = self.sql[start.start:self._curr.end + 1].strip()[4:].strip()  # (after SHOW)
        self._advance()
        command = exp.Command(this="SHOW", expression=words)
        if words.upper().split() not in (["TABLES"], ["ALL", "TABLES"]):
            return command
        return exp.select("*").from_(exp.Subquery(this=command)).where("NOT starts_with(name, '__msql_')")


class StatementTableGenerating(GrammarGenerator):
    """Generator method of :class:`StatementTable`."""

    def statementtable_sql(self, expression: StatementTable) -> str:
        return f"({self.sql(expression, 'this')})"
