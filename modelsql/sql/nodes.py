"""Statement nodes of modelsql's SQL dialect (sqlglot expressions).

Each statement of our own is one :class:`sqlglot.exp.Expression` subclass with
``arg_types``; :mod:`modelsql.sql.dialect` holds its one parser entry and its
one generator method. Nodes compare by value (sqlglot hashes the whole tree),
so ``parse(sql) == parse(node.sql(dialect=ModelSQL))`` is how round-trips are
checked.

Argument shapes (``None`` / ``False`` mean "not written")::

    ModelRef(this=exp.Identifier, version=exp.Literal (integer) | None)
    ImportModel(this=ModelRef, source=exp.Literal (string) | exp.Placeholder,
                exists=bool, replace=bool, options=list[exp.EQ] | None)
    DropModel(this=ModelRef, exists=bool)
    ShowModels()
    DescribeModel(this=ModelRef)
    ExportModel(this=ModelRef, target=exp.Literal (string) | exp.Placeholder)
    VacuumModels()
    PredictTable(this=ModelRef, expression=exp.Table | exp.Subquery,
                 options=list[exp.EQ] | None)

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

import typing as t

from sqlglot import exp


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

    Args:
        this: ``exp.Identifier``, the model name (quoted when written ``"Name"``).
        version: ``exp.Literal`` integer (>= 0 as written) or ``None`` for
            "the latest version".
    """

    arg_types = {"this": True, "version": False}

    @property
    def model_name(self) -> str:
        """The model name as written (unquoted text of the identifier)."""
        return self.this.name

    @property
    def version_number(self) -> t.Optional[int]:
        """The pinned version as ``int``, or ``None`` when not written."""
        version = self.args.get("version")
        return int(version.this) if version is not None else None


class ImportModel(exp.Expression):
    """``IMPORT MODEL [IF NOT EXISTS] name FROM 'file.onnx' [WITH (k = v, ...)]``
    and ``CREATE [OR REPLACE] MODEL [IF NOT EXISTS] name FROM ... [WITH (...)]``.

    ``CREATE MODEL`` without ``OR REPLACE`` is the same statement as
    ``IMPORT MODEL`` and generates as ``IMPORT MODEL``; ``CREATE OR REPLACE``
    (a new version of an existing model) generates as written.

    Args:
        this: ``ModelRef`` (a ``VERSION`` is rejected by the parser).
        source: ``exp.Literal`` string (the file path) or ``exp.Placeholder``.
        exists: ``True`` when ``IF NOT EXISTS`` was written.
        replace: ``True`` for ``CREATE OR REPLACE MODEL``.
        options: list of ``exp.EQ`` (see module docstring), or ``None``.
    """

    arg_types = {"this": True, "source": True, "exists": False, "replace": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return _option_dict(self.args.get("options"))


class DropModel(exp.Expression):
    """``DROP MODEL [IF EXISTS] name [VERSION n]``.

    Args:
        this: ``ModelRef``; with a version, only that version is dropped.
        exists: ``True`` when ``IF EXISTS`` was written.
    """

    arg_types = {"this": True, "exists": False}


class ShowModels(exp.Expression):
    """``SHOW MODELS``: no arguments."""

    arg_types: t.ClassVar[dict[str, bool]] = {}


class DescribeModel(exp.Expression):
    """``DESCRIBE MODEL name [VERSION n]``.

    ``DESCRIBE model`` (a table called ``model``) and ``DESCRIBE t`` still parse
    as sqlglot's ``exp.Describe``.

    Args:
        this: ``ModelRef``.
    """

    arg_types = {"this": True}


class ExportModel(exp.Expression):
    """``EXPORT MODEL name [VERSION n] TO 'path.onnx'``.

    Args:
        this: ``ModelRef``.
        target: ``exp.Literal`` string (the file path) or ``exp.Placeholder``.
    """

    arg_types = {"this": True, "target": True}


class VacuumModels(exp.Expression):
    """``VACUUM MODELS``: garbage-collect blobs no catalog entry references.

    No arguments. Any other ``VACUUM ...`` stays DuckDB's (an ``exp.Command``).
    """

    arg_types: t.ClassVar[dict[str, bool]] = {}


class PredictTable(exp.Expression):
    """The table function ``PREDICT(MODEL m [VERSION n], TABLE t | (query) [, name = value ...])``.

    Usable wherever DuckDB accepts a table (FROM, JOIN, CTE bodies, subqueries);
    in the tree it is the ``this`` of an ``exp.Table`` that carries the alias.
    Named options may be written ``name = value``, ``name := value`` or
    ``name => value``; all become ``exp.EQ`` and generate as ``name = value``.

    Args:
        this: ``ModelRef``.
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


#: Every node of ours; a tree containing none of these is plain DuckDB SQL.
MODEL_NODES: tuple[type[exp.Expression], ...] = (
    ModelRef,
    ImportModel,
    DropModel,
    ShowModels,
    DescribeModel,
    ExportModel,
    VacuumModels,
    PredictTable,
)

#: The statement-level nodes (what :func:`modelsql.sql.parse` may return at the top).
STATEMENT_NODES: tuple[type[exp.Expression], ...] = (
    ImportModel,
    DropModel,
    ShowModels,
    DescribeModel,
    ExportModel,
    VacuumModels,
)

__all__ = [
    "ModelRef",
    "ImportModel",
    "DropModel",
    "ShowModels",
    "DescribeModel",
    "ExportModel",
    "VacuumModels",
    "PredictTable",
    "MODEL_NODES",
    "STATEMENT_NODES",
]
