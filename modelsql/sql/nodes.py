"""Statement nodes of modelsql's SQL dialect (sqlglot expressions).

Each statement of our own is one :class:`sqlglot.exp.Expression` subclass with
``arg_types`` and ``WORDS`` (the unquoted word sequences that start it), put in
the registry :data:`STATEMENT_NODES` by the :func:`statement` class decorator.
Everything else about a statement is found from that registry by the node's
``key`` (its lower-cased class name): its one parser entry
``ModelSQLParser._parse_<key>`` and its one generator method
``ModelSQLGenerator.<key>_sql`` in :mod:`modelsql.sql.dialect`, and the words
:func:`modelsql.sql.mentions_models` routes on. Nodes compare by value (sqlglot
hashes the whole tree), so ``parse(sql) == parse(node.sql(dialect=ModelSQL))``
is how round-trips are checked.

Argument shapes (``None`` / ``False`` mean "not written")::

    ModelRef(this=exp.Identifier, version=exp.Literal (integer) | None)
    ImportModel(this=ModelRef, source=exp.Literal (string) | exp.Placeholder | None,
                exists=bool, replace=bool, options=list[exp.EQ] | None,
                python=bool, study=exp.Identifier | None, trial=exp.Literal (integer) | None)
    DropModel(this=ModelRef, exists=bool)
    ShowModels()
    DescribeModel(this=ModelRef)
    ExportModel(this=ModelRef, target=exp.Literal (string) | exp.Placeholder)
    VacuumModels()
    PredictTable(this=ModelRef, expression=exp.Table | exp.Subquery,
                 options=list[exp.EQ] | None)
    TuneModel(this=ModelRef, train=exp.Table | exp.Subquery,
              validate=exp.Table | exp.Subquery | None, target=exp.Identifier,
              search=list[exp.EQ], algorithm=exp.Identifier,
              options=list[exp.EQ] | None, resume=bool)
    ShowStudies()
    DescribeStudy(this=exp.Identifier)
    DropStudy(this=exp.Identifier, exists=bool)

Options (``WITH (...)`` of IMPORT / CREATE MODEL, named arguments of PREDICT)
are ``exp.EQ(this=exp.Identifier(key), expression=value)``, in written order,
keys as written (callers compare them case-insensitively). A value is one of
``exp.Literal`` (string or number), ``exp.Neg`` (of a number literal),
``exp.Boolean``, ``exp.Null``, ``exp.Identifier`` (a bare name such as
``backend = onnxruntime``), ``exp.Placeholder`` (``?``, ``$1``), or
``exp.Tuple`` of those (``features = (a, b)``, ``features = ('a',)``; a
parenthesised single value is a one-element Tuple too).

Where ``PredictTable`` sits: it is a table function, so in a FROM or JOIN it is
wrapped the way sqlglot wraps every table function,
``exp.Table(this=PredictTable(...), alias=exp.TableAlias | None)``; e.g. the
FROM of ``SELECT * FROM PREDICT(MODEL m, TABLE t) AS p`` is
``From(this=Table(this=PredictTable(...), alias=TableAlias(this=p)))``.
"""

from __future__ import annotations

import re
import typing as t

from sqlglot import exp
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokens import Token, TokenType

#: The statement nodes of ours, in definition order; :func:`statement` fills it
#: (read it, never edit it). What :func:`modelsql.sql.parse` may return at the
#: top besides sqlglot's trees.
STATEMENT_NODES: list[type[exp.Expression]] = []

_WORD = re.compile(r"^[A-Z][A-Z_]*$")

#: Token types that can be a model name (bare or quoted) right after a statement's words.
NAME_TOKENS = frozenset(DuckDBParser.ID_VAR_TOKENS) | {TokenType.VAR, TokenType.IDENTIFIER}


def statement(cls: type[exp.Expression]) -> type[exp.Expression]:
    """Class decorator: register ``cls`` as a statement of ours in :data:`STATEMENT_NODES`.

    The class declares, as class attributes:

    * ``WORDS``: a tuple of word sequences (tuples of upper-case words) that
      start the statement, e.g. ``(("DROP", "MODEL"),)``. They are matched on
      unquoted tokens (not strings, quoted identifiers or comments), only at
      the start of a statement, the longest sequence of all nodes first; no two
      nodes may share a sequence.
    * ``ONLY_IF`` (optional): ``staticmethod(f)`` with ``f(tokens, i) -> bool``,
      a condition on the tokens after the words (``tokens[i]`` is the first one,
      ``i`` may be past the end). When false the words do not start this
      statement and the text is parsed as DuckDB's.

    Raises:
        TypeError / ValueError: at class creation, for missing or malformed
            ``WORDS`` or a sequence another node already claims.
    """
    words = cls.__dict__.get("WORDS")
    if not isinstance(words, tuple) or not words:
        raise TypeError(f"statement {cls.__name__} must declare WORDS, a non-empty tuple of word tuples")
    claimed = {seq: node for node in STATEMENT_NODES for seq in node.WORDS}  # type: ignore[attr-defined]
    for seq in words:
        if not isinstance(seq, tuple) or not seq or not all(isinstance(w, str) and _WORD.match(w) for w in seq):
            raise TypeError(f"{cls.__name__}.WORDS: {seq!r} is not a tuple of upper-case words")
        if seq in claimed:
            raise ValueError(f"{cls.__name__}.WORDS: {' '.join(seq)} already starts {claimed[seq].__name__}")
    only_if = cls.__dict__.get("ONLY_IF")
    if only_if is not None and not callable(getattr(cls, "ONLY_IF")):
        raise TypeError(f"{cls.__name__}.ONLY_IF must be staticmethod(f) with f(tokens, i) -> bool")
    STATEMENT_NODES.append(cls)
    return cls


def undotted_name_at(tokens: t.Sequence[Token], i: int) -> bool:
    """``tokens[i]`` is a name and ``tokens[i + 1]`` is not a dot (so not ``a.b``)."""
    name = tokens[i] if i < len(tokens) else None
    after = tokens[i + 1] if i + 1 < len(tokens) else None
    return (
        name is not None
        and name.token_type in NAME_TOKENS
        and not (after is not None and after.token_type == TokenType.DOT)
    )


def _option_dict(options: t.Optional[list[exp.Expression]]) -> dict[str, exp.Expression]:
    out: dict[str, exp.Expression] = {}
    for option in options or []:
        out[option.this.name.lower()] = option.expression
    return out


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

    arg_types = {"this": True, "version": False, "pipeline": False}

    @property
    def model_name(self) -> str:
        """The model name as written (unquoted text of the identifier)."""
        return self.this.name

    @property
    def version_number(self) -> t.Optional[int]:
        """The pinned version as ``int``, or ``None`` when not written."""
        version = self.args.get("version")
        return int(version.this) if version is not None else None


@statement
class ImportModel(exp.Expression):
    """``IMPORT MODEL [IF NOT EXISTS] name FROM source [WITH (k = v, ...)]``
    and ``CREATE [OR REPLACE] MODEL [IF NOT EXISTS] name FROM source [WITH (...)]``,
    where ``source`` is one of::

        'file.onnx' | ? | $n                   an ONNX file
        PYTHON 'package.module:function'       a Python function that builds the model
        STUDY s [TRIAL n]                      a tuning study's best trial, or trial n

    ``CREATE MODEL`` without ``OR REPLACE`` is the same statement as
    ``IMPORT MODEL`` and generates as ``IMPORT MODEL``; ``CREATE OR REPLACE``
    (a new version of an existing model) generates as written. ``PYTHON`` and
    ``STUDY`` are words only right after ``FROM`` (a file path is always quoted
    or a placeholder).

    Exactly one of ``source`` and ``study`` is set (the parser enforces it).

    Args:
        this: ``ModelRef`` (a ``VERSION`` is rejected by the parser).
        source: ``exp.Literal`` string: the file path, or with ``python`` the
            ``'package.module:function'`` reference (the parser checks that it
            is dotted names, one ``:``, then a name or dotted names; a
            placeholder is not accepted after PYTHON); ``exp.Placeholder``
            (a file path only); ``None`` for ``FROM STUDY``.
        exists: ``True`` when ``IF NOT EXISTS`` was written.
        replace: ``True`` for ``CREATE OR REPLACE MODEL``.
        options: list of ``exp.EQ`` (see module docstring), or ``None``.
        python: ``True`` for ``FROM PYTHON '...'`` (``source`` is then the reference);
            ``False`` / absent otherwise.
        study: ``exp.Identifier``, the study's name, for ``FROM STUDY s``; else ``None``.
        trial: ``exp.Literal`` integer (digits as written) for ``FROM STUDY s TRIAL n``;
            ``None`` when no ``TRIAL`` was written (the study's best trial) or not ``FROM STUDY``.
    """

    WORDS = (("IMPORT", "MODEL"), ("CREATE", "MODEL"), ("CREATE", "OR", "REPLACE", "MODEL"))
    arg_types = {
        "this": True,
        "source": False,
        "exists": False,
        "replace": False,
        "options": False,
        "python": False,
        "study": False,
        "trial": False,
    }

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


@statement
class DropModel(exp.Expression):
    """``DROP MODEL [IF EXISTS] name [VERSION n]``.

    Args:
        this: ``ModelRef``; with a version, only that version is dropped.
        exists: ``True`` when ``IF EXISTS`` was written.
    """

    WORDS = (("DROP", "MODEL"),)
    arg_types = {"this": True, "exists": False}


@statement
class TrustModel(exp.Expression):
    """``TRUST MODEL name [VERSION n]``: sign the code of a model (its Python program, its trainable factory, its
    compiled libraries; every version, or version ``n``) with the current user's key, so this user's
    connections load it (see :mod:`modelsql.engine.artifacts.trust`).

    Args:
        this: ``ModelRef``; with a version, only that version's code.
    """

    WORDS = (("TRUST", "MODEL"),)
    arg_types = {"this": True}


@statement
class ShowModels(exp.Expression):
    """``SHOW MODELS``: no arguments. ``SHOW MODELSQL MODELS`` is the same statement, never DuckDB's
    ``SHOW models`` (``DESCRIBE models``), for a database with a table called ``models``."""

    WORDS = (("SHOW", "MODELS"), ("SHOW", "MODELSQL", "MODELS"))
    arg_types: t.ClassVar[dict[str, bool]] = {}


@statement
class DescribeModel(exp.Expression):
    """``DESCRIBE MODEL name [VERSION n]``.

    Only when a name that is not the first part of a dotted name follows MODEL
    (``ONLY_IF``): ``DESCRIBE model`` (a table called ``model``),
    ``DESCRIBE model.t`` and ``DESCRIBE t`` still parse as sqlglot's
    ``exp.Describe``.

    Args:
        this: ``ModelRef``.
    """

    WORDS = (("DESCRIBE", "MODEL"),)
    ONLY_IF = staticmethod(undotted_name_at)
    arg_types = {"this": True}


@statement
class ExportModel(exp.Expression):
    """``EXPORT MODEL name [VERSION n] TO 'path.onnx'``.

    Args:
        this: ``ModelRef``.
        target: ``exp.Literal`` string (the file path) or ``exp.Placeholder``.
    """

    WORDS = (("EXPORT", "MODEL"),)
    arg_types = {"this": True, "target": True}


@statement
class VacuumModels(exp.Expression):
    """``VACUUM MODELS``: garbage-collect blobs no catalog entry references.

    No arguments. Any other ``VACUUM ...`` stays DuckDB's (an ``exp.Command``). ``VACUUM MODELSQL MODELS``
    is the same statement, never DuckDB's ``VACUUM models`` of a table called ``models``.
    """

    WORDS = (("VACUUM", "MODELS"), ("VACUUM", "MODELSQL", "MODELS"))
    arg_types: t.ClassVar[dict[str, bool]] = {}


class PipelineStepRef(exp.Expression):
    """One step of ``CREATE PIPELINE p AS (model [VERSION n] [AS step], ...)``.

    Args:
        this: ``ModelRef`` (the model, optionally pinned to a version).
        alias: ``exp.Identifier`` step name, or ``None`` (the model's name).
    """

    arg_types = {"this": True, "alias": False}


@statement
class CreatePipeline(exp.Expression):
    """``CREATE [OR REPLACE] PIPELINE [IF NOT EXISTS] p AS (step, ...) [WITH (k = v, ...)]``.

    Steps run in order; each step input is fed by the latest earlier step output of
    the same name, else (a step with one input) by the previous step's first
    output, else by a pipeline input of that name (PRETZEL's white-box pipeline).

    Args:
        this: ``exp.Identifier``, the pipeline name.
        expressions: list of :class:`PipelineStepRef`.
        exists: ``True`` when ``IF NOT EXISTS`` was written.
        replace: ``True`` for ``CREATE OR REPLACE PIPELINE`` (a new version).
        options: list of ``exp.EQ``, or ``None``.
    """

    WORDS = (("CREATE", "PIPELINE"), ("CREATE", "OR", "REPLACE", "PIPELINE"))
    arg_types = {"this": True, "expressions": True, "exists": False, "replace": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


@statement
class DropPipeline(exp.Expression):
    """``DROP PIPELINE [IF EXISTS] p [VERSION n]``: the step models stay.

    Args:
        this: ``ModelRef`` (``pipeline`` true).
        exists: ``True`` when ``IF EXISTS`` was written.
    """

    WORDS = (("DROP", "PIPELINE"),)
    arg_types = {"this": True, "exists": False}


@statement
class ShowPipelines(exp.Expression):
    """``SHOW PIPELINES`` (or ``SHOW MODELSQL PIPELINES``, as for :class:`ShowModels`): no arguments."""

    WORDS = (("SHOW", "PIPELINES"), ("SHOW", "MODELSQL", "PIPELINES"))
    arg_types: t.ClassVar[dict[str, bool]] = {}


@statement
class DescribePipeline(exp.Expression):
    """``DESCRIBE PIPELINE p [VERSION n]`` (only when an undotted name follows, as for
    :class:`DescribeModel`).

    Args:
        this: ``ModelRef`` (``pipeline`` true).
    """

    WORDS = (("DESCRIBE", "PIPELINE"),)
    ONLY_IF = staticmethod(undotted_name_at)
    arg_types = {"this": True}


@statement
class ExportPipeline(exp.Expression):
    """``EXPORT PIPELINE p [VERSION n] TO 'path.onnx'``: one merged ONNX file.

    Args:
        this: ``ModelRef`` (``pipeline`` true).
        target: ``exp.Literal`` string or ``exp.Placeholder``.
    """

    WORDS = (("EXPORT", "PIPELINE"),)
    arg_types = {"this": True, "target": True}


class ServeItem(exp.Expression):
    """One thing ``SERVE`` serves: ``PIPELINE p [VERSION n] [(opt = v, ...)]`` or ``MODEL m ...``.

    Args:
        this: ``ModelRef`` (``pipeline`` true for a pipeline).
        options: list of ``exp.EQ`` (``reserved_threads``), or ``None``.
    """

    arg_types = {"this": True, "options": False}


@statement
class Serve(exp.Expression):
    """``SERVE [ADD | REMOVE] item [, item ...] [ON [HOST 'h'] PORT n] [WITH (opt = v, ...)]``.

    Starts an Open Inference Protocol server on ``host`` (default 127.0.0.1) and ``port``
    (default 8000) serving the items, or adds items to / removes them from a running one.

    Args:
        expressions: list of :class:`ServeItem`.
        action: ``"start"``, ``"add"`` or ``"remove"``.
        host: ``exp.Literal`` string, or ``None``.
        port: ``exp.Literal`` number or ``exp.Placeholder``, or ``None``.
        options: list of ``exp.EQ`` (``max_batch_size``, ``max_queue_delay_ms``, ...), or ``None``.
    """

    WORDS = (("SERVE",),)
    arg_types = {"expressions": True, "action": False, "host": False, "port": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


@statement
class StopServer(exp.Expression):
    """``STOP SERVER [ON PORT n]`` (the only running server when no port is named).

    Args:
        port: ``exp.Literal`` number or ``exp.Placeholder``, or ``None``.
    """

    WORDS = (("STOP", "SERVER"),)
    arg_types = {"port": False}


@statement
class ShowServers(exp.Expression):
    """``SHOW SERVERS`` (or ``SHOW MODELSQL SERVERS``, as for :class:`ShowModels`): one row per thing each
    running server serves (the resident set)."""

    WORDS = (("SHOW", "SERVERS"), ("SHOW", "MODELSQL", "SERVERS"))
    arg_types: t.ClassVar[dict[str, bool]] = {}


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


class PredictTable(exp.Expression):
    """The table function ``PREDICT(MODEL m [VERSION n], TABLE t | (query) [, name = value ...])``.

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

    arg_types = {"this": True, "expression": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


@statement
class TuneModel(exp.Expression):
    """``TUNE MODEL name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON TABLE v | VALIDATE ON (query)]
    TARGET col SEARCH (hp = space [, ...]) USING algorithm [WITH (opt = v, ...)] [RESUME]``.

    Hyperparameter search (Ray Tune / Optuna vocabulary), e.g.::

        TUNE MODEL cnn ON TABLE train VALIDATE ON TABLE val TARGET label
        SEARCH (lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => (10, 20), gamma => 0.1),
                batch_size = CHOICE(32, 64))
        USING ASHA WITH (max_epochs = 27, trials = 64, seed = 0)

    Args:
        this: ``ModelRef``, the model to tune (``version`` pinned or ``None``).
        train: the training rows, as PREDICT's input: ``exp.Table`` for
            ``ON TABLE t`` / ``ON TABLE s.t`` (no alias), or ``exp.Subquery`` for
            ``ON (SELECT ...)`` (any query DuckDB allows in parentheses).
        validate: ``exp.Table`` / ``exp.Subquery`` likewise for ``VALIDATE ON ...``,
            or ``None`` when not written.
        target: ``exp.Identifier``, the label column (quoted when written ``"Col"``).
        search: non-empty ``list[exp.EQ]``, in written order, each
            ``exp.EQ(this=exp.Identifier (the hyperparameter name, as written),
            expression=<space>)``; written ``hp = space`` (``hp := space`` and
            ``hp => space`` are accepted and generate as ``=``). The parser does not
            check names for duplicates nor spaces for meaning (the planner does).
        algorithm: ``exp.Identifier``, the word after ``USING`` as written
            (GRID, RANDOM, TPE, ASHA, HYPERBAND, PBT, ...; compare case-insensitively).
        options: list of ``exp.EQ`` (see module docstring: ``max_epochs``,
            ``trials``, ``seed`` ...), or ``None``.
        resume: ``True`` when ``RESUME`` was written.

    A ``<space>`` is an ordinary sqlglot expression parsed by sqlglot's expression
    parser, with two differences: every function call in it is ``exp.Anonymous``
    whatever its name (``UNIFORM`` / ``RANDOM`` / ``LOG`` are not made sqlglot's typed
    functions), and every named argument of a call is ``exp.Kwarg``. Shapes a handler meets:

    * a call ``NAME(arg, ...)``: ``exp.Anonymous(this=str (the name as written; compare
      case-insensitively, ``node.name.upper()``), expressions=[arg, ...])``;
      e.g. ``CHOICE(0.1, 0.05)``, ``LOGUNIFORM(1e-4, 1e-1)``, ``UNIFORM(0, 1)``,
      ``INTEGER(16, 128)``, ``STEP_DECAY(...)``, ``PIECEWISE(...)``;
    * a named argument ``name => value`` (also written ``name := value`` or
      ``name = value``): ``exp.Kwarg(this=exp.Var(this=str name), expression=value)``
      among the call's ``expressions`` (positional ones keep their place); it
      generates as ``name => value``;
    * a number: ``exp.Literal`` (``is_string`` false; text as written, e.g. ``'1e-4'``);
      a negative number: ``exp.Neg(this=exp.Literal)``; a string: ``exp.Literal``
      (``is_string`` true); ``TRUE`` / ``FALSE``: ``exp.Boolean``; ``NULL``: ``exp.Null``;
    * a tuple ``(10, 20)``: ``exp.Tuple(expressions=[...])``; but a single
      parenthesised value ``(10)`` is ``exp.Paren(this=...)`` (sqlglot's reading);
    * a bare name ``relu``: ``exp.Column(this=exp.Identifier)``; ``?`` / ``$1``:
      ``exp.Placeholder``; anything else (arithmetic ``0.1 * 2`` ...) as sqlglot parses it.

    E.g. ``milestones => CHOICE((10, 20), (15, 25))`` is
    ``Kwarg(this=Var(this='milestones'), expression=Anonymous(this='CHOICE',
    expressions=[Tuple(...), Tuple(...)]))``.
    """

    WORDS = (("TUNE", "MODEL"),)
    arg_types = {
        "this": True,
        "train": True,
        "validate": False,
        "target": True,
        "search": True,
        "algorithm": True,
        "options": False,
        "resume": False,
    }

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))

    @property
    def search_space(self) -> dict[str, exp.Expression]:
        """SEARCH items keyed by hyperparameter name as written (later duplicates win)."""
        return {item.this.name: item.expression for item in self.args.get("search") or []}


@statement
class ShowStudies(exp.Expression):
    """``SHOW STUDIES`` (or ``SHOW MODELSQL STUDIES``, as for :class:`ShowModels`): no arguments (one row
    per tuning study)."""

    WORDS = (("SHOW", "STUDIES"), ("SHOW", "MODELSQL", "STUDIES"))
    arg_types: t.ClassVar[dict[str, bool]] = {}


@statement
class DescribeStudy(exp.Expression):
    """``DESCRIBE STUDY name``: a study's trials.

    Only when a name that is not the first part of a dotted name follows STUDY
    (``ONLY_IF``, as for :class:`DescribeModel`): ``DESCRIBE study`` (a table
    called ``study``) and ``DESCRIBE study.t`` stay sqlglot's ``exp.Describe``.

    Args:
        this: ``exp.Identifier``, the study's name (quoted when written ``"Name"``).
    """

    WORDS = (("DESCRIBE", "STUDY"),)
    ONLY_IF = staticmethod(undotted_name_at)
    arg_types = {"this": True}


@statement
class DropStudy(exp.Expression):
    """``DROP STUDY [IF EXISTS] name``.

    Args:
        this: ``exp.Identifier``, the study's name.
        exists: ``True`` when ``IF EXISTS`` was written.
    """

    WORDS = (("DROP", "STUDY"),)
    arg_types = {"this": True, "exists": False}


@statement
class ProfileModel(exp.Expression):
    """``PROFILE MODEL | PIPELINE name [VERSION n] [ON TABLE t | ON (query)] [WITH (batch_sizes = (...), ...)]``:
    time the model's (or each pipeline step's) configurations and record the latency traces
    (``modelsql.traces``); with ``ON``, on the rows of that input.

    Args:
        this: ``ModelRef`` (``version`` pinned or ``None``; ``pipeline`` set for PROFILE PIPELINE).
        source: ``exp.Table`` or ``exp.Subquery``, or ``None``.
        options: list of ``exp.EQ`` (see module docstring), or ``None``.
    """

    WORDS = (("PROFILE", "MODEL"), ("PROFILE", "PIPELINE"))
    arg_types = {"this": True, "source": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


@statement
class CompileModel(exp.Expression):
    """``COMPILE MODEL name [VERSION n] FOR 'llvm' | 'cuda' [WITH (tune_trials = n, batch_size = b, ...)]``:
    compile the version with another backend (TVM), check it against ONNX Runtime and cache the artifact
    (``modelsql.compiled``); with ``tune_trials`` a MetaSchedule tuning job, resumable.

    Args:
        this: ``ModelRef`` (``version`` pinned or ``None``).
        target: ``exp.Literal`` (string) or ``exp.Placeholder``: the target kind.
        options: list of ``exp.EQ``, or ``None``.
    """

    WORDS = (("COMPILE", "MODEL"),)
    arg_types = {"this": True, "target": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


@statement
class FinetunePipeline(exp.Expression):
    """``FINETUNE PIPELINE name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON TABLE v | VALIDATE ON (query)]
    TARGET col [WITH (epochs = n, temperature = T, ...)]``: translate the pipeline's steps into one
    differentiable program, train them jointly, and register the better of the fine-tuned and the original
    pipeline (chosen on validation) as a new version.

    Args:
        this: ``ModelRef`` with ``pipeline`` set (``version`` pinned or ``None``).
        train, validate: ``exp.Table`` / ``exp.Subquery`` as for ``TuneModel`` (``validate`` may be ``None``).
        target: ``exp.Identifier``, the label or value column.
        options: list of ``exp.EQ``, or ``None``.
    """

    WORDS = (("FINETUNE", "PIPELINE"),)
    arg_types = {"this": True, "train": True, "validate": False, "target": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


#: Every node of ours (the registered statements and the parts of statements);
#: a tree containing none of these is plain DuckDB SQL.
MODEL_NODES: tuple[type[exp.Expression], ...] = (ModelRef, PipelineStepRef, ServeItem, *STATEMENT_NODES,
                                                  ModelSet, PredictTable)

__all__ = [
    "ModelRef",
    "CompileModel",
    "FinetunePipeline",
    "ImportModel",
    "DropModel",
    "ShowModels",
    "DescribeModel",
    "ExportModel",
    "VacuumModels",
    "PipelineStepRef",
    "CreatePipeline",
    "DropPipeline",
    "ShowPipelines",
    "DescribePipeline",
    "ExportPipeline",
    "ServeItem",
    "Serve",
    "StopServer",
    "ShowServers",
    "ModelSet",
    "PredictTable",
    "TuneModel",
    "ShowStudies",
    "DescribeStudy",
    "DropStudy",
    "MODEL_NODES",
    "STATEMENT_NODES",
    "NAME_TOKENS",
    "statement",
    "undotted_name_at",
]
