"""TUNE's one result row, the same for every kind of study (a trainable's, a scikit-learn model type's, a Python
objective's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["TUNE_COLUMNS", "study_result"]

TUNE_COLUMNS = (("study", "VARCHAR"), ("status", "VARCHAR"), ("trials", "INTEGER"), ("best_trial", "INTEGER"),
                ("best_metric", "DOUBLE"), ("metric", "VARCHAR"), ("mode", "VARCHAR"), ("epochs_trained", "BIGINT"),
                ("epochs_requested", "BIGINT"), ("steps_ratio", "DOUBLE"))
"""TUNE's one result row: ``best_metric`` is the best trial's value of ``metric`` (the option; ``'val_loss'`` by
default) on the validation rows, best meaning lowest when ``mode`` is ``'min'``, highest when ``'max'``;
``epochs_requested`` is what the trials would train one by one, ``epochs_trained`` what the stage tree trained
(shared prefixes once; Hippo), and ``steps_ratio`` the first over the second (2.0: half the training)."""


def study_result(session: Session, row: Any) -> Result:
    """The result row of the study whose catalog row (``modelsql.studies``) is ``row``."""
    ratio = row.epochs_requested / row.epochs_trained if row.epochs_trained else None
    return Result(session.duck, description=[(n, t, None, None, None, None, True) for n, t in TUNE_COLUMNS], rows=[
        (row.name, row.status, len(session.catalog.studies.trials(row.name)), row.best_trial, row.best_metric,
         row.metric, row.mode, row.epochs_trained, row.epochs_requested, ratio)])
