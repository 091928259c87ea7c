"""modelsql's SQL dialect: sqlglot's DuckDB dialect plus our statements, assembled from their families.

Each statement family's file holds its nodes, its parser entries and its generator methods
(:mod:`modelsql.sql.models`, :mod:`~modelsql.sql.predict`, :mod:`~modelsql.sql.pipelines`,
:mod:`~modelsql.sql.serve`, :mod:`~modelsql.sql.tune`, :mod:`~modelsql.sql.profile`,
:mod:`~modelsql.sql.finetune`; what they share is in :mod:`~modelsql.sql.grammar`); this module mixes them
into one tokenizer, parser and generator and owns the one dispatch: at the start of a statement, the
registered words of a node (:func:`statement_at`: :data:`~modelsql.sql.registry.STATEMENT_NODES`' word
sequences, longest first, unquoted words only) route to its entry ``_parse_<key>(words)``; every node of ours
generates with its ``<key>_sql`` method (``TRANSFORMS`` maps every node to it by name, because sqlglot only
auto-dispatches to its own expression classes). Keywords are case-insensitive; MODEL, MODELS, PREDICT,
IMPORT, EXPORT and VERSION stay *contextual* words, so columns and tables may still be called ``model``,
``models`` or ``predict``.

Differences from plain DuckDB parsing, on purpose:

* A first word of our statements that DuckDB's tokenizer makes a ``COMMAND``
  (whose rest is one opaque string), today only ``VACUUM``, is an ordinary
  word to our tokenizer (:data:`DEMOTED_COMMANDS`, derived from the
  registry), so the words after it can be matched. ``VACUUM MODELS`` parses
  to ``VacuumModels``; any other ``VACUUM ...`` still becomes the same
  ``exp.Command(this='VACUUM', expression=Literal('<rest>'))`` as DuckDB's.
* Our statements are recognised only at the start of a statement, as
  :func:`modelsql.sql.mentions_models` recognises them: ``ALTER TABLE t DROP
  model`` drops a column, ``WITH q AS (...) SHOW MODELS`` and
  ``SELECT * FROM (DESCRIBE MODEL m)`` are DuckDB's.
* ``PREDICT(...)`` is ours only when PREDICT-shaped (:mod:`modelsql.sql.predict`).
* ``SHOW MODELS`` / ``PIPELINES`` / ``STUDIES`` / ``SERVERS`` and ``VACUUM MODELS`` are also DuckDB's text
  (``DESCRIBE models``, vacuuming a table): ``SHOW MODELSQL MODELS`` etc. are only ours. Which meaning a
  text has is decided by the planner (:mod:`modelsql.engine.ambiguity`), by whether the table exists.
* Each select-list (and ``RETURNING``) expression keeps the exact text it was
  parsed from in ``meta["source_text"]``, and so does each ``PredictTable``:
  DuckDB names an unaliased column by its own reading of that text, which
  regenerated SQL does not keep.

Adding a statement family: a file like :mod:`modelsql.sql.serve` with its nodes and a ``GrammarParser`` and a
``GrammarGenerator`` subclass, imported here and mixed into :class:`ModelSQLParser` and
:class:`ModelSQLGenerator`.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.tokens import Token, TokenType

# the statement families, in the order the statement reference (docs/statements.md) lists them
from modelsql.sql.models import ModelGenerating, ModelParsing
from modelsql.sql.predict import PredictGenerating, PredictParsing
from modelsql.sql.evaluate import EvaluateGenerating, EvaluateParsing
from modelsql.sql.pipelines import PipelineGenerating, PipelineParsing
from modelsql.sql.serve import ServeGenerating, ServeParsing
from modelsql.sql.tune import TuneGenerating, TuneParsing
from modelsql.sql.profile import ProfileGenerating, ProfileParsing
from modelsql.sql.finetune import FinetuneGenerating, FinetuneParsing
from modelsql.sql.statement_tables import StatementTableGenerating, StatementTableParsing
from modelsql.sql.registry import (MODEL_NODES, NAME_TOKENS, STATEMENT_NODES, statement_starts, statement_words_at,
                                   word_at, words_at)

__all__ = ["ModelSQL", "ModelSQLTokenizer", "ModelSQLParser", "ModelSQLGenerator", "DEMOTED_COMMANDS", "statement_at",
           "dotted_statement_at"]


def statement_at(
    tokens: t.Sequence[Token], i: int
) -> tuple[type[exp.Expression], tuple[str, ...]] | None:
    """The statement of ours whose words open ``tokens[i:]``: ``(node class, words matched)``.

    Tries every registered word sequence (:data:`~modelsql.sql.registry.STATEMENT_NODES`,
    each node's ``WORDS``), longest first, on unquoted tokens only, and the
    node's ``ONLY_IF`` condition on the tokens after the words. The caller
    checks that ``i`` is the start of a statement. ``None`` when none matches.
    """
    return statement_words_at(tokens, i)


def dotted_statement_at(tokens: t.Sequence[Token], i: int) -> Token | None:
    """The dot of ``DESCRIBE MODEL ds.m`` (our statement's words, then a name and a dot: a schema's or a BigQuery ML
    dataset's name before the model's, which no statement of ours takes) opening ``tokens[i:]``; else None."""
    for words, _ in statement_starts():
        if words[-1] not in ("MODEL", "PIPELINE", "STUDY") or not words_at(tokens, i, words):
            continue
        j = i + len(words)
        while j < len(tokens) and any(word_at(tokens[j], w) for w in ("IF", "NOT", "EXISTS")):
            j += 1
        if j + 2 < len(tokens) and tokens[j].token_type in NAME_TOKENS and tokens[j + 1].token_type == TokenType.DOT:
            return tokens[j + 1]
    return None


#: First words of our statements that DuckDB's tokenizer makes a ``COMMAND`` token
#: (the rest of the statement one opaque string): our tokenizer keeps them plain
#: words, and a statement starting with one that is not ours is rebuilt as
#: DuckDB's ``exp.Command`` (``ModelSQLParser._parse_demoted_command``).
DEMOTED_COMMANDS: frozenset[str] = frozenset(
    words[0]
    for node in STATEMENT_NODES
    for words in node.WORDS  # type: ignore[attr-defined]
    if DuckDB.Tokenizer.KEYWORDS.get(words[0]) in DuckDB.Tokenizer.COMMANDS
)


class ModelSQLTokenizer(DuckDB.Tokenizer):
    """DuckDB's tokenizer, except that :data:`DEMOTED_COMMANDS` (``VACUUM``) are plain words and a name may be
    quoted in backticks as DuckDB's own parser allows (```m```, as BigQuery ML and MySQL write names; written back
    in double quotes)."""

    KEYWORDS = {k: v for k, v in DuckDB.Tokenizer.KEYWORDS.items() if k not in DEMOTED_COMMANDS}
    IDENTIFIERS = ['"', "`"]


class ModelSQLParser(ModelParsing, PredictParsing, EvaluateParsing, PipelineParsing, ServeParsing, TuneParsing,
                     ProfileParsing, FinetuneParsing, StatementTableParsing):
    """DuckDB's parser plus every statement family's entries, reached from :meth:`_parse_statement`."""

    def _parse_statement(self) -> exp.Expr | None:
        # The one dispatch for our statements: at the start of a statement (a
        # chunk of tokens between semicolons begins at index 0), the registered
        # words of a node (statement_at) route to its entry _parse_<key>(words),
        # called with the words consumed. Everything else is DuckDB's.
        if self._index == 0 and self._curr:
            found = statement_at(self._tokens, 0)
            if found is not None:
                node, words = found
                comments: list[str] = []
                for _ in words:
                    comments.extend(self._curr.comments or [])
                    self._advance()
                self._prev_comments = []
                stmt: exp.Expr = getattr(self, f"_parse_{node.key}")(words)
                stmt.add_comments(comments, prepend=True)
                return stmt
            if self._curr.token_type == TokenType.VAR and self._curr.text.upper() in DEMOTED_COMMANDS:
                self._advance()
                comments = self._prev_comments
                command = self._parse_demoted_command()
                command.add_comments(comments, prepend=True)
                return command
        return super()._parse_statement()

    def _parse_demoted_command(self) -> exp.Command:
        # A DEMOTED_COMMANDS word (e.g. VACUUM) starting a statement not of ours,
        # consumed: the same opaque Command DuckDB's dialect produces.
        start = self._prev
        while self._curr:
            self._advance()
        rest = self.sql[start.end + 1 : self._prev.end + 1].strip() if self._prev is not start else ""
        return exp.Command(this=start.text.upper(), expression=exp.Literal.string(rest) if rest else None)

    def _parse_projections(self) -> tuple[list[exp.Expr], list[exp.Expr] | None]:
        return self._parse_csv(self._parse_projection), None

    def _parse_projection(self) -> exp.Expr | None:
        """One select-list expression, with its text in ``meta["source_text"]``."""
        first = self._curr
        node = self._parse_expression()
        if node is not None and first is not None and self._prev is not None and self._prev.start >= first.start:
            node.meta["source_text"] = self._source_text(first)
        return node

    def _parse_returning(self) -> exp.Returning | None:
        # as sqlglot's, but each expression keeps its text (as a select list's does)
        if not self._match(TokenType.RETURNING):
            return None
        return self.expression(
            exp.Returning(
                expressions=self._parse_csv(self._parse_projection),
                into=self._match(TokenType.INTO) and self._parse_table_part(),
            )
        )


class ModelSQLGenerator(ModelGenerating, PredictGenerating, EvaluateGenerating, PipelineGenerating, ServeGenerating,
                        TuneGenerating, ProfileGenerating, FinetuneGenerating, StatementTableGenerating):
    """DuckDB's generator plus one ``<key>_sql`` method per node of ours (in its family's mixin)."""

    # Every node of ours -> its `<key>_sql` method, found by name (a node without
    # one fails when generated, and in tests/sql/test_sql_parse.py).
    TRANSFORMS = {
        **DuckDBGenerator.TRANSFORMS,
        **{node: lambda self, e: getattr(self, f"{e.key}_sql")(e) for node in MODEL_NODES},
    }

    # Comments written before a statement of ours are generated before it.
    WITH_SEPARATED_COMMENTS = (*DuckDBGenerator.WITH_SEPARATED_COMMENTS, *STATEMENT_NODES)


class ModelSQL(DuckDB):
    """sqlglot dialect ``"modelsql"``: DuckDB plus model statements and ``PREDICT``.

    Use as ``sqlglot.parse(sql, read=ModelSQL)`` / ``node.sql(dialect=ModelSQL)``;
    prefer :func:`modelsql.sql.parse`, which also maps errors to
    ``ProgrammingError``.
    """

    Tokenizer = ModelSQLTokenizer
    Parser = ModelSQLParser
    Generator = ModelSQLGenerator
