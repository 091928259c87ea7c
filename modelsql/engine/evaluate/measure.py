"""Running an evaluation's one query and reading its result into metrics (:mod:`modelsql.metrics`'
definitions, BigQuery ML's names)."""

from __future__ import annotations

import decimal
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import pyarrow as pa

from modelsql import sql as msql
from modelsql.errors import DataError, Error, ProgrammingError, without_excerpt
from modelsql.metrics import as_positive, classification_metrics, default_positive, regression_metrics
from modelsql.sql.evaluate import EvaluateModel
from modelsql.engine.evaluate import queries
from modelsql.engine.evaluate.binding import EvaluatePlan, where_of
from modelsql.engine.evaluate.class_counts import ClassCounts, class_counts
from modelsql.engine.evaluate.roc_points import pooled_roc_auc
from modelsql.engine.options.schema import option_error
from modelsql.engine.query.predict_errors import NULL_HINT
from modelsql.engine.query_handler import run_query

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["Measured", "evaluation_query", "measure", "run_arrow", "run_sql", "about_the_input"]

_SLACK = 1e-5
"""How far past [0, 1] a probability may lie and still be one: a tree ensemble's float32 sums reach 1.0000001."""

_DRIFT = 1e-3
"""How far a row's probabilities may sum from 1 and still be a classifier's probabilities (float32 rounding of a
softmax or of a forest's votes is about 1e-7); decision scores that happen to lie in [0, 1] sum to anything."""


@dataclass(frozen=True)
class Measured:
    """An evaluation's result: the rows evaluated, their fingerprint, the metrics, (a classifier with
    probabilities) which probability position is each class, and (a classifier's, when kept) the predictions read:
    :mod:`.class_counts`' columns ``t``, ``p``, ``s``, ``h``."""

    rows: int
    fingerprint: str
    metrics: dict[str, Any]
    where: Optional[dict[Any, int]] = None
    predictions: Optional[pa.Table] = None


def measure(stmt: EvaluateModel, plan: EvaluatePlan, session: Session, params: list,
            keep: bool = False) -> Measured:
    """Run the plan's query and read its metrics; with ``keep``, a classifier's predictions are kept in the result
    (ROC_CURVE draws its curve from them).

    Raises:
        DataError: ``null_target``, ``not_a_number``, ``too_few_rows``, ``null_input`` (a NULL fed to the model,
            worded for EVALUATE, whose on_null is ``error`` or ``skip``).
        ProgrammingError: ``invalid_option`` (options that do not fit the classes found).
    """
    try:
        if plan.task == "regression":
            return _regression(stmt, plan, run_sql(evaluation_query(plan), session, params, stmt))
        predictions = run_arrow(evaluation_query(plan), session, params, stmt)
        counts = class_counts(predictions, _needs_positions(plan), _ranked_position(plan),
                              plan.options["threshold"], plan.classes)
    except DataError as err:
        if err.code != "null_input" or NULL_HINT not in str(err):
            raise
        raise DataError(f"{where_of(stmt)}: " + str(err).replace(NULL_HINT, ". Write on_null = 'skip' to leave those "
                        "rows out of the evaluation, or filter or fill them in the input."), code=err.code) from None
    bad = int(counts.scores["bad"]) if counts.scores else 0
    _check_rows(stmt, plan, counts.rows, counts.null_targets, bad)
    metrics, where = _classification(stmt, plan, counts, predictions)
    return Measured(counts.rows, queries.fingerprint_text(counts.rows, counts.digest), metrics, where,
                    predictions if keep else None)


def evaluation_query(plan: EvaluatePlan) -> queries.Query:
    """The one query of an evaluation (:mod:`.queries`), by the plan's task."""
    if plan.task == "regression":
        return queries.regression_sql(plan.predicted)
    return queries.classification_sql(plan.predicted)


def _needs_positions(plan: EvaluatePlan) -> bool:
    """Whether the query must find which probability position each predicted class takes: the model's graph
    does not name its classes, one per position (:func:`queries.positions_of`)."""
    return plan.classes is None or plan.predicted.width is None or len(plan.classes) != plan.predicted.width


def _ranked_position(plan: EvaluatePlan) -> Optional[int]:
    """The one probability position ROC AUC reads, when the model names two classes, one per position: the
    positive class's (the option's, else :func:`default_positive`'s, as :func:`_classes` decides); None when
    every position is ranked (one-vs-rest, or classes unknown before the rows are read)."""
    classes = plan.classes
    if classes is None or len(classes) != 2 or plan.predicted.width != 2:
        return None
    option = plan.options["positive"]
    index = _index_of(option if option is not None else default_positive(classes), classes)
    return None if index is None else index + 1


def run_sql(query: queries.Query, session: Session, params: list,
            stmt: Optional[EvaluateModel] = None) -> tuple[Any, ...]:
    """The first row of an evaluation's query: its predictions planned as a query whose every row is read (their
    PREDICT may run in batch mode), the rest of its plain SQL put around them (never parsed nor planned)."""
    row = _run(query, session, params, session.duck.fetchone, stmt)
    assert row is not None  # an aggregate query has one row
    return tuple(row)


def run_arrow(query: queries.Query, session: Session, params: list,
              stmt: Optional[EvaluateModel] = None) -> pa.Table:
    """:func:`run_sql`'s query, its rows as an Arrow table written by DuckDB (never made Python objects)."""
    with about_the_input(query, session, stmt):
        out, _, _ = run_query(msql.parse(query.predictions)[0], session, params, prefix=query.head,
                              suffix=query.tail, arrow=True)
        return out.table


def _run(query: queries.Query, session: Session, params: list, fetch: Callable[[], Any],
         stmt: Optional[EvaluateModel]) -> Any:
    """Run ``query`` (see :func:`run_sql`) and ``fetch`` its result; the result is then finished and released; its
    errors are about ``stmt``'s input or model (:func:`about_the_input`)."""
    with about_the_input(query, session, stmt):
        out, _, _ = run_query(msql.parse(query.predictions)[0], session, params, prefix=query.head,
                              suffix=query.tail)
        try:
            return fetch()
        finally:
            session.duck.fetchall()
            out.release()


_ABOUT_THE_INPUT = frozenset({"column_not_found", "feature_mismatch", "wrong_column_type", "wrong_input_shape",
                               "ragged_input", "null_input", "invalid_value", "duplicate_column",
                               "input_type_not_supported", "catalog_error", "binder_error", "conversion_error",
                               "out_of_range", "invalid_input", "data_error"})
"""Codes of the errors of an evaluation's PREDICT that are about its input (its columns, a row's values, DuckDB
computing them: a failed cast, a value out of range); the others are about the model."""


@contextmanager
def about_the_input(query: queries.Query, session: Session, stmt: Optional[EvaluateModel]) -> Iterator[None]:
    """Errors raised in the block, by the PREDICT of the evaluation's input (SQL the statement generated), point at
    the statement's input (an error about its columns or rows) or its model (any other) instead of into that SQL,
    and list the input's columns without the one the query added (``query.added``)."""
    try:
        yield
    except Error as err:
        told = without_excerpt(str(err))
        if query.added:  # (the added column is the list's last, and never a "did you mean")
            told = re.sub(rf", {re.escape(query.added)}(?=\.|$)", "", told, flags=re.M)
            told = re.sub(rf' ?\(?Did you mean "{re.escape(query.added)}"\?\)?', "", told)
        if stmt is None:
            if told == str(err):
                raise
            raise err.retold(told) from None
        about = stmt.args["source"] if err.code in _ABOUT_THE_INPUT else stmt.this
        raise session.pointed(err.retold(told), about) from None


def _check_rows(stmt: EvaluateModel, plan: EvaluatePlan, rows: int, null_targets: int, not_numbers: int) -> None:
    if not_numbers:
        what = "the TARGET or the prediction" if plan.task == "regression" else "the model's probabilities"
        raise DataError(f"{where_of(stmt)}: {what} is NaN or infinite in {not_numbers} of {rows} rows (a NaN or "
                        "infinite feature gives a NaN prediction): filter them out in the input.",
                        code="not_a_number")
    if null_targets:
        raise DataError(f"{where_of(stmt)}: TARGET {plan.target} is NULL in {null_targets} of {rows} rows: every "
                        "row evaluated needs its true value (filter them out in the input).", code="null_target")
    if rows == 0:
        raise DataError(f"{where_of(stmt)}: the input has no rows to evaluate.", code="too_few_rows")


def _classes(stmt: EvaluateModel, plan: EvaluatePlan, labels: list[Any]) -> tuple[str, Any]:
    """The ``average`` and the positive class, the options' or their defaults (from the model's classes when
    its graph names them, else the rows'), checked against the classes."""
    fractional = next((v for v in labels if (isinstance(v, float) and not v.is_integer())
                       or (isinstance(v, decimal.Decimal) and v != v.to_integral_value())), None)
    if fractional is not None:
        raise ProgrammingError(f"{where_of(stmt)}: TARGET {plan.target} holds numbers that are no class ({fractional!r} "
                               "...): a classifier is scored against class labels (scikit-learn refuses a continuous "
                               "target too).", code="invalid_target")
    known = plan.classes if plan.classes is not None else labels
    average = plan.options["average"] or ("binary" if len(known) <= 2 and len(labels) <= 2 else "macro")
    if average == "binary" and len(labels) > 2:
        raise option_error("average", f"{where_of(stmt)} option average is 'binary' but the rows have {len(labels)} "
                                      f"classes ({_classes_text(labels)}): use 'macro', 'weighted' or 'micro'.")
    positive = as_positive(plan.options["positive"], labels)
    if positive is None:
        positive = as_positive(default_positive(known), labels)
    elif not (_names_a_class(plan.options["positive"], labels)
              or _names_a_class(plan.options["positive"], plan.classes or ())):
        model = f"; the model's: {', '.join(map(repr, plan.classes))}" if plan.classes else ""
        raise option_error("positive", f"{where_of(stmt)} option positive is {positive!r}, not a class of the rows "
                                       f"or the model (the rows' classes: {', '.join(map(repr, labels))}{model}).")
    if average == "binary" and len(labels) == 2 and positive not in labels:
        raise option_error("positive" if plan.options["positive"] is not None else "average",
                           f"{where_of(stmt)}: average 'binary' scores the positive class {positive!r}, which no row "
                           f"has (the rows' classes: {', '.join(map(repr, labels))}): name one with positive = ..., "
                           "or use average = 'macro', 'weighted' or 'micro'.")
    # a threshold needs two classes: the model's two (rows of one of them too), or the rows' two
    both = _two_classes(plan, labels)
    wrong = {"threshold": len(labels) > 2 or len(both) != 2, "positive": len(labels) > 2}
    for name in ("threshold", "positive"):
        if plan.options[name] is not None and wrong[name]:
            counted = (f"the rows have {len(labels)} ({_classes_text(labels)})" if len(labels) > 2 else
                       f"the rows' and the model's are {len(both)} ({', '.join(map(repr, both[:10]))})")
            raise option_error(name, f"{where_of(stmt)} option {name} applies to two classes; {counted}.")
    return average, positive


def _classes_text(labels: Sequence[Any]) -> str:
    """The rows' classes for a message: what their TARGET holds and what the model predicts for them, together
    (scikit-learn's ``unique_labels`` of the two, which its metrics count)."""
    shown = ", ".join(map(repr, labels[:10])) + (", ..." if len(labels) > 10 else "")
    return f"the TARGET's and the predicted ones together: {shown}"


def _two_classes(plan: EvaluatePlan, labels: Sequence[Any]) -> list[Any]:
    """The classes a threshold chooses between: the rows' with the model's (when its graph names them)."""
    return queries.sorted_labels([*labels, *(plan.classes or ())])


def _names_a_class(option: Any, classes: Sequence[Any]) -> bool:
    """Whether a ``positive`` option, read as ``classes`` spell theirs (:func:`as_positive`), is one of them."""
    return _index_of(option, classes) is not None


def _index_of(option: Any, classes: Sequence[Any]) -> Optional[int]:
    """Where among ``classes`` a ``positive`` option (read as they spell theirs: :func:`as_positive`) is, by value
    and type (``True`` is no integer class); None when it is none of them."""
    positive = as_positive(option, classes)
    return next((k for k, c in enumerate(classes) if type(c) is type(positive) and c == positive), None)


def _classification(stmt: EvaluateModel, plan: EvaluatePlan, counts: ClassCounts,
                    predictions: pa.Table) -> tuple[dict[str, Any], Optional[dict[Any, int]]]:
    confusion, positions = counts.confusion, counts.positions
    scores = counts.scores or {}
    ranks = queries.score_entries(scores, counts.classes)
    labels = queries.labels_of(confusion)
    average, positive = _classes(stmt, plan, labels)
    width = max((int(e["i"]) for e in ranks), default=0)
    probabilities = (bool(ranks) and scores["lo"] >= -_SLACK and scores["hi"] <= 1.0 + _SLACK
                     and (scores["drift"] or 0.0) <= _DRIFT)
    where = queries.positions_of(labels, positions, width, plan.classes) if probabilities else None
    if plan.options["threshold"] is not None:
        if where is None:
            raise option_error("threshold", f"{where_of(stmt)} option threshold needs the model's probabilities of "
                                            "each class (values in [0, 1], each class's column known).")
        confusion = queries.thresholded_confusion(ranks, _two_classes(plan, labels), positive, where)
        labels = queries.labels_of(confusion)  # (rows of one class may now be predicted as the other)
    matrix = queries.confusion_matrix(confusion, labels)
    metrics: dict[str, Any] = classification_metrics(matrix, labels, average, positive)
    rows = counts.rows
    metrics["log_loss"] = queries.log_loss(ranks, where, rows) if where is not None else None
    metrics["roc_auc"] = queries.roc_auc(ranks, where, labels, positive, average) if where is not None else None
    if average == "micro" and where is not None and not queries.binary_auc(labels, where, width):
        metrics["roc_auc"] = pooled_roc_auc(predictions, where)  # every probability ranked together
    metrics.update(labels=labels, confusion_matrix=matrix, average=average,
                   positive=positive if average == "binary" or plan.options["threshold"] is not None else None,
                   positive_class=positive)  # (averaged metrics do not depend on it, but the threshold's class does)
    return metrics, where


def _regression(stmt: EvaluateModel, plan: EvaluatePlan, row: tuple[Any, ...]) -> Measured:
    rows, null_targets, digest, not_numbers, abs_sum, squared_sum, median_abs, target_var, error_var = row
    _check_rows(stmt, plan, int(rows), int(null_targets), int(not_numbers))
    metrics = regression_metrics(rows=int(rows), abs_error_sum=float(abs_sum), squared_error_sum=float(squared_sum),
                                 median_abs_error=float(median_abs), target_var_pop=float(target_var),
                                 error_var_pop=float(error_var))
    return Measured(int(rows), queries.fingerprint_text(rows, digest), metrics)


