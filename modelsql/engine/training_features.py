"""Which columns a statement that trains feeds its model: PREDICT's binding rules, applied to training data.

TUNE, FINETUNE and ``CREATE MODEL ... FROM PYTHON WITH (example = t)`` decide their feature columns here,
so that a model is trained on exactly the columns PREDICT would feed it (:mod:`modelsql.engine.query.bind_predict`):

* ``features = (a, b, ...)`` names them, in order (any column, keys too: naming one is a choice);
* otherwise they are every column but the target, leaving out key-like ones: columns named ``id``,
  ``*_id``, ``key``, ``*_key``, ``uuid``, ``index`` ... (:func:`~modelsql.engine.query.bind_predict.looks_like_key`) and,
  for ``ON TABLE t``, the table's PRIMARY KEY and UNIQUE columns. A key identifies a row; fed to a model it
  is noise the model can fit (row order, class blocks), and PREDICT never feeds one.

The columns chosen are recorded: a study keeps them (``DESCRIBE STUDY``'s ``features``), and the model made
from it (``CREATE MODEL ... FROM STUDY``, FINETUNE's result) has them as its features, so PREDICT binds
those columns by name.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, Optional, Sequence

from sqlglot import exp

from modelsql.errors import ProgrammingError, did_you_mean
from modelsql.engine.query.bind_predict import looks_like_key
from modelsql.engine.query.bind_statement import key_columns_of, renumber
from modelsql.engine.options.schema import option_error

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["check_column_names", "check_query_columns", "feature_option", "input_keys", "training_features"]


def feature_option(names: Optional[tuple[str, ...]], target: str, statement: str = "TUNE") -> Optional[tuple[str, ...]]:
    """The ``features`` option's column names, as the statement's schema read them (None when not given), checked
    against the TARGET.

    Args:
        names: the names (:func:`modelsql.engine.options.schema.column_names` checked them: at least one, none
            twice).
        target: the TARGET column.
        statement: the statement's name, for the messages (``"TUNE"``, ``"FINETUNE PIPELINE p"``).

    Raises:
        ProgrammingError: ``invalid_option`` (its ``option`` attribute is ``"features"``): the TARGET column is
            among them (a model must not be fed what it predicts).
    """
    if names is None:
        return None
    if target.lower() in (n.lower() for n in names):
        raise option_error("features", f"{statement} option features names the TARGET column {target!r}: a model "
                                       "must not be fed what it predicts")
    return tuple(names)


def input_keys(session: Session, source: exp.Expression) -> list[str]:
    """The PRIMARY KEY and UNIQUE columns of ``ON TABLE t`` (``source`` an ``exp.Table``); none for a query,
    whose keys are known by their names only (as PREDICT's)."""
    return key_columns_of(session, source) if isinstance(source, exp.Table) else []


def training_features(columns: Sequence[str], target: str, given: Optional[Sequence[str]],
                      keys: Sequence[str] = (), statement: str = "TUNE") -> list[str]:
    """The feature columns of training data with ``columns`` (see the module), spelled as the data spells them.

    Args:
        columns: the data's column names, in order.
        target: the TARGET column (never a feature).
        given: the ``features`` option's names (:func:`feature_option`), or None.
        keys: the input table's PRIMARY KEY and UNIQUE columns (:func:`input_keys`).

    Raises:
        ProgrammingError: ``column_not_found`` naming a ``features`` column the data lacks, with a "did you
            mean" (its ``option`` attribute is ``"features"``); ``invalid_feature`` when only the target and
            keys are left, naming the keys.
    """
    names = {c.lower(): c for c in columns}
    if given is not None:
        missing = next((f for f in given if f.lower() not in names), None)
        if missing is not None:
            raise option_error("features", f'{statement}: feature column "{missing}" not found.'
                               f"{did_you_mean(missing, columns)} Columns: {', '.join(columns)}.", "column_not_found")
        return [names[f.lower()] for f in given]
    others = [c for c in columns if c.lower() != target.lower()]
    chosen = [c for c in others if not looks_like_key(c, keys)]
    if not chosen:
        left_out = [c for c in others if c not in chosen]
        why = (f"the other columns ({', '.join(left_out)}) are key-like, and keys are never fed to a model; name "
               "the features with WITH (features = (...))" if left_out else "the input has only the target")
        raise ProgrammingError(f"{statement}: no feature columns: {why}", code="invalid_feature")
    return chosen


def check_column_names(columns: Sequence[str], statement: str) -> None:
    """Column names are unique whatever their case (DuckDB's names are case-insensitive; PREDICT binds by name).

    Raises:
        ProgrammingError: ``duplicate_column``, naming both spellings.
    """
    seen: dict[str, str] = {}
    for c in columns:
        if c.lower() in seen:
            raise ProgrammingError(f'{statement}: the query has two columns named "{seen[c.lower()]}" and "{c}" '
                                   "(names are case-insensitive): give one another name (AS ...).",
                                   code="duplicate_column")
        seen[c.lower()] = c


def check_query_columns(session: Session, node: Any, params: Sequence, where: str) -> None:
    """The columns of an input ``(query)`` (``node``: TUNE's or FINETUNE's ``ON`` / ``VALIDATE ON``, EVALUATE's
    ``ON``) are unique whatever their case (:func:`check_column_names`): read as ``SELECT * FROM (query)``, DuckDB
    renames the second ``A`` beside ``a`` to ``A_1``, a name no PREDICT input has, and a TARGET ``A`` would bind
    to ``a``. The names are DuckDB's ``DESCRIBE`` of the query, which binds it and runs nothing (a relation of a
    query holding ``nextval`` would run it, its sequence's side effect too). A table's names are unique already; a
    query holding one of modelsql's table functions (PREDICT, EVALUATE ...), which DuckDB alone cannot describe, is
    left to the statement.

    Raises:
        ProgrammingError: ``duplicate_column``; DuckDB's error binding the query, prefixed with ``where``.
    """
    from modelsql.sql import TABLE_FUNCTIONS

    if not isinstance(node, exp.Subquery) or node.find(*TABLE_FUNCTIONS) is not None:
        return
    sql, used = renumber(typing.cast(exp.Expression, node.unnest()))
    try:
        described = session.duck.execute(f"DESCRIBE {sql}", [params[k - 1] for k in used] or None).fetchall()
    except Exception as exc:  # noqa: BLE001 - DuckDB's error, translated and named for the clause
        from modelsql.duckdb_errors import translate

        err = translate(exc)
        raise type(err)(f"{where}: {err}", code=err.code) from None
    check_column_names([str(r[0]) for r in described], where)
