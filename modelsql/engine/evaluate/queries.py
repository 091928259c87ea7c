"""The one query an EVALUATE runs, and the metrics read from what it returns.

The query reads the model's predictions of the input's rows (its PREDICT, computed once, never a second pass over
the input). The part modelsql plans is the predictions' query, :attr:`Query.predictions`:

* a classifier's query is that alone: its columns ``t`` (the TARGET), ``p`` (the prediction), ``s`` (the
  probabilities, when the model gives them) and ``h`` (each input row's hash) are handed over as Arrow and
  counted by :mod:`.class_counts`, since NumPy ranks a column (ROC AUC) about ten times faster than DuckDB's
  windows;
* a regressor's predictions are a materialized CTE, aggregated by the plain DuckDB SQL around it
  (:attr:`Query.rest`): the sums of the errors, their median and the variances, small whatever the row count.

Every evaluation counts the rows whose target is NULL, those with a number that is not one (NaN or infinite: a
target or prediction of a regressor, a classifier's probability) and fingerprints the rows read (the sum of their
hashes); a classifier's probabilities' range is checked too (probabilities lie in [0, 1]; scores that do not, such
as a support vector machine's margins, give no log loss or ROC AUC). The metrics' definitions are
:mod:`modelsql.metrics`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from modelsql.engine.evaluate.score_stats import EPS

__all__ = ["Predicted", "Query", "classification_sql", "regression_sql", "fingerprint_sql", "fingerprint_text",
           "ROW_HASH", "EPS", "PREDICTIONS", "binary_auc", "hash_column"]

def hash_column(columns: Sequence[str], base: str = "__msql_h") -> str:
    """The name of the column of each input row's hash that an evaluation's PREDICT input adds (computed as DuckDB
    reads the input, so the input's other columns need not travel with the predictions to be fingerprinted):
    ``__msql_h``, or ``__msql_h_<k>`` when the input has a column of that name (DuckDB's names ignore case); with
    ``base``, a free name of that stem (the TARGET's, where the input's name clashes with the PREDICT's outputs)."""
    taken = {c.lower() for c in columns}
    return next(name for name in (base, *(f"{base}_{k}" for k in range(1, len(taken) + 2)))
                if name not in taken)

PREDICTIONS = "__msql_eval"
"""The name of the materialized CTE of the predictions, every row of which the query reads."""

@dataclass(frozen=True)
class Predicted:
    """What EVALUATE reads of ``PREDICT``: the PREDICT table function's SQL, the TARGET and the prediction
    columns (quoted SQL), the probabilities column (or None), the column of each input row's hash the PREDICT's
    input gains (:func:`hash_column`; "" for an input of no columns, whose rows hash to 0; the fingerprint sums
    them), the target's cast and the probabilities' width when their type fixes it (``FLOAT[k]``)."""

    predict_sql: str
    target: str
    prediction: str
    probabilities: Optional[str]
    added: str
    target_cast: str = ""
    width: Optional[int] = None
    text_labels: bool = False

    def select(self, cast: str = "") -> str:
        """The predictions' query: ``t`` the target, ``p`` the prediction, ``s`` the probabilities (each cast
        to ``cast`` when given; a target read as a class label of integers is cast to BIGINT; a prediction of
        integer classes against a target of numbers is read as numbers too (as the target's DECIMAL scale, in 38
        digits, against a DECIMAL), so the labels are all of one kind, as
        scikit-learn's ``unique_labels`` of the two makes them), ``h`` a hash of the input row. Text labels are
        compared byte for byte (``COLLATE c``), as scikit-learn compares them, whatever collation the input's
        column or the connection has (NOCASE would make ``'A'`` and ``'a'`` one class in some aggregates and two
        in others)."""
        probabilities = f", {self.probabilities} AS s" if self.probabilities else ""  # ranked in its own type
        exact = " COLLATE c" if self.text_labels and not cast else ""
        target = f"({self.target}{cast or self.target_cast}){exact}"
        predicted = cast or (self.target_cast if self.target_cast == "::DOUBLE" or self.target_cast.startswith(
            "::DECIMAL(38,") else "")
        row_hash = f'"{self.added}"' if self.added else "0"
        return (f"SELECT {target} AS t, ({self.prediction}{predicted}){exact} AS p{probabilities}, {row_hash} AS h "
                f"FROM {self.predict_sql}")


@dataclass(frozen=True)
class Query:
    """An evaluation's statement: ``predictions`` is modelsql SQL (the PREDICT, planned as a query whose every row
    is read); ``rest`` plain DuckDB SQL over them, never parsed (it holds no PREDICT and no parameter), making the
    statement ``WITH __msql_eval AS MATERIALIZED (<predictions>)<rest>``, or nothing: the predictions are the
    statement's rows."""

    predictions: str
    rest: str = ""
    added: str = ""
    """A column the predictions' input gains (the row hash, :func:`hash_column`), named in no message."""

    @property
    def head(self) -> str:
        """What goes before the planned predictions' DuckDB SQL."""
        return f"WITH {PREDICTIONS} AS MATERIALIZED (" if self.rest else ""

    @property
    def tail(self) -> str:
        """What goes after it."""
        return f"){self.rest}" if self.rest else ""


_HASH_SUM = "(coalesce(sum({0}::HUGEINT), 0) % 18446744073709551616)::UBIGINT"
"""The order-independent digest of rows: the sum of their hashes ``{0}``, modulo 2**64."""

_COMMON = ("(SELECT count(*) FROM __msql_eval) AS n, "
           "(SELECT count(*) FROM __msql_eval WHERE t IS NULL) AS null_targets, "
           f"(SELECT {_HASH_SUM.format('h')} FROM __msql_eval) AS fingerprint, "
           "{not_numbers} AS not_numbers")
_NOT_A_NUMBER = "isnan({0}) OR isinf({0})"


ROW_HASH = "system.main.hash"
"""DuckDB's ``hash()`` of a row's columns, named whole: a user's macro named ``hash`` does not replace it."""


def fingerprint_sql(columns: Sequence[str], relation: str) -> str:
    """``SELECT count(*), digest`` of the rows of ``relation`` over ``columns`` (quoted SQL): the fingerprint an
    EVALUATE of those rows records (:func:`fingerprint_text`)."""
    return f"SELECT count(*), {_HASH_SUM.format(ROW_HASH + '(' + ', '.join(columns) + ')')} FROM {relation}"


def fingerprint_text(rows: int, digest: int) -> str:
    """How a fingerprint is written: ``<rows>:<digest as 16 hex digits>``."""
    return f"{int(rows)}:{int(digest):016x}"


def classification_sql(predicted: Predicted) -> Query:
    """The query of a classifier: its predictions' rows ``(t, p[, s], h)``, counted by :mod:`.class_counts`."""
    return Query(predicted.select(), added=predicted.added)


def regression_sql(predicted: Predicted) -> Query:
    """The query of a regressor: one row ``(n, null_targets, fingerprint, not_numbers, abs_error_sum,
    squared_error_sum, median_abs_error, target_var_pop, error_var_pop)`` over the rows with a target; the
    variances are taken about means computed first (two passes over the materialized predictions, as
    scikit-learn's ``np.average((y - y.mean()) ** 2)``: no cancellation for targets far from zero); every sum is
    compensated (``fsum``, ``favg``: Kahan-Babuska), as NumPy's pairwise sums are about as exact."""
    where = "FROM __msql_eval WHERE t IS NOT NULL"
    centred = f"FROM __msql_eval, (SELECT favg(t) AS mt, favg(t - p) AS md {where}) WHERE t IS NOT NULL"
    not_numbers = (f"(SELECT count(*) FROM __msql_eval WHERE {_NOT_A_NUMBER.format('t')} OR "
                   f"{_NOT_A_NUMBER.format('p')})")
    return Query(predicted.select("::DOUBLE"), added=predicted.added,
                 rest=f" SELECT {_COMMON.format(not_numbers=not_numbers)}, (SELECT fsum(abs(t - p)) {where}), "
                 f"(SELECT fsum((t - p) * (t - p)) {where}), "
                 f"(SELECT median(abs(t - p)) {where}), (SELECT favg((t - mt) * (t - mt)) {centred}), "
                 f"(SELECT favg((t - p - md) * (t - p - md)) {centred})")


def score_entries(scores: dict[str, Any], classes: Sequence[Any]) -> list[dict[str, Any]]:
    """The entries of :func:`.score_stats.statistics`, each with its class ``t`` (from ``classes``, the TARGET's
    distinct values of :class:`.class_counts.ClassCounts`) for its number ``c``: what :func:`log_loss`,
    :func:`roc_auc` and :func:`thresholded_confusion` read."""
    return [{**e, "t": classes[int(e["c"])]} for e in scores.get("entries") or []]


# ---------------------------------------------------------------- reading the row


def _sort_key(label: Any) -> tuple[str, Any]:
    return (type(label).__name__, label)


def sorted_labels(labels: Sequence[Any]) -> list[Any]:
    """The distinct ``labels`` (the first of equal ones kept), sorted (``sklearn.utils.multiclass.unique_labels``)."""
    return sorted(dict.fromkeys(labels), key=_sort_key)


def labels_of(confusion: list[dict[str, Any]]) -> list[Any]:
    """The classes of the rows, true or predicted, sorted (:func:`sorted_labels`)."""
    return sorted_labels([c["t"] for c in confusion] + [c["p"] for c in confusion if c["p"] is not None])


def confusion_matrix(confusion: list[dict[str, Any]], labels: Sequence[Any]) -> list[list[int]]:
    """``[true][predicted]`` counts in ``labels`` order."""
    index = {label: k for k, label in enumerate(labels)}
    out = [[0] * len(labels) for _ in labels]
    for c in confusion:
        if c["p"] is not None:
            out[index[c["t"]]][index[c["p"]]] += int(c["n"])
    return out


def positions_of(labels: Sequence[Any], positions: list[dict[str, Any]], width: int,
                 classes: Optional[Sequence[Any]]) -> Optional[dict[Any, int]]:
    """Which probability position (1-based) is each class of the rows: the model's own ``classes`` when its
    graph names them (scikit-learn's ``classes_`` order); else each class's most frequent arg-max position
    among the rows predicted as it, or the sorted classes when every class of the rows is predicted, as many as
    there are positions, and the arg-max positions agree. None when a class of the rows has no position (a
    class the model does not know, or one it never predicts with its classes unknown), or two share one."""
    if classes is not None and len(classes) == width:
        where = {label: k + 1 for k, label in enumerate(classes)}
        return where if all(label in where for label in labels) else None
    best: dict[Any, tuple[int, int]] = {}
    for entry in positions:
        if entry["p"] is not None and entry["n"] > best.get(entry["p"], (0, 0))[0]:
            best[entry["p"]] = (int(entry["n"]), int(entry["i"]))
    found = {label: i for label, (_, i) in best.items()}
    if not all(label in found for label in labels) or len(set(found.values())) != len(found):
        return None  # a class never predicted, or two classes at one position (a single column of scores)
    ordered = {label: k + 1 for k, label in enumerate(labels)}
    return ordered if len(labels) == width and found == ordered else found


def log_loss(ranks: list[dict[str, Any]], where: dict[Any, int], rows: int) -> float:
    """The mean of -ln(probability of the true class), clipped to [EPS, 1 - EPS]."""
    return -sum(e["ln"] for e in ranks if where.get(e["t"]) == e["i"]) / rows


class _Ranks:
    """The ``ranks`` entries by (class, position), and each position's rows: one pass over them, so ROC AUC over
    k classes reads k entries, not k times all k x k."""

    def __init__(self, ranks: list[dict[str, Any]]) -> None:
        self.entry: dict[tuple[Any, int], dict[str, Any]] = {}
        self.rows: dict[int, int] = {}
        for e in ranks:
            self.entry[(e["t"], int(e["i"]))] = e
            self.rows[int(e["i"])] = self.rows.get(int(e["i"]), 0) + int(e["n"])

    def auc(self, label: Any, position: int) -> Optional[float]:
        """One class against the rest, by the probabilities at ``position``: (the rank sum of its rows - n(n+1)/2)
        / (its rows x the others); None when either side has no rows."""
        mine = self.entry.get((label, position))
        n, n_pos = self.rows.get(position, 0), int(mine["n"]) if mine else 0
        if mine is None or n_pos == n:
            return None
        return (float(mine["r"]) - n_pos * (n_pos + 1) / 2) / (n_pos * (n - n_pos))

    def true_rows(self, label: Any) -> int:
        """The rows whose true class is ``label`` (every row has position 1)."""
        e = self.entry.get((label, 1))
        return int(e["n"]) if e else 0


def roc_auc(ranks: list[dict[str, Any]], where: dict[Any, int], labels: Sequence[Any], positive: Any,
            average: str) -> Optional[float]:
    """Binary (two classes, with ``average = 'binary'`` or a model of two probabilities): the positive class's AUC.
    Otherwise one-vs-rest, the mean over the rows' classes, each by its own probability (``weighted``: by their
    rows; ``roc_auc_score(multi_class='ovr')``); ``micro`` is worked out from every probability
    (:func:`~.roc_points.pooled_roc_auc`), this macro mean standing for it meanwhile. None when a class that
    counts has no rows or all of them (scikit-learn's NaN; ``weighted`` gives a class of no rows no weight, as
    scikit-learn does)."""
    index = _Ranks(ranks)
    if binary_auc(labels, where, max((int(e["i"]) for e in ranks), default=0)) or (len(labels) == 2 and
                                                                                 average == "binary"):
        return index.auc(positive, where[positive])
    weights = [index.true_rows(label) for label in labels] if average == "weighted" else [1] * len(labels)
    each = [index.auc(label, where[label]) if w else None for label, w in zip(labels, weights)]
    if any(a is None for a, w in zip(each, weights) if w) or not sum(weights):
        return None
    return sum(w * a for w, a in zip(weights, each) if a is not None) / sum(weights)


def binary_auc(labels: Sequence[Any], where: dict[Any, int], width: int) -> bool:
    """Whether ROC AUC is one class's alone, whatever the averaging: two classes in the rows and at most two
    probabilities per row (``width``) and positions known (scikit-learn's binary case, where ``average`` is not
    read; a model of three probabilities is multiclass whatever classes the rows hold)."""
    return len(labels) == 2 and len(where) <= 2 and width <= 2


def thresholded_confusion(ranks: list[dict[str, Any]], classes: Sequence[Any], positive: Any,
                          where: dict[Any, int]) -> list[dict[str, Any]]:
    """The confusion counts when the positive class is predicted where its probability reaches the threshold
    (the ``hits`` of the ``ranks`` entries at its position), the other of the two ``classes`` elsewhere."""
    negative = next(label for label in classes if label != positive)
    at = [e for e in ranks if e["i"] == where[positive]]
    return ([{"t": e["t"], "p": positive, "n": e["hits"]} for e in at if e["hits"]]
            + [{"t": e["t"], "p": negative, "n": e["n"] - e["hits"]} for e in at if e["n"] - e["hits"]])

