"""The registry of modelsql's SQL nodes: what makes a sqlglot expression a statement of ours.

A statement of ours is one :class:`sqlglot.exp.Expression` subclass in the file of its statement family
(:mod:`modelsql.sql.models`, :mod:`~modelsql.sql.pipelines`, :mod:`~modelsql.sql.serve`,
:mod:`~modelsql.sql.tune`, :mod:`~modelsql.sql.profile`, :mod:`~modelsql.sql.finetune`), put in
:data:`STATEMENT_NODES` by the :func:`statement` class decorator. The same file holds its one parser
entry ``_parse_<key>(words)`` and its one generator method ``<key>_sql`` (``key`` is the lower-cased
class name), in the family's parser and generator mixins that :mod:`modelsql.sql.dialect` assembles.
Everything else about a statement is found from this registry: the words that route a text to our
parser (:func:`modelsql.sql.mentions_models`), the engine's handler (``modelsql.engine.handlers``),
the statement reference ``docs/statements.md`` (generated from each node's docstring and ``EXAMPLES``).

The parts of statements that are nodes of ours but not statements (``ModelRef``, ``PredictTable`` ...)
are registered with :func:`part`; :data:`MODEL_NODES` holds both kinds: a tree containing none of them
is plain DuckDB SQL.

Nodes compare by value (sqlglot hashes the whole tree), so ``parse(sql) == parse(node.sql(dialect=ModelSQL))``
is how round trips are checked. Options (``WITH (...)``, PREDICT's named arguments) are
``exp.EQ(this=exp.Identifier(key), expression=value)`` in written order, keys as written; a value is
``exp.Literal``, ``exp.Neg`` (of a number), ``exp.Boolean``, ``exp.Null``, ``exp.Identifier`` (a bare name),
``exp.Placeholder`` (``?``, ``$1``) or ``exp.Tuple`` of those.
"""

from __future__ import annotations

import functools
import re
import typing as t

from sqlglot import exp
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokens import Token, TokenType

__all__ = ["STATEMENT_NODES", "MODEL_NODES", "NAME_TOKENS", "TEXT_TOKENS", "statement", "part", "word_at",
           "undotted_name_at", "option_dict"]

#: The statement nodes of ours, in registration order; :func:`statement` fills it (read it, never edit
#: it). What :func:`modelsql.sql.parse` may return at the top besides sqlglot's trees.
STATEMENT_NODES: list[type[exp.Expression]] = []

#: Every node of ours: the statements and the parts of statements (:func:`part`).
MODEL_NODES: list[type[exp.Expression]] = []

_WORD = re.compile(r"^[A-Z][A-Z_]*$")

#: Token types that can be a model name (bare or quoted) right after a statement's words.
NAME_TOKENS = frozenset(DuckDBParser.ID_VAR_TOKENS) | {TokenType.VAR, TokenType.IDENTIFIER}

#: Tokens whose text is quoted source (strings, quoted identifiers): never keywords.
TEXT_TOKENS: frozenset[TokenType] = frozenset(DuckDBParser.TEXT_MATCH_EXCLUDED_TOKENS)


def statement(cls: type[exp.Expression]) -> type[exp.Expression]:
    """Class decorator: register ``cls`` as a statement of ours in :data:`STATEMENT_NODES`.

    The class declares, as class attributes:

    * ``WORDS``: a tuple of word sequences (tuples of upper-case words) that
      start the statement, e.g. ``(("DROP", "MODEL"),)``. They are matched on
      unquoted tokens (not strings, quoted identifiers or comments), only at
      the start of a statement, the longest sequence of all nodes first; no two
      nodes may share a sequence.
    * ``EXAMPLES``: a non-empty tuple of statement texts, each parsing to this node (the registry tests
      parse and regenerate each; ``docs/statements.md`` shows them).
    * ``ONLY_IF`` (optional): ``staticmethod(f)`` with ``f(tokens, i) -> bool``,
      a condition on the tokens after the words (``tokens[i]`` is the first one,
      ``i`` may be past the end). When false the words do not start this
      statement and the text is parsed as DuckDB's.

    Raises:
        TypeError / ValueError: at class creation, for missing or malformed
            ``WORDS`` or ``EXAMPLES``, or a sequence another node already claims.
    """
    _check_words(cls)
    examples = cls.__dict__.get("EXAMPLES")
    if not isinstance(examples, tuple) or not examples or not all(isinstance(e, str) for e in examples):
        raise TypeError(f"statement {cls.__name__} must declare EXAMPLES, a non-empty tuple of statement texts")
    only_if = cls.__dict__.get("ONLY_IF")
    if only_if is not None and not callable(getattr(cls, "ONLY_IF")):
        raise TypeError(f"{cls.__name__}.ONLY_IF must be staticmethod(f) with f(tokens, i) -> bool")
    STATEMENT_NODES.append(cls)
    MODEL_NODES.append(cls)
    return cls


def _check_words(cls: type[exp.Expression]) -> None:
    words = cls.__dict__.get("WORDS")
    if not isinstance(words, tuple) or not words:
        raise TypeError(f"statement {cls.__name__} must declare WORDS, a non-empty tuple of word tuples")
    claimed = {seq: node for node in STATEMENT_NODES for seq in getattr(node, "WORDS")}
    for seq in words:
        if not isinstance(seq, tuple) or not seq or not all(isinstance(w, str) and _WORD.match(w) for w in seq):
            raise TypeError(f"{cls.__name__}.WORDS: {seq!r} is not a tuple of upper-case words")
        if seq in claimed:
            raise ValueError(f"{cls.__name__}.WORDS: {' '.join(seq)} already starts {claimed[seq].__name__}")


def part(cls: type[exp.Expression]) -> type[exp.Expression]:
    """Class decorator: register ``cls``, a node of ours that is part of a statement (not one), in
    :data:`MODEL_NODES`; its generator method ``<key>_sql`` sits in its family's generator mixin."""
    MODEL_NODES.append(cls)
    return cls


def word_at(token: Token | None, word: str) -> bool:
    """``token`` is the unquoted word ``word`` (upper case; not a string or a quoted identifier)."""
    return token is not None and token.token_type not in TEXT_TOKENS and token.text.upper() == word


def statement_starts(first_words: t.Optional[tuple[str, ...]] = None
                     ) -> tuple[tuple[tuple[str, ...], type[exp.Expression]], ...]:
    """Every registered ``(words, node)`` (only those whose first word is one of ``first_words``, when given),
    longest word sequence first (ties in registry order); computed once per registry size (every text that
    :func:`~modelsql.sql.mentions_models` reads asks for them)."""
    return _statement_starts(first_words, len(STATEMENT_NODES))


@functools.lru_cache(maxsize=16)
def _statement_starts(first_words: t.Optional[tuple[str, ...]], registered: int
                      ) -> tuple[tuple[tuple[str, ...], type[exp.Expression]], ...]:
    pairs = [(words, node) for node in STATEMENT_NODES for words in node.WORDS  # type: ignore[attr-defined]
             if first_words is None or words[0] in first_words]
    return tuple(sorted(pairs, key=lambda pair: -len(pair[0])))


def statement_words_at(tokens: t.Sequence[Token], i: int, first_words: t.Optional[tuple[str, ...]] = None
                       ) -> t.Optional[tuple[type[exp.Expression], tuple[str, ...]]]:
    """``(node class, words matched)`` of the statement of ours whose words open ``tokens[i:]``
    (:func:`statement_starts`, longest first, unquoted tokens only, the node's ``ONLY_IF`` holding on the tokens
    after the words); None when none does."""
    for words, node in statement_starts(first_words):
        if not words_at(tokens, i, words):
            continue
        only_if = getattr(node, "ONLY_IF", None)
        if only_if is None or only_if(tokens, i + len(words)):
            return node, words
    return None


def words_at(tokens: t.Sequence[Token], i: int, words: t.Sequence[str]) -> bool:
    """``tokens[i:]`` open with the unquoted ``words`` (:func:`word_at` each)."""
    return i + len(words) <= len(tokens) and all(word_at(tokens[i + k], w) for k, w in enumerate(words))


def undotted_name_at(tokens: t.Sequence[Token], i: int) -> bool:
    """``tokens[i]`` is a name and ``tokens[i + 1]`` is not a dot (so not ``a.b``)."""
    name = tokens[i] if i < len(tokens) else None
    after = tokens[i + 1] if i + 1 < len(tokens) else None
    return (
        name is not None
        and name.token_type in NAME_TOKENS
        and not (after is not None and after.token_type == TokenType.DOT)
    )


def option_dict(options: t.Optional[list[exp.Expression]]) -> dict[str, exp.Expression]:
    """Options (``exp.EQ`` list) keyed by lower-cased name (later duplicates win)."""
    out: dict[str, exp.Expression] = {}
    for option in options or []:
        out[option.this.name.lower()] = option.expression
    return out
