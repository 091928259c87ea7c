"""What the statement families of the dialect share: the model reference node and the parser's and
generator's helpers for names, options, file paths and inputs.

Each family file (:mod:`modelsql.sql.models`, :mod:`~modelsql.sql.predict`, ...) subclasses
:class:`GrammarParser` and :class:`GrammarGenerator` with its own entries, and
:mod:`modelsql.sql.dialect` assembles them. The shared forms::

    name [VERSION n]                                            ModelRef
    WITH (opt, ...)          opt   := key (= | := | =>) value
                             value := literal | -number | TRUE | FALSE | NULL | name | ? | $n | ( value [, ...] )
    TABLE t | (query)                                           an input (PREDICT, TUNE's ON, PROFILE's ON)
    ON input [VALIDATE ON input] TARGET column                  training data (TUNE, FINETUNE)
"""

from __future__ import annotations

import re
import typing as t

from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokens import Token, TokenType

from modelsql.sql.registry import part

__all__ = ["ModelRef", "GrammarParser", "GrammarGenerator", "OPTION_SEPARATORS", "BARE_NAME_TOKENS"]

#: Token types the parser accepts as a bare name (model names, option keys / values).
BARE_NAME_TOKENS = frozenset(DuckDBParser.ID_VAR_TOKENS) | {TokenType.VAR}
_PLAIN_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Separators accepted between an option's name and its value.
OPTION_SEPARATORS = (TokenType.EQ, TokenType.COLON_EQ, TokenType.FARROW)


@part
class ModelRef(exp.Expression):
    """A reference to a model, optionally pinned to a version.

    Written ``MODEL name`` / ``MODEL name VERSION 2`` inside ``PREDICT(...)``
    and ``name`` / ``name VERSION 2`` after the statement keywords
    (``DROP MODEL name VERSION 2``).

    Inside ``PREDICT(...)`` it may name a pipeline instead: ``PIPELINE name [VERSION n]``
    (``pipeline`` true).

    Args:
        this: ``exp.Identifier``, the model name (quoted when written ``"Name"``).
        version: ``exp.Literal`` integer (>= 0 as written) or ``None`` for
            "the latest version".
        pipeline: ``True`` when it names a pipeline.
    """

    arg_types = {"this": True, "version": False, "pipeline": False, "alias": False}

    @property
    def alias_name(self) -> t.Optional[str]:
        """The alias written (``MODEL m ALIAS champion``), lower case, or ``None``."""
        alias = self.args.get("alias")
        return str(alias.name).lower() if alias is not None else None

    @property
    def model_name(self) -> str:
        """The model name as written (unquoted text of the identifier)."""
        return str(self.this.name)

    @property
    def version_number(self) -> t.Optional[int]:
        """The pinned version as ``int``, or ``None`` when not written."""
        version = self.args.get("version")
        return int(version.this) if version is not None else None


PIPELINE_NO_ALIAS = "a pipeline has no aliases (ALTER MODEL sets a model's): name its version with VERSION n"
"""Why ``PIPELINE p ALIAS a`` is refused."""


class GrammarParser(DuckDBParser):
    """DuckDB's parser plus the helpers every statement family's entries use.

    Errors are reported through sqlglot's ``raise_error`` (a ``ParseError`` whose ``errors[0]`` carries
    the offending token's position); :func:`modelsql.sql.parse` turns them into ``ProgrammingError``.
    """

    def _fail(self, message: str, token: Token | None = None) -> t.NoReturn:
        """Report a syntax error at ``token`` (the current token by default) and stop: ``raise_error`` raises
        at sqlglot's default ``ErrorLevel.IMMEDIATE`` (the level :func:`modelsql.sql.parse` uses); at a level
        that only collects errors, the error is raised here all the same.

        Raises:
            sqlglot.errors.ParseError: always.
        """
        self.raise_error(message, token or self._curr or self._prev)
        raise ParseError(message)

    def _fail_name(self, expected: str, token: Token | None) -> t.NoReturn:
        """A name was expected at ``token`` (``expected``: "Expected a model name"); a reserved word there (``on``,
        ``select``) is said to be one, with how to write it as a name.

        Raises:
            sqlglot.errors.ParseError: always.
        """
        word = token.text if token is not None and token.token_type != TokenType.STRING else ""
        if word.isidentifier():
            self._fail(f'{expected}: {word} is a reserved word; to use it as a name write it in double quotes '
                       f'("{word}")', token)
        self._fail(expected, token)

    def _match_word(self, word: str, advance: bool = True) -> bool:
        """Match one unquoted word (not a string or quoted identifier)."""
        return self._match_text_seq(word, advance=advance)

    def _source_text(self, first: Token) -> str:
        """The text from token ``first`` to the last token consumed, exactly as written."""
        return self.sql[first.start : self._prev.end + 1]

    def _parse_model_ref(self, allow_version: bool = True,
                         no_version: str = "the statement is about the model, not one version",
                         allow_alias: bool = False, no_alias: t.Optional[str] = None) -> ModelRef:
        """``name [VERSION n]`` (with ``allow_alias`` also ``name ALIAS a``) -> :class:`ModelRef` (positions of
        the name in ``meta``); without ``allow_version`` a VERSION is an error saying why (``no_version``), and
        without ``allow_alias`` an ALIAS (``no_alias``, else where aliases are taken)."""
        token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self._fail_name("Expected a model name", token)

        version = None
        if self._match_word("VERSION"):
            if not allow_version:
                self._fail(f"VERSION cannot be given here: {no_version}", self._prev)
            if not (self._match(TokenType.NUMBER) and self._prev.text.isdigit()):
                self._fail("Expected an integer version number after VERSION")
            version = exp.Literal.number(self._prev.text)
        alias = None
        if self._match_word("ALIAS", advance=False) and (version is not None or not allow_alias):
            self._fail("ALIAS cannot be given here: " + (
                "give VERSION n or ALIAS a, not both" if version is not None and allow_alias else no_alias or
                "an alias names a model's version (instead of VERSION n) where a statement uses one version: "
                "PREDICT(MODEL ...), EVALUATE, DESCRIBE, EXPORT, TRUST, PROFILE, COMPILE, SERVE and pipeline steps"))
        if allow_alias and self._match_word("ALIAS"):
            token = self._curr
            alias = self._parse_id_var(any_token=False)
            if not isinstance(alias, exp.Identifier):
                self._fail_name("Expected an alias name after ALIAS", token)
            if self._match_word("VERSION", advance=False):
                self._fail("VERSION cannot be given here: give VERSION n or ALIAS a, not both")

        ref = self.expression(ModelRef(this=name, version=version, alias=alias))
        if name is not None:
            ref.update_positions(name)
        return ref

    def _parse_path_literal(self, what: str) -> exp.Expr | None:
        """A string literal (or a ``?`` / ``$n`` placeholder) naming a file."""
        if self._match(TokenType.STRING):
            return self.expression(exp.Literal.string(self._prev.text), self._prev)
        placeholder = self._parse_placeholder()
        if placeholder is None:
            self._fail(f"Expected a quoted file path after {what}")
        return placeholder

    def _parse_relation_input(self, where: str) -> exp.Expr | None:
        """``TABLE t`` -> ``exp.Table``, ``(query)`` -> ``exp.Subquery`` (the input of PREDICT,
        TUNE MODEL's ON / VALIDATE ON); ``None``, nothing consumed, when neither starts here.
        ``where`` ends the error for a parenthesised non-query (``"as the input of PREDICT"``)."""
        if self._match(TokenType.TABLE):
            if self._curr is None or self._curr.token_type not in (self.ID_VAR_TOKENS | {TokenType.IDENTIFIER}):
                self._fail("Expected a table name after TABLE")
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
                self._fail(f"Expected a query in parentheses {where}", paren)
            return source
        return None

    def _token_parsed(self, parsers: t.Mapping[TokenType, t.Any], token: Token) -> exp.Expr:
        """``token`` read by sqlglot's own parser table for it (``STRING_PARSERS``, ``NUMERIC_PARSERS`` ...)."""
        parsed: exp.Expr = parsers[token.token_type](self, token)
        return parsed

    def _parse_table_function_rest(self, function: str, form: str) -> tuple[exp.Expr, list[exp.EQ]]:
        """After a table function's model (PREDICT, EVALUATE ...): ``, TABLE t | (query) [, opt ...] )`` ->
        ``(input, options)``; the errors name ``function`` and show its ``form``."""
        if not self._match(TokenType.COMMA):
            self._fail(f"Expected the input after the model in {function}; the form is {form}")
        source = self._parse_relation_input(f"as the input of {function}")
        if source is None:
            self._fail(f"Expected TABLE <name> or (SELECT ...) as the input of {function}; the form is {form}")
        options = []
        while self._match(TokenType.COMMA):
            options.append(self._parse_model_option())
        self._match_r_paren()
        return source, options

    def _parse_option_scalar(self) -> exp.Expr | None:
        if self._match_set(self.STRING_PARSERS):
            return self._token_parsed(self.STRING_PARSERS, self._prev)
        if self._match_set(self.NUMERIC_PARSERS):
            return self._token_parsed(self.NUMERIC_PARSERS, self._prev)
        if self._curr.token_type == TokenType.DASH and self._next.token_type == TokenType.NUMBER:
            self._advance()
            number = self._token_parsed(self.NUMERIC_PARSERS, self._curr)
            self._advance()
            return self.expression(exp.Neg(this=number))
        if self._match_set((TokenType.TRUE, TokenType.FALSE, TokenType.NULL)):
            return self._token_parsed(self.PRIMARY_PARSERS, self._prev)
        placeholder = self._parse_placeholder()
        if placeholder is not None:
            return placeholder
        name = self._parse_id_var(any_token=False)
        if isinstance(name, exp.Identifier):
            return name
        self._fail("Expected an option value (a literal, a name or a parenthesised list)")
        return None

    def _parse_option_value(self) -> exp.Expr | None:
        if self._match(TokenType.L_PAREN):
            items = self._parse_option_items(TokenType.R_PAREN)
            self._match_r_paren()
            return self.expression(exp.Tuple(expressions=items))
        if self._match(TokenType.L_BRACKET):  # BigQuery ML's arrays (input_label_cols = ['y']): a list too
            items = self._parse_option_items(TokenType.R_BRACKET)
            if not self._match(TokenType.R_BRACKET):
                self._fail("Expected ] to close the option's list")
            return self.expression(exp.Tuple(expressions=items))
        return self._parse_option_scalar()

    def _parse_option_items(self, close: TokenType) -> list[exp.Expr]:
        """The values of an option's list, up to (not past) its ``close`` token; a comma may end it, as in
        Python's one-item tuple ``(16,)`` (``hidden_layer_sizes = (16,)``)."""
        items: list[exp.Expr] = []
        while self._curr is not None and self._curr.token_type != close:
            item = self._parse_option_value()
            if item is not None:
                items.append(item)
            if not self._match(TokenType.COMMA):
                break
        return items

    def _parse_model_option(self) -> exp.EQ:
        """``key = value`` (also ``:=`` / ``=>``) -> ``exp.EQ(this=Identifier, expression=value)``."""
        token = self._curr
        key = self._parse_id_var(any_token=False)
        if not isinstance(key, exp.Identifier):
            self._fail("Expected an option name", token)
        if not self._match_set(OPTION_SEPARATORS):
            self._fail("Expected = after the option name")
        return self.expression(exp.EQ(this=key, expression=self._parse_option_value()))

    def _parse_with_options(self) -> list[exp.EQ] | None:
        """``WITH (opt, ...)`` (also ``OPTIONS (opt, ...)``, BigQuery ML's spelling) -> list of ``exp.EQ``, or
        ``None`` when neither."""
        bigquery = (self._curr is not None and self._next is not None and self._next.token_type == TokenType.L_PAREN
                    and self._match_word("OPTIONS"))
        if not bigquery and not self._match(TokenType.WITH):
            return None
        self._match_l_paren()
        options = self._parse_csv(self._parse_model_option)
        self._match_r_paren()
        return options or None

    def _parse_input_after(self, where: str) -> exp.Expr:
        source = self._parse_relation_input(f"after {where}")
        if source is None:
            self._fail(f"Expected TABLE <name> or (SELECT ...) after {where}")
        return source

    def _parse_training_data(self, form: str) -> tuple[exp.Expr, exp.Expr | None, exp.Identifier]:
        """``ON ... [VALIDATE ON ...] TARGET col`` (TUNE and FINETUNE): (train, validate or None, target)."""
        if not self._match(TokenType.ON):
            self._fail(
                "Expected ON TABLE <name> or ON (SELECT ...) after the model name: the rows to train on; "
                f"the form is {form}"
            )
        train = self._parse_input_after("ON")
        validate = None
        if self._match_word("VALIDATE"):
            if not self._match(TokenType.ON):
                self._fail("Expected ON TABLE <name> or ON (SELECT ...) after VALIDATE")
            validate = self._parse_input_after("VALIDATE ON")
        if not self._match_word("TARGET"):
            self._fail(
                f"Expected TARGET <column> after the training data: the column to predict; the form is {form}"
            )
        token = self._curr
        target = self._parse_id_var(any_token=False)
        if not isinstance(target, exp.Identifier):
            self._fail("Expected a column name after TARGET", token)
        return train, validate, target


class GrammarGenerator(DuckDBGenerator):
    """DuckDB's generator plus the helpers every statement family's methods use."""

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
            and self.dialect.tokenizer_class.KEYWORDS.get(identifier.this.upper(), TokenType.VAR)
            in BARE_NAME_TOKENS
        ):
            return str(identifier.this)
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

    def _relation_input_sql(self, source: exp.Expr) -> str:
        """``TABLE t`` for an ``exp.Table``, ``(query)`` for an ``exp.Subquery`` (see ``_parse_relation_input``)."""
        return f"TABLE {self.sql(source)}" if isinstance(source, exp.Table) else self.sql(source)

    def modelref_sql(self, expression: ModelRef) -> str:
        version = self.sql(expression, "version")
        alias = expression.args.get("alias")
        return (f"{self._name_sql(expression.this)}{f' VERSION {version}' if version else ''}"
                + (f" ALIAS {self._name_sql(alias)}" if alias is not None else ""))

    def _training_data_sql(self, words: str, expression: exp.Expr) -> list[str]:
        """``<words> name ON ... [VALIDATE ON ...] TARGET col`` (TUNE's and FINETUNE's head), as parts."""
        parts = [f"{words} {self.sql(expression, 'this')}", f"ON {self._relation_input_sql(expression.args['train'])}"]
        validate = expression.args.get("validate")
        if validate is not None:
            parts.append(f"VALIDATE ON {self._relation_input_sql(validate)}")
        parts.append(f"TARGET {self._name_sql(expression.args['target'])}")
        return parts
