"""modelsql's SQL surface: a sqlglot dialect (DuckDB's plus our statements) and text helpers.

Only this package imports sqlglot's parser internals (see docs/architecture.md).

Public API:

* :class:`ModelSQL` — the sqlglot dialect (``Tokenizer`` / ``Parser`` /
  ``Generator`` subclasses of DuckDB's), assembled from one file per statement family
  (nodes, parser entries and generator methods together; the registry in :mod:`modelsql.sql.registry`).
* :func:`parse` — text -> statement trees; syntax errors -> ``ProgrammingError``.
* :func:`mentions_models` — a tokenizer-only check: does the text need our parser?
* :func:`number_placeholders` — ``?`` -> ``$1``, ``$2``, ... leaving all else byte-identical.
* :func:`renumber_placeholders` — ``$k`` -> ``$m`` by a mapping, leaving all else byte-identical.
* :func:`statement_texts` — a text's statements as written (split on top-level ``;``).
* :func:`table_words` — statements of ours that DuckDB reads as statements on a table (``SHOW models``).
* :func:`to_duckdb_sql` — generate DuckDB SQL from a tree free of our nodes.

Where ``PREDICT`` sits in a tree: ``FROM PREDICT(MODEL m, TABLE t) AS p`` is
``From(this=Table(this=PredictTable(...), alias=TableAlias(this=p)))``; in a
JOIN it is ``Join(this=Table(this=PredictTable(...), alias=...))``. Find them
with ``tree.find_all(PredictTable)``; the enclosing ``exp.Table`` is
``node.parent``.
"""

from __future__ import annotations

import logging
import re
import typing as t
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError, TokenError
from sqlglot.tokens import Token, TokenType

from modelsql.errors import InternalError, ProgrammingError, excerpt, offset_of, position_of, text_lines
from modelsql.sql.dialect import (ModelSQL, ModelSQLGenerator, ModelSQLParser, ModelSQLTokenizer, dotted_statement_at,
                                  statement_at)
from modelsql.sql.evaluate import EVALUATION_FUNCTIONS, EvaluationTable, evaluation_shaped, ml_function_at
from modelsql.sql.grammar import ModelRef
from modelsql.sql.models import DescribeModel, DropModel, ExportModel, ImportModel, ShowModels, VacuumModels
from modelsql.sql.predict import ModelSet, PredictTable, ml_predict_at, predict_shaped
from modelsql.sql.registry import MODEL_NODES, NAME_TOKENS, STATEMENT_NODES, TEXT_TOKENS
from modelsql.sql.statement_tables import StatementTable, row_statement_at

# sqlglot logs a warning whenever it keeps a statement as an opaque Command
# (EXPLAIN, PRAGMA ...); modelsql handles those itself, so the warning is noise.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

_DIALECT = ModelSQL()
DIALECT = _DIALECT
"""The dialect instance to generate modelsql SQL with (``node.sql(dialect=DIALECT)``)."""


# ---------------------------------------------------------------- tokenizing


def _tokenize(sql: str) -> list[Token]:
    """Tokenize with ModelSQL's tokenizer; raises ``ProgrammingError`` (parse_error)."""
    tokenizer = ModelSQLTokenizer(dialect=_DIALECT)
    try:
        return tokenizer.tokenize(sql)
    except TokenError as error:
        core = getattr(tokenizer, "_core", None)
        offset = getattr(core, "_start", None)
        if not isinstance(offset, int):
            offset = error.start or 0
        cause = error.__cause__
        if isinstance(cause, TokenError) and str(cause).startswith("Missing "):
            what = f"unterminated quoted text ({str(cause).split(' from ')[0].lower()})"
        elif isinstance(cause, IndexError):
            what = "unterminated comment or quoted text"
        else:
            what = str(cause or error)
        raise _syntax_error(sql, what, offset, 1) from error


def _command_payload_offset(sql: str, tokens: list[Token], i: int) -> int | None:
    """Offset in ``sql`` of the raw text sqlglot packed into ``tokens[i]``, or None.

    sqlglot's tokenizer turns what follows a leading command word (``EXPLAIN``,
    ``PREPARE``, ``CALL`` ...) into one STRING token holding the raw, stripped
    text; its start/end positions are not reliable, so the text is located
    right after the command token. A real string literal never matches, since
    its token text lacks the quotes.
    """
    tok = tokens[i]
    if tok.token_type != TokenType.STRING or i == 0:
        return None
    prev = tokens[i - 1]
    if prev.token_type != TokenType.COMMAND or not tok.text:
        return None
    rest = sql[prev.end + 1 :]
    stripped = rest.lstrip()
    if not stripped.startswith(tok.text):
        return None
    return prev.end + 1 + (len(rest) - len(stripped))


# --------------------------------------------------------------------- parse


def _syntax_error(sql: str, description: str, offset: int, length: int) -> ProgrammingError:
    line, column = position_of(sql, offset)
    lines = text_lines(sql)
    text = lines[min(line, len(lines)) - 1]
    length = max(1, min(length, len(text) - column + 1))
    message = f"Parser Error: {description}\n{excerpt(sql, line, column, length)}"
    return ProgrammingError(message, code="parse_error", line=line, column=column)


_TOKEN_REPR = re.compile(r"<Token token_type: [^,]+, text: (.*?), line: \d+, col: \d+, start: \d+, end: \d+, comments: \[.*?\]>")
_CLASS_REPR = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")


def _clean_description(text: str) -> str:
    """Turn sqlglot's token / class reprs in an error description into plain words."""
    text = _TOKEN_REPR.sub(
        lambda m: "end of input" if "TokenType.SENTINEL" in m.group(0) else f'"{m.group(1)}"', text
    )
    return _CLASS_REPR.sub(lambda m: m.group(1), text)


_OURS_AFTER_WITH = frozenset({"EVALUATE", "TUNE", "FINETUNE", "PROFILE", "SERVE"})
"""Statement words of ours that a WITH clause might be written before (DuckDB's statements take one there)."""


def _statement_after_with(tokens: list[Token]) -> t.Optional[Token]:
    """The first of :data:`_OURS_AFTER_WITH` outside parentheses in a text that starts with WITH, or None."""
    if not tokens or tokens[0].token_type != TokenType.WITH:
        return None
    depth = 0
    for token in tokens:
        depth += (token.token_type == TokenType.L_PAREN) - (token.token_type == TokenType.R_PAREN)
        if token.token_type == TokenType.SEMICOLON:
            return None
        if depth == 0 and token.token_type not in TEXT_TOKENS and token.text.upper() in _OURS_AFTER_WITH:
            return token
    return None


_NAMED_WORDS = frozenset({"MODEL", "PIPELINE", "STUDY"})


def _dotted_model_name(tokens: list[Token]) -> t.Optional[Token]:
    """The dot of a model, pipeline or study name written ``ds.m`` after MODEL, PIPELINE or STUDY (a schema's or a
    BigQuery ML dataset's name before it) at a statement's start (:func:`dotted_statement_at`); None when there is
    none (:func:`_dotted_anywhere` looks everywhere once the text failed to parse: ``PREDICT(MODEL ds.m, ...)``)."""
    starts = [i for i in range(len(tokens)) if i == 0 or tokens[i - 1].token_type == TokenType.SEMICOLON]
    return next((dot for dot in (dotted_statement_at(tokens, i) for i in starts) if dot is not None), None)


def _dotted_anywhere(tokens: list[Token]) -> t.Optional[Token]:
    for i in range(len(tokens) - 3):
        if (tokens[i].token_type not in TEXT_TOKENS and tokens[i].text.upper() in _NAMED_WORDS
                and (i == 0 or tokens[i - 1].token_type != TokenType.DOT) and tokens[i + 1].token_type in NAME_TOKENS
                and tokens[i + 2].token_type == TokenType.DOT and tokens[i + 3].token_type in NAME_TOKENS):
            return tokens[i + 2]
    return None


def _dotted_error(sql: str, tokens: list[Token], dot: Token) -> ProgrammingError:
    """The error for a dotted name whose first dot is ``dot`` (``ds.m``, ``proj.ds.m``): it names the whole name and
    says to write its last part (quoted when it was)."""
    k = tokens.index(dot)
    first = last = tokens[k - 1]
    while k + 1 < len(tokens) and tokens[k].token_type == TokenType.DOT and tokens[k + 1].token_type in NAME_TOKENS:
        last, k = tokens[k + 1], k + 2
    written = sql[first.start:last.end + 1]
    name = f'"{last.text}"' if last.token_type == TokenType.IDENTIFIER else last.text
    return _syntax_error(sql, f"a model, pipeline or study name is one word: {written} names it in a schema or (BigQuery ML) a "
                              f"dataset, and modelsql keeps models in this database's own catalog; write {name}",
                         first.start, last.end - first.start + 1)


def parse(sql: str) -> list[exp.Expression]:
    """Parse one or more ``;``-separated statements with :class:`ModelSQL`.

    Args:
        sql: statement text.

    Returns:
        One tree per non-empty statement, in order: our nodes
        (:data:`modelsql.sql.registry.STATEMENT_NODES`) for our statements,
        sqlglot's DuckDB trees for everything else (``PredictTable`` inside them
        as ``exp.Table(this=PredictTable)``). Empty text gives ``[]``.

    Raises:
        ProgrammingError: ``code="parse_error"`` on a syntax or tokenizing error,
            with 1-based ``.line`` / ``.column`` of the first offending token and
            a message ``"Parser Error: <what>\\nLINE n: <line>\\n<caret>"``.
    """
    tokens = _tokenize(sql)
    dotted = _dotted_model_name(tokens)
    if dotted is not None:
        raise _dotted_error(sql, tokens, dotted)
    parser = ModelSQLParser(
        error_level=ErrorLevel.IMMEDIATE,
        # The whole text before the offending token comes back as start_context,
        # so its length is the token's offset (sqlglot entries carry no offset).
        error_message_context=len(sql) + 1,
        dialect=_DIALECT,
    )
    try:
        trees = parser.parse(tokens, sql)
    except ParseError as error:
        dotted = _dotted_anywhere(tokens)
        if dotted is not None:
            raise _dotted_error(sql, tokens, dotted) from error
        ours = _statement_after_with(tokens)
        if ours is not None:
            raise _syntax_error(sql, f"{ours.text.upper()} does not follow a WITH clause: write the WITH in its input, "
                                     "ON (WITH v AS (...) SELECT * FROM v)", ours.start, len(ours.text)) from error
        entry = error.errors[0] if error.errors else {}
        description = _clean_description(entry.get("description") or str(error))
        start_context = entry.get("start_context") or ""
        highlight = entry.get("highlight") or ""
        if highlight.strip():
            description = f'{description} at or near "{highlight.strip()}"'
        raise _syntax_error(
            sql, description, len(start_context), len(highlight.split("\n")[0])
        ) from error
    except SqlglotError as error:  # pragma: no cover - defensive
        raise ProgrammingError(f"Parser Error: {error}", code="parse_error") from error
    # every statement sqlglot returns is an exp.Expression (exp.Expr is the abstract base it declares)
    return [t.cast(exp.Expression, tree) for tree in trees if tree is not None]


# ----------------------------------------------------------- mentions_models


def _words(tokens: list[Token]) -> list[str | None]:
    return [None if tok.token_type in TEXT_TOKENS else tok.text.upper() for tok in tokens]


_EXPLAIN_ANALYZE = re.compile(r"^\s*ANALYZE\b", re.I)
"""``EXPLAIN ANALYZE <statement>``: the word before the statement in an EXPLAIN body."""


def _mentions(sql: str, tokens: list[Token]) -> bool:
    words = _words(tokens)
    for i, tok in enumerate(tokens):
        word = words[i]
        if word is None:
            offset = _command_payload_offset(sql, tokens, i)
            if offset is not None:
                inner = _EXPLAIN_ANALYZE.sub("", sql[offset : offset + len(tok.text)], count=1)
                try:
                    if _mentions(inner, ModelSQLTokenizer(dialect=_DIALECT).tokenize(inner)):
                        return True
                except TokenError:
                    pass
            continue
        if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
            continue  # modelsql.models, s.predict(...)
        if word == "PREDICT" and predict_shaped(tokens, i):
            return True
        if word in EVALUATION_FUNCTIONS and evaluation_shaped(tokens, i):
            return True
        if word == "ML" and (ml_predict_at(tokens, i) or ml_function_at(tokens, i) is not None):
            return True  # BigQuery ML's spelling: our parser says what to write
        if i > 0 and tokens[i - 1].token_type == TokenType.L_PAREN and (
                row_statement_at(tokens, i) is not None or dotted_statement_at(tokens, i) is not None):
            return True  # (SHOW MODELS) read as a relation; (DESCRIBE MODEL ds.m) refused saying why
        if i > 0 and tokens[i - 1].token_type != TokenType.SEMICOLON:
            continue  # our statements only start statements
        if statement_at(tokens, i) is not None or dotted_statement_at(tokens, i) is not None:  # the parser's own
            return True  # dispatch (a dotted model name is refused by the parser, saying why)
    return False


def mentions_models(sql: str) -> bool:
    """True when ``sql`` uses any of our syntax, so it must go through :func:`parse`.

    Tokenizer only (no parse), so it is cheap. True when the words of a
    registered statement (each node's ``WORDS`` in
    :data:`~modelsql.sql.registry.STATEMENT_NODES`: ``IMPORT MODEL``,
    ``CREATE [OR REPLACE] MODEL``, ``DROP MODEL``, ``SHOW MODELS``,
    ``DESCRIBE MODEL <name>``, ``EXPORT MODEL``, ``VACUUM MODELS``) start a
    statement as unquoted words, matched by the parser's own dispatch
    (:func:`~modelsql.sql.dialect.statement_at`), and for a PREDICT-shaped call anywhere
    (:func:`~modelsql.sql.dialect.predict_shaped`: ``PREDICT(MODEL name ...`` or
    ``PREDICT(TABLE ...``, not right after a dot) and BigQuery ML's ``ML.PREDICT(MODEL ...`` (the parser
    says to write ``PREDICT``); also inside ``EXPLAIN`` /
    ``PREPARE`` bodies. False for everything else: words inside string literals
    or comments, quoted identifiers (``"model"``), ``modelsql.models``, a column
    or table named ``model`` / ``predict``, any other ``predict(...)`` call (a
    user's macro), ``DESCRIBE model`` (a table), and text that does not tokenize
    (DuckDB then reports the error itself). Never raises.
    """
    try:
        tokens = ModelSQLTokenizer(dialect=_DIALECT).tokenize(sql)
    except Exception:
        return False
    try:
        return _mentions(sql, tokens)
    except Exception:  # pragma: no cover - defensive: never block plain SQL
        return False


# ------------------------------------------------------------ table_words

#: DuckDB statements that take one bare table name: ``SHOW t`` (DuckDB's ``DESCRIBE t``) and ``VACUUM t``. A
#: two-word statement of ours starting with one (``SHOW MODELS``, ``VACUUM MODELS``) is also DuckDB's text.
DUCKDB_TABLE_STATEMENTS = frozenset({"SHOW", "VACUUM"})


@dataclass(frozen=True)
class TableWord:
    """A statement of ours that DuckDB reads as a statement on a table: ``SHOW models``, ``VACUUM models``.

    Attributes:
        words: the statement's words, upper case (``("SHOW", "MODELS")``).
        name: the second word as written: the table DuckDB would read (``"models"``).
        offset: where the statement starts in the text (0-based).
        length: its length in the text, to the end of the name.
        prefix: what the statement stands after, as written (``"EXPLAIN "``), or ``""``.
    """

    words: tuple[str, ...]
    name: str
    offset: int
    length: int
    prefix: str = ""


def _table_words(sql: str, tokens: list[Token], base: int, prefix: str, out: list[TableWord]) -> None:
    for i, tok in enumerate(tokens):
        offset = _command_payload_offset(sql, tokens, i)
        if offset is not None:
            inner = sql[offset : offset + len(tok.text)]
            skip = _EXPLAIN_ANALYZE.match(inner)
            start = skip.end() if skip else 0
            while start < len(inner) and inner[start].isspace():
                start += 1
            lead = sql[tokens[i - 1].start : offset] + inner[:start]
            _table_words(inner[start:], _tokenize(inner[start:]), base + offset + start, prefix + lead, out)
            continue
        in_parens = i > 0 and tokens[i - 1].token_type == TokenType.L_PAREN  # (SHOW models), read as a relation
        if i > 0 and tokens[i - 1].token_type != TokenType.SEMICOLON and not in_parens:
            continue
        found = row_statement_at(tokens, i) if in_parens else statement_at(tokens, i)
        if found is None or len(found[1]) != 2 or found[1][0] not in DUCKDB_TABLE_STATEMENTS:
            continue
        end = TokenType.R_PAREN if in_parens else TokenType.SEMICOLON
        if (i + 2 < len(tokens) or in_parens) and (i + 2 >= len(tokens) or tokens[i + 2].token_type != end):
            continue  # more follows: not DuckDB's one-table form
        name = tokens[i + 1]
        out.append(TableWord(found[1], name.text, base + tok.start, name.end + 1 - tok.start, prefix))


def table_words(sql: str) -> list[TableWord]:
    """The statements of ours in ``sql`` (also inside an ``EXPLAIN [ANALYZE]`` body) whose text DuckDB reads
    as a statement on a table named by their second word: ``SHOW models`` is DuckDB's ``DESCRIBE models``,
    ``VACUUM models`` vacuums table ``models``. ``SHOW MODELSQL MODELS`` and ``SHOW "models"`` are not (one
    is only ours, the other only DuckDB's). Tokenizer only; ``[]`` for text that does not tokenize."""
    out: list[TableWord] = []
    try:
        _table_words(sql, ModelSQLTokenizer(dialect=_DIALECT).tokenize(sql), 0, "", out)
    except (TokenError, ProgrammingError):
        return []
    return out


# ------------------------------------------------------- number_placeholders


def _qmark_offsets(sql: str, tokens: list[Token], base: int, out: list[int], numbered: list[int]) -> None:
    """The offsets of the ``?`` placeholders of ``sql`` (``tokens``, the text at ``base`` in the whole) into ``out``,
    and of the ``?`` of DuckDB's numbered ``?NNN`` into ``numbered``."""
    n = len(tokens)
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.PLACEHOLDER and tok.text == "?":
            nxt = tokens[i + 1] if i + 1 < n else None
            if nxt is not None and nxt.token_type == TokenType.NUMBER and nxt.start == tok.end + 1:
                numbered.append(base + tok.start)  # ?NNN is already numbered
                continue
            out.append(base + tok.start)
            continue
        if tok.token_type == TokenType.QDCOLON and tok.text.startswith("?"):
            out.append(base + tok.start)  # "?::type" is one token: a placeholder, then a cast
            continue
        offset = _command_payload_offset(sql, tokens, i)
        if offset is not None:
            inner = sql[offset : offset + len(tok.text)]
            _qmark_offsets(inner, _tokenize(inner), base + offset, out, numbered)


def _dollar_numbered(tokens: list[Token]) -> bool:
    """Whether ``tokens`` hold a numbered ``$k`` placeholder."""
    return any(tok.token_type == TokenType.PARAMETER and nxt.token_type == TokenType.NUMBER and nxt.start == tok.end + 1
               for tok, nxt in zip(tokens, tokens[1:]))


def number_placeholders(sql: str) -> tuple[str, int]:
    """Rewrite each qmark placeholder ``?`` to ``$1``, ``$2``, ... in textual order.

    Only ``?`` tokens change (not ``?`` inside strings, quoted identifiers or
    comments; DuckDB's numbered ``?NNN`` is written ``$NNN``); every other byte is
    kept as is. ``$n`` / ``$name`` placeholders already in the text are left
    alone and not renumbered, so text mixing them with ``?`` comes out with
    colliding numbers: callers should not mix styles.

    Args:
        sql: statement text (one or more statements).

    Returns:
        ``(new_text, count)`` where ``count`` is the number of ``?`` rewritten.

    Raises:
        ProgrammingError: ``code="parse_error"`` if the text does not tokenize
            (e.g. an unterminated string), with line/column.
    """
    numbered, count, _ = numbered_offsets(sql)
    return numbered, count


def numbered_offsets(sql: str) -> tuple[str, int, list[int]]:
    """:func:`number_placeholders`' text of ``sql``, the count of ``?`` and, for each offset of the text (one more:
    its end), the offset in ``sql`` it comes from (a ``$k`` and the space that may follow it, from the ``?``): what
    :func:`original_position` maps an error's position back with.

    Raises:
        ProgrammingError: ``code="parse_error"`` if the text does not tokenize.
    """
    offsets: list[int] = []
    numbered: list[int] = []
    tokens = _tokenize(sql)
    _qmark_offsets(sql, tokens, 0, offsets, numbered)
    if offsets and (numbered or _dollar_numbered(tokens)):
        line, column = position_of(sql, offsets[0])
        raise ProgrammingError("The text mixes ? placeholders with numbered ones ($1, ?1), which DuckDB numbers one "
                               "after the other (?1, ? reads as ?1, ?2): write every placeholder one way.\n"
                               + excerpt(sql, line, column, 1), code="mixed_placeholders", line=line, column=column)
    for at in numbered:  # DuckDB's ?NNN is $NNN, which the planner reads (the same length: offsets stay)
        sql = f"{sql[:at]}${sql[at + 1:]}"
    parts: list[str] = []
    back: list[int] = []
    last = 0
    for number, offset in enumerate(sorted(offsets), start=1):
        parts += [sql[last:offset], f"${number}"]
        back += [*range(last, offset), *[offset] * len(f"${number}")]
        last = offset + 1
        leading = re.match(r"\S*", sql[last:])  # always matches (maybe empty)
        word = leading.group(0) if leading is not None else ""
        if "$" in word or "?" in word:
            # "$1,$2" would read as a dollar-quoted string: keep placeholders apart.
            parts.append(" ")
            back.append(offset)
    parts.append(sql[last:])
    back += [*range(last, len(sql) + 1)]
    return "".join(parts), len(offsets), back


def original_offset(numbered: str, back: list[int], line: int, column: int) -> int:
    """The 0-based offset in the text as written of the position ``line``, ``column`` (1-based) of ``numbered``, its
    text with the ``?`` numbered (``numbered`` and ``back`` from :func:`numbered_offsets`)."""
    return back[min(offset_of(numbered, line, column), len(back) - 1)]


def original_position(sql: str, numbered: str, back: list[int], line: int, column: int) -> tuple[int, int]:
    """``(line, column)`` (1-based) in ``sql`` of the position ``line``, ``column`` of ``numbered`` (see
    :func:`original_offset`)."""
    return position_of(sql, original_offset(numbered, back, line, column))


def parse_numbered(sql: str, numbered: str, back: list[int]) -> list[exp.Expression]:
    """:func:`parse` of ``numbered``, ``sql`` with its ``?`` numbered (``numbered`` and ``back`` from
    :func:`numbered_offsets`). A syntax error points into ``sql`` as written (its position and excerpt mapped back
    from the numbered text, a ``$k`` it names written ``?``).

    Raises:
        ProgrammingError: ``code="parse_error"``, as :func:`parse`.
    """
    try:
        return parse(numbered)
    except ProgrammingError as err:
        if numbered == sql or err.line is None or err.column is None:
            raise
        line, column = original_position(sql, numbered, back, err.line, err.column)
        head = re.sub(r'"\$\d*"', '"?"', str(err).split("\nLINE ")[0])
        width = max(1, str(err).rsplit("\n", 1)[-1].count("^"))
        raise ProgrammingError(f"{head}\n{excerpt(sql, line, column, width)}", code=err.code, line=line,
                               column=column) from None


def renumber_placeholders(sql: str, mapping: dict[int, int]) -> str:
    """``sql`` with each numbered placeholder ``$k`` written ``$mapping[k]`` (others, and every
    other byte, kept as they are; strings and comments are never touched).

    Raises:
        ProgrammingError: ``code="parse_error"`` if the text does not tokenize.
    """
    tokens = _tokenize(sql)
    parts: list[str] = []
    last = 0
    for tok, nxt in zip(tokens, tokens[1:]):
        if (
            tok.token_type == TokenType.PARAMETER
            and nxt.token_type == TokenType.NUMBER
            and nxt.start == tok.end + 1
            and nxt.text.isdigit()
            and int(nxt.text) in mapping
        ):
            parts.append(f"{sql[last:tok.start]}${mapping[int(nxt.text)]}")
            last = nxt.end + 1
    parts.append(sql[last:])
    return "".join(parts)


# -------------------------------------------------------------- statement_texts


def statement_texts(sql: str) -> list[str]:
    """The statements of ``sql`` as written: its slices between top-level ``;`` tokens (a ``;`` in a
    string, a quoted identifier or a comment does not split), empty ones dropped. A text that does not
    tokenize comes back whole (parsing it then reports the error)."""
    try:
        tokens = ModelSQLTokenizer(dialect=_DIALECT).tokenize(sql)
    except Exception:
        return [sql]
    out: list[str] = []
    start, seen = 0, False
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            if seen:
                out.append(sql[start:tok.start].strip())
            start, seen = tok.end + 1, False
        else:
            seen = True
    if seen:
        out.append(sql[start:].strip())
    return out


# -------------------------------------------------------------- stored_definition


def stored_definition(expression: exp.Expression) -> str:
    """``"VIEW"``, ``"MACRO"`` or ``"FUNCTION"`` when ``expression`` is a ``CREATE`` of one (a definition DuckDB
    keeps and runs later, which must not call what lives only as long as one statement); else ``""``."""
    kind = str(expression.args.get("kind") or "").upper() if isinstance(expression, exp.Create) else ""
    return kind if kind in ("VIEW", "MACRO", "FUNCTION") else ""


# -------------------------------------------------------------- to_duckdb_sql


def to_duckdb_sql(expression: exp.Expression, copy: bool = True) -> str:
    """Generate DuckDB SQL (sqlglot's plain DuckDB dialect) for ``expression``.

    Args:
        expression: a tree with none of our nodes left (the planner has replaced
            every ``PredictTable`` etc. by plain tables, e.g. Arrow scans).
        copy: generate from a copy (sqlglot's dialect transforms may change the tree); False for a tree the
            caller made for this call alone, saving a deep copy of a large statement.

    Raises:
        InternalError: ``code="internal_error"`` if a node of ours is still in
            the tree (a planner bug).
    """
    leftover = expression.find(*MODEL_NODES)
    if leftover is not None:
        raise InternalError(
            f"cannot generate DuckDB SQL: the tree still contains {type(leftover).__name__} "
            f"({leftover.sql(dialect=ModelSQL)})",
            code="internal_error",
        )
    return expression.sql(dialect="duckdb", copy=copy)


TABLE_FUNCTIONS = (PredictTable, EvaluationTable, StatementTable)
"""The nodes of modelsql's table functions (PREDICT, EVALUATE / CONFUSION_MATRIX / ROC_CURVE, ``(SHOW ...)``):
what DuckDB alone can neither read nor describe, so a query holding one goes through modelsql's planner."""

__all__ = [
    "TABLE_FUNCTIONS",
    "ModelSQL",
    "ModelSQLTokenizer",
    "ModelSQLParser",
    "ModelSQLGenerator",
    "ModelRef",
    "ModelSet",
    "ImportModel",
    "DropModel",
    "ShowModels",
    "DescribeModel",
    "ExportModel",
    "VacuumModels",
    "PredictTable",
    "EvaluationTable",
    "StatementTable",
    "MODEL_NODES",
    "STATEMENT_NODES",
    "parse",
    "mentions_models",
    "number_placeholders",
    "numbered_offsets",
    "original_offset",
    "original_position",
    "parse_numbered",
    "renumber_placeholders",
    "statement_texts",
    "table_words",
    "TableWord",
    "to_duckdb_sql",
    "stored_definition",
]
