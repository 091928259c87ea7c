"""modelsql's SQL dialect: sqlglot's DuckDB dialect plus our model statements.

Grammar added to DuckDB's (keywords are case-insensitive; MODEL, MODELS,
PREDICT, IMPORT, EXPORT and VERSION stay *contextual* words, so columns and
tables may still be called ``model``, ``models`` or ``predict``)::

    IMPORT MODEL [IF NOT EXISTS] name FROM source [WITH (opt, ...)]
    CREATE [OR REPLACE] MODEL [IF NOT EXISTS] name FROM source [WITH (opt, ...)]
        source := 'file.onnx' | ? | $n | PYTHON 'package.module:function' | STUDY name [TRIAL n]
    DROP MODEL [IF EXISTS] name [VERSION n]
    SHOW [MODELSQL] MODELS
    DESCRIBE MODEL name [VERSION n]
    EXPORT MODEL name [VERSION n] TO 'path.onnx'
    VACUUM [MODELSQL] MODELS
    ... FROM PREDICT(MODEL name [VERSION n], TABLE t | (query) [, opt ...]) [[AS] alias] ...
    ... FROM PREDICT(PIPELINE name [VERSION n], TABLE t | (query) [, opt ...]) ...

plus the pipeline statements of :mod:`modelsql.sql.pipeline_grammar` (CREATE /
DROP / SHOW / DESCRIBE / EXPORT PIPELINE), the serving statements of
:mod:`modelsql.sql.serve_grammar` (SERVE, STOP SERVER, SHOW SERVERS) and the
tuning statements of :mod:`modelsql.sql.tune_grammar` (TUNE MODEL, SHOW STUDIES,
DESCRIBE STUDY, DROP STUDY), mixed in.

    opt   := key (= | := | =>) value
    value := literal | -number | TRUE | FALSE | NULL | name | ? | $n | ( value [, value ...] )

The nodes are in :mod:`modelsql.sql.nodes`; each statement node declares the
words that start it (``WORDS``) and registers itself in ``STATEMENT_NODES``.
Each has one parser entry here, ``ModelSQLParser._parse_<key>(words)`` (``key``
is the lower-cased class name), reached from the single dispatch at the start
of a statement in ``_parse_statement`` (:func:`statement_at`: the registered
word sequences, longest first, unquoted words only), and one generator method
``ModelSQLGenerator.<key>_sql`` (``TRANSFORMS`` maps every node to it by name,
because sqlglot only auto-dispatches to its own expression classes).
``PredictTable`` is not a statement: its entry is reached from
``_parse_table_part``.

Differences from plain DuckDB parsing, on purpose:

* A first word of our statements that DuckDB's tokenizer makes a ``COMMAND``
  (whose rest is one opaque string), today only ``VACUUM``, is an ordinary
  word to our tokenizer (:data:`DEMOTED_COMMANDS`, derived from the
  registry), so the words after it can be matched. ``VACUUM MODELS`` parses
  to :class:`VacuumModels`; any other ``VACUUM ...`` still becomes the same
  ``exp.Command(this='VACUUM', expression=Literal('<rest>'))`` as DuckDB's.
* Our statements are recognised only at the start of a statement, as
  :func:`modelsql.sql.mentions_models` recognises them: ``ALTER TABLE t DROP
  model`` drops a column, ``WITH q AS (...) SHOW MODELS`` and
  ``SELECT * FROM (DESCRIBE MODEL m)`` are DuckDB's.
* ``PREDICT`` is not sqlglot's BigQuery ``exp.Predict`` function. Only a
  PREDICT-shaped call (:func:`predict_shaped`: ``PREDICT(MODEL name ...`` or
  ``PREDICT(TABLE ...``) is ours; any other ``predict(...)``, in an expression or
  a table position, stays an ordinary function call (a user's macro), and
  ``PREDICT(MODEL ...)`` outside a table position is a parse error, and so is BigQuery ML's
  ``ML.PREDICT(MODEL ...)`` (:func:`ml_predict_at`), whose message says to write ``PREDICT``.
* ``SHOW MODELS`` / ``PIPELINES`` / ``STUDIES`` / ``SERVERS`` and ``VACUUM MODELS`` are also DuckDB's text
  (``DESCRIBE models``, vacuuming a table): ``SHOW MODELSQL MODELS`` etc. are only ours. Which meaning a
  text has is decided by the planner (:mod:`modelsql.engine.ambiguity`), by whether the table exists.
* Each select-list (and ``RETURNING``) expression keeps the exact text it was
  parsed from in ``meta["source_text"]``, and so does each :class:`PredictTable`:
  DuckDB names an unaliased column by its own reading of that text, which
  regenerated SQL does not keep.
"""

from __future__ import annotations

import re
import typing as t

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokens import Token, TokenType

from modelsql.sql.pipeline_grammar import PipelineGenerating, PipelineParsing
from modelsql.sql.serve_grammar import ServeGenerating, ServeParsing
from modelsql.sql.tune_grammar import TuneGenerating, TuneParsing
from modelsql.sql.nodes import (
    MODEL_NODES,
    STATEMENT_NODES,
    DescribeModel,
    DropModel,
    ExportModel,
    ImportModel,
    ModelRef,
    ModelSet,
    PredictTable,
    ShowModels,
    TrustModel,
    VacuumModels,
)

#: Tokens whose text is quoted source (strings, quoted identifiers): never keywords.
TEXT_TOKENS: frozenset = DuckDBParser.TEXT_MATCH_EXCLUDED_TOKENS

#: Token types the parser accepts as a bare name (model names, option keys / values).
_NAME_TOKENS = frozenset(DuckDBParser.ID_VAR_TOKENS) | {TokenType.VAR}
_PLAIN_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: ``'package.module:function'`` after ``FROM PYTHON`` (the part after ``:`` may be dotted, ``Class.method``).
_PYTHON_REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")

#: Separators accepted between an option's name and its value.
OPTION_SEPARATORS = (TokenType.EQ, TokenType.COLON_EQ, TokenType.FARROW)

#: The accepted form of PREDICT, shown by its parse errors.
PREDICT_FORM = ("PREDICT(MODEL name [VERSION n] | PIPELINE name [VERSION n] | MODELS (name, ...) ROUTE BY column "
                "| MODELS FAMILY name ROUTE BY column, TABLE t | (SELECT ...) [, option = value ...])")


def _word(token: Token | None, word: str) -> bool:
    return token is not None and token.token_type not in TEXT_TOKENS and token.text.upper() == word


def _statement_starts() -> list[tuple[tuple[str, ...], type[exp.Expression]]]:
    """Every registered ``(words, node)``, longest word sequence first (ties in registry order)."""
    pairs = [(words, node) for node in STATEMENT_NODES for words in node.WORDS]  # type: ignore[attr-defined]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def statement_at(
    tokens: t.Sequence[Token], i: int
) -> tuple[type[exp.Expression], tuple[str, ...]] | None:
    """The statement of ours whose words open ``tokens[i:]``: ``(node class, words matched)``.

    Tries every registered word sequence (:data:`~modelsql.sql.nodes.STATEMENT_NODES`,
    each node's ``WORDS``), longest first, on unquoted tokens only, and the
    node's ``ONLY_IF`` condition on the tokens after the words. The caller
    checks that ``i`` is the start of a statement. ``None`` when none matches.
    """
    for words, node in _statement_starts():
        n = len(words)
        if i + n > len(tokens) or not all(_word(tokens[i + k], w) for k, w in enumerate(words)):
            continue
        only_if = getattr(node, "ONLY_IF", None)
        if only_if is None or only_if(tokens, i + n):
            return node, words
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
    return (i + 1 < len(tokens) and _word(tokens[i], "ML") and tokens[i + 1].token_type == TokenType.DOT
            and not (i > 0 and tokens[i - 1].token_type == TokenType.DOT) and _predict_form(tokens, i + 2))


#: The parse error of ``ML.PREDICT(MODEL ...)``.
ML_PREDICT_ERROR = f"ML.PREDICT is BigQuery ML's spelling; write PREDICT, without ML.: {PREDICT_FORM}"


def _predict_form(tokens: t.Sequence[Token], i: int) -> bool:
    """``PREDICT (`` followed by ``MODEL <name>``, ``PIPELINE <name>``, ``MODELS ...`` or ``TABLE`` (or a name
    then ``, TABLE``), wherever it stands."""

    def at(k: int) -> Token | None:
        return tokens[i + k] if i + k < len(tokens) else None

    if not (_word(at(0), "PREDICT") and at(1) is not None and at(1).token_type == TokenType.L_PAREN):
        return False
    if at(2) is not None and at(2).token_type == TokenType.TABLE:
        return True
    if _name_then_input(at):  # PREDICT(m, TABLE t): MODEL forgotten, reported as such
        return True
    name = at(3)
    if _word(at(2), "MODELS") and name is not None and (
            name.token_type in (_NAME_TOKENS | {TokenType.IDENTIFIER, TokenType.L_PAREN})):
        return True
    return (_word(at(2), "MODEL") or _word(at(2), "PIPELINE")) and name is not None and (
        name.token_type in (_NAME_TOKENS | {TokenType.IDENTIFIER}))


def _name_then_input(at) -> bool:
    """``PREDICT ( name [VERSION n] , TABLE``: a PREDICT whose MODEL / PIPELINE word is missing."""
    if at(2) is None or at(2).token_type not in (_NAME_TOKENS | {TokenType.IDENTIFIER}):
        return False
    k = 3
    if _word(at(3), "VERSION") and at(4) is not None and at(4).token_type == TokenType.NUMBER:
        k = 5
    return (at(k) is not None and at(k).token_type == TokenType.COMMA and at(k + 1) is not None
            and at(k + 1).token_type == TokenType.TABLE)


class ModelSQLTokenizer(DuckDB.Tokenizer):
    """DuckDB's tokenizer, except that :data:`DEMOTED_COMMANDS` (``VACUUM``) are plain words."""

    KEYWORDS = {k: v for k, v in DuckDB.Tokenizer.KEYWORDS.items() if k not in DEMOTED_COMMANDS}


class ModelSQLParser(TuneParsing, PipelineParsing, ServeParsing, DuckDBParser):
    """DuckDB's parser plus the entries for :mod:`modelsql.sql.nodes`.

    Errors are reported through sqlglot's ``raise_error`` (a ``ParseError``
    whose ``errors[0]`` carries the offending token's position);
    :func:`modelsql.sql.parse` turns them into ``ProgrammingError``.
    """

    # BigQuery's ML.PREDICT builder must not capture a user's `predict(...)` macro.
    FUNCTIONS = {k: v for k, v in DuckDBParser.FUNCTIONS.items() if k != "PREDICT"}

    FUNCTION_PARSERS = {
        **DuckDBParser.FUNCTION_PARSERS,
        "PREDICT": lambda self: self._parse_predict_call(),
    }

    # ------------------------------------------------------------------ helpers

    def _match_word(self, word: str, advance: bool = True) -> bool:
        """Match one unquoted word (not a string or quoted identifier)."""
        return self._match_text_seq(word, advance=advance)

    def _source_text(self, first: Token) -> str:
        """The text from token ``first`` to the last token consumed, exactly as written."""
        return self.sql[first.start : self._prev.end + 1]

    def _parse_model_ref(self, allow_version: bool = True) -> ModelRef:
        """``name [VERSION n]`` -> :class:`ModelRef` (positions of the name in ``meta``)."""
        token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self.raise_error("Expected a model name", token)

        version = None
        if self._match_word("VERSION"):
            if not allow_version:
                self.raise_error(
                    "VERSION cannot be given here: versions are assigned when a model is imported",
                    self._prev,
                )
            if not (self._match(TokenType.NUMBER) and self._prev.text.isdigit()):
                self.raise_error("Expected an integer version number after VERSION")
            version = exp.Literal.number(self._prev.text)

        ref = self.expression(ModelRef(this=name, version=version))
        if name is not None:
            ref.update_positions(name)
        return ref

    def _parse_path_literal(self, what: str) -> exp.Expr | None:
        """A string literal (or a ``?`` / ``$n`` placeholder) naming a file."""
        if self._match(TokenType.STRING):
            return self.expression(exp.Literal.string(self._prev.text), self._prev)
        placeholder = self._parse_placeholder()
        if placeholder is None:
            self.raise_error(f"Expected a quoted file path after {what}")
        return placeholder

    def _parse_relation_input(self, where: str) -> exp.Expr | None:
        """``TABLE t`` -> ``exp.Table``, ``(query)`` -> ``exp.Subquery`` (the input of PREDICT,
        TUNE MODEL's ON / VALIDATE ON); ``None``, nothing consumed, when neither starts here.
        ``where`` ends the error for a parenthesised non-query (``"as the input of PREDICT"``)."""
        if self._match(TokenType.TABLE):
            if self._curr is None or self._curr.token_type not in (self.ID_VAR_TOKENS | {TokenType.IDENTIFIER}):
                self.raise_error("Expected a table name after TABLE")
            return self._parse_table_parts(schema=True)
        if self._curr is not None and self._curr.token_type == TokenType.L_PAREN:
            paren = self._curr
            source = self._parse_select(
                table=True, parse_subquery_alias=False, parse_set_operation=False
            )
            if isinstance(source, exp.Values) and not source.alias:
                source = self.expression(exp.Subquery(this=source))  # (VALUES ...)
            if not isinstance(source, exp.Subquery) or not isinstance(
                source.unnest(), (exp.Query, exp.Values)
            ):
                self.raise_error(f"Expected a query in parentheses {where}", paren)
            return source
        return None

    def _parse_option_scalar(self) -> exp.Expr | None:
        if self._match_set(self.STRING_PARSERS):
            return self.STRING_PARSERS[self._prev.token_type](self, self._prev)
        if self._match_set(self.NUMERIC_PARSERS):
            return self.NUMERIC_PARSERS[self._prev.token_type](self, self._prev)
        if self._curr.token_type == TokenType.DASH and self._next.token_type == TokenType.NUMBER:
            self._advance()
            number = self.NUMERIC_PARSERS[TokenType.NUMBER](self, self._curr)
            self._advance()
            return self.expression(exp.Neg(this=number))
        if self._match_set((TokenType.TRUE, TokenType.FALSE, TokenType.NULL)):
            return self.PRIMARY_PARSERS[self._prev.token_type](self, self._prev)
        placeholder = self._parse_placeholder()
        if placeholder is not None:
            return placeholder
        name = self._parse_id_var(any_token=False)
        if isinstance(name, exp.Identifier):
            return name
        self.raise_error("Expected an option value (a literal, a name or a parenthesised list)")
        return None

    def _parse_option_value(self) -> exp.Expr | None:
        if self._match(TokenType.L_PAREN):
            items = [] if self._curr.token_type == TokenType.R_PAREN else (
                self._parse_csv(self._parse_option_value)
            )
            self._match_r_paren()
            return self.expression(exp.Tuple(expressions=items))
        return self._parse_option_scalar()

    def _parse_model_option(self) -> exp.EQ:
        """``key = value`` (also ``:=`` / ``=>``) -> ``exp.EQ(this=Identifier, expression=value)``."""
        token = self._curr
        key = self._parse_id_var(any_token=False)
        if not isinstance(key, exp.Identifier):
            self.raise_error("Expected an option name", token)
        if not self._match_set(OPTION_SEPARATORS):
            self.raise_error("Expected = after the option name")
        return self.expression(exp.EQ(this=key, expression=self._parse_option_value()))

    def _parse_with_options(self) -> list[exp.EQ] | None:
        """``WITH (opt, ...)`` -> list of ``exp.EQ``, or ``None`` when no WITH."""
        if not self._match(TokenType.WITH):
            return None
        self._match_l_paren()
        options = self._parse_csv(self._parse_model_option)
        self._match_r_paren()
        return options or None

    # --------------------------------------------------------------- statements

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
                stmt = getattr(self, f"_parse_{node.key}")(words)
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

    # Statement entries: _parse_<node key>(words), reached from _parse_statement
    # with the node's words (one of its WORDS) consumed.

    def _parse_importmodel(self, words: tuple[str, ...]) -> ImportModel:
        # IMPORT MODEL / CREATE MODEL / CREATE OR REPLACE MODEL
        exists = self._parse_exists(not_=True)
        ref = self._parse_model_ref(allow_version=False)
        if not self._match(TokenType.FROM):
            self.raise_error(
                "Expected FROM '<file>', FROM PYTHON 'package.module:function' or FROM STUDY <name> "
                "after the model name"
            )
        # An unquoted word right after FROM is PYTHON or STUDY (a file path is quoted or a placeholder).
        source = study = trial = None
        python = False
        if self._match_word("PYTHON"):
            python = True
            if not self._match(TokenType.STRING):
                self.raise_error("Expected a quoted 'package.module:function' after FROM PYTHON")
            if not _PYTHON_REFERENCE.match(self._prev.text):
                self.raise_error(
                    "Expected 'package.module:function' after FROM PYTHON: dotted module names, "
                    "a colon, then the function's name",
                    self._prev,
                )
            source = self.expression(exp.Literal.string(self._prev.text), self._prev)
        elif self._match_word("STUDY"):
            token = self._curr
            study = self._parse_id_var(any_token=False)
            if not isinstance(study, exp.Identifier):
                self.raise_error("Expected a study name after FROM STUDY", token)
            if self._match_word("TRIAL"):
                if not (self._match(TokenType.NUMBER) and self._prev.text.isdigit()):
                    self.raise_error("Expected an integer trial number after TRIAL")
                trial = exp.Literal.number(self._prev.text)
        elif self._match(TokenType.STRING):
            source = self.expression(exp.Literal.string(self._prev.text), self._prev)
        else:
            source = self._parse_placeholder()
            if source is None:
                self.raise_error(
                    "Expected a quoted file path, PYTHON 'package.module:function' or STUDY <name> after FROM"
                )
        options = self._parse_with_options()
        return self.expression(
            ImportModel(
                this=ref,
                source=source,
                exists=bool(exists),
                replace="REPLACE" in words,
                options=options,
                python=python,
                study=study,
                trial=trial,
            )
        )

    def _parse_dropmodel(self, words: tuple[str, ...]) -> DropModel:
        exists = self._parse_exists()
        ref = self._parse_model_ref()
        return self.expression(DropModel(this=ref, exists=bool(exists)))

    def _parse_trustmodel(self, words: tuple[str, ...]) -> TrustModel:
        return self.expression(TrustModel(this=self._parse_model_ref()))

    def _parse_showmodels(self, words: tuple[str, ...]) -> ShowModels:
        return self.expression(ShowModels())

    def _parse_describemodel(self, words: tuple[str, ...]) -> DescribeModel:
        return self.expression(DescribeModel(this=self._parse_model_ref()))

    def _parse_exportmodel(self, words: tuple[str, ...]) -> ExportModel:
        ref = self._parse_model_ref()
        if not self._match_word("TO"):
            self.raise_error("Expected TO '<file>' after the model name")
        target = self._parse_path_literal("TO")
        return self.expression(ExportModel(this=ref, target=target))

    def _parse_vacuummodels(self, words: tuple[str, ...]) -> VacuumModels:
        return self.expression(VacuumModels())

    # -------------------------------------------------------------- PREDICT(...)

    def _parse_column(self) -> exp.Expr | None:
        # ML.PREDICT(MODEL ...) in an expression position: BigQuery ML's spelling, reported as such.
        if ml_predict_at(self._tokens, self._index):
            self.raise_error(ML_PREDICT_ERROR, self._curr)
        return super()._parse_column()

    def _at_predict_call(self) -> bool:
        return predict_shaped(self._tokens, self._index)

    def _parse_table_part(self, schema: bool = False) -> exp.Expr | None:
        # A table position: PREDICT(...) becomes Table(this=PredictTable) in
        # _parse_table_parts, which then takes alias, joins etc. as usual.
        if not schema and self._at_predict_call():
            return self._parse_predict_table()
        if not schema and ml_predict_at(self._tokens, self._index):
            self.raise_error(ML_PREDICT_ERROR, self._curr)
        return super()._parse_table_part(schema=schema)

    def _parse_predict_table(self) -> PredictTable:
        token = self._curr
        self._advance(2)  # PREDICT (
        if self._match_word("MODELS"):
            ref = self._parse_model_set()
        else:
            pipeline = self._match_word("PIPELINE")
            if not pipeline and not self._match_word("MODEL"):
                self.raise_error(f"Expected MODEL <name> as the first argument of PREDICT; the form is {PREDICT_FORM}")
            ref = self._parse_model_ref()
            if pipeline:
                ref.set("pipeline", True)

        if not self._match(TokenType.COMMA):
            self.raise_error(f"Expected the input after the model in PREDICT; the form is {PREDICT_FORM}")

        source = self._parse_relation_input("as the input of PREDICT")
        if source is None:
            self.raise_error(
                f"Expected TABLE <name> or (SELECT ...) as the input of PREDICT; the form is {PREDICT_FORM}"
            )

        options = []
        while self._match(TokenType.COMMA):
            options.append(self._parse_model_option())
        self._match_r_paren()

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
                self.raise_error("Expected a family name after MODELS FAMILY")
            family = self._parse_id_var(any_token=False)
            if not isinstance(family, exp.Identifier):
                self.raise_error("Expected a family name after MODELS FAMILY")
        elif self._match(TokenType.L_PAREN):
            refs.append(self._parse_model_ref())
            while self._match(TokenType.COMMA):
                refs.append(self._parse_model_ref())
            self._match_r_paren()
        else:
            self.raise_error("Expected (model, ...) or FAMILY <name> after MODELS")
        if not self._match_text_seq("ROUTE", "BY"):
            self.raise_error("Expected ROUTE BY <column> after the models: each row names the model that runs it")
        route = self._parse_column()
        if not isinstance(route, exp.Column) or route.table:
            self.raise_error("Expected a column of the input after ROUTE BY")
        node = self.expression(ModelSet(expressions=refs or None, family=family, route=route))
        return node.update_positions(token)

    def _parse_predict_call(self) -> exp.Expr:
        # PREDICT( in an expression position; `PREDICT (` has been consumed.
        if predict_shaped(self._tokens, self._index - 2):
            self.raise_error(
                "PREDICT(MODEL ...) is a table function: use it where a table goes "
                "(FROM, JOIN, a subquery)",
                self._tokens[self._index - 2],
            )
        name = self._tokens[self._index - 2].text
        args = self._parse_function_args(alias=True)
        return self.expression(exp.Anonymous(this=name, expressions=args))


class ModelSQLGenerator(TuneGenerating, PipelineGenerating, ServeGenerating, DuckDBGenerator):
    """DuckDB's generator plus one ``<key>_sql`` method per node of ours."""

    # Every node of ours -> its `<key>_sql` method, found by name (a node without
    # one fails when generated, and in tests/sql/test_sql_parse.py).
    TRANSFORMS = {
        **DuckDBGenerator.TRANSFORMS,
        **{node: lambda self, e: getattr(self, f"{e.key}_sql")(e) for node in MODEL_NODES},
    }

    # Comments written before a statement of ours are generated before it.
    WITH_SEPARATED_COMMENTS = (*DuckDBGenerator.WITH_SEPARATED_COMMENTS, *STATEMENT_NODES)

    def _name_sql(self, identifier: exp.Expr) -> str:
        """An identifier in one of our name positions (model name, option key or value).

        Our parser accepts any non-reserved word there (``limit``, ``order``,
        ``version`` ...), so an unquoted name that is a plain word is written
        back bare; sqlglot would quote reserved words, which would make the
        re-parsed identifier ``quoted=True`` and break round-trips.
        """
        if (
            isinstance(identifier, exp.Identifier)
            and not identifier.quoted
            and _PLAIN_WORD.match(identifier.this)
            and ModelSQLTokenizer.KEYWORDS.get(identifier.this.upper(), TokenType.VAR)
            in _NAME_TOKENS
        ):
            return identifier.this
        return self.sql(identifier)

    def _option_value_sql(self, value: exp.Expr) -> str:
        if isinstance(value, exp.Tuple):
            return f"({', '.join(self._option_value_sql(v) for v in value.expressions)})"
        if isinstance(value, exp.Identifier):
            return self._name_sql(value)
        return self.sql(value)

    def _options_sql(self, expression: exp.Expr) -> str:
        options = []
        for option in expression.args.get("options") or []:
            if isinstance(option, exp.EQ):
                text = f"{self._name_sql(option.this)} = {self._option_value_sql(option.expression)}"
                options.append(self.maybe_comment(text, option))
            else:
                options.append(self.sql(option))
        return ", ".join(options)

    def modelref_sql(self, expression: ModelRef) -> str:
        version = self.sql(expression, "version")
        return f"{self._name_sql(expression.this)}{f' VERSION {version}' if version else ''}"

    def importmodel_sql(self, expression: ImportModel) -> str:
        head = "CREATE OR REPLACE MODEL" if expression.args.get("replace") else "IMPORT MODEL"
        exists = " IF NOT EXISTS" if expression.args.get("exists") else ""
        options = self._options_sql(expression)
        options = f" WITH ({options})" if options else ""
        study = expression.args.get("study")
        if study is not None:
            trial = expression.args.get("trial")
            source = f"STUDY {self._name_sql(study)}" + (f" TRIAL {self.sql(trial)}" if trial is not None else "")
        elif expression.args.get("python"):
            source = f"PYTHON {self.sql(expression, 'source')}"
        else:
            source = self.sql(expression, "source")
        return f"{head}{exists} {self.sql(expression, 'this')} FROM {source}{options}"

    def dropmodel_sql(self, expression: DropModel) -> str:
        exists = " IF EXISTS" if expression.args.get("exists") else ""
        return f"DROP MODEL{exists} {self.sql(expression, 'this')}"

    def trustmodel_sql(self, expression: TrustModel) -> str:
        return f"TRUST MODEL {self.sql(expression, 'this')}"

    def showmodels_sql(self, expression: ShowModels) -> str:
        return "SHOW MODELS"

    def describemodel_sql(self, expression: DescribeModel) -> str:
        return f"DESCRIBE MODEL {self.sql(expression, 'this')}"

    def exportmodel_sql(self, expression: ExportModel) -> str:
        return f"EXPORT MODEL {self.sql(expression, 'this')} TO {self.sql(expression, 'target')}"

    def vacuummodels_sql(self, expression: VacuumModels) -> str:
        return "VACUUM MODELS"

    def _relation_input_sql(self, source: exp.Expr) -> str:
        """``TABLE t`` for an ``exp.Table``, ``(query)`` for an ``exp.Subquery`` (see ``_parse_relation_input``)."""
        return f"TABLE {self.sql(source)}" if isinstance(source, exp.Table) else self.sql(source)

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


class ModelSQL(DuckDB):
    """sqlglot dialect ``"modelsql"``: DuckDB plus model statements and ``PREDICT``.

    Use as ``sqlglot.parse(sql, read=ModelSQL)`` / ``node.sql(dialect=ModelSQL)``;
    prefer :func:`modelsql.sql.parse`, which also maps errors to
    ``ProgrammingError``.
    """

    Tokenizer = ModelSQLTokenizer
    Parser = ModelSQLParser
    Generator = ModelSQLGenerator


__all__ = [
    "ModelSQL",
    "ModelSQLTokenizer",
    "ModelSQLParser",
    "ModelSQLGenerator",
    "PREDICT_FORM",
    "DEMOTED_COMMANDS",
    "predict_shaped",
    "statement_at",
]
