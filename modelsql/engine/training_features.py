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

from typing import TYPE_CHECKING, Optional, Sequence

from sqlglot import exp

from modelsql.errors import ProgrammingError, did_you_mean
from modelsql.engine.query.bind_predict import looks_like_key
from modelsql.engine.query.bind_statement import key_columns_of
from modelsql.engine.options.schema import option_error

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["feature_option", "input_keys", "training_features"]


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

