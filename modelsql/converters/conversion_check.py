"""Checking a scikit-learn conversion: the estimator and its ONNX graph, run on the same rows.

skl2onnx's graphs can answer differently from the estimator they came from:
tree ensembles compare and sum in float32, so probabilities differ in the last
digits (and a row on a float64 threshold can change side); a OneHotEncoder with
``handle_unknown='infrequent_if_exist'`` (or ``'warn'``) encodes an unseen
category as zeros in scikit-learn, while skl2onnx's graph fails on it in ONNX
Runtime ("Unknown Category and zeros = 0"). :func:`check_conversion` measures
this on a sample of rows, so that import can record the figure and refuse a
model whose labels disagree.

The ONNX side runs in ONNX Runtime through
:class:`modelsql.operators.backends.onnxruntime.OrtModel` (only
``operators/backends`` imports onnxruntime), fed as PREDICT feeds it: float32
for numeric inputs, object arrays of ``str`` for text inputs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import onnx

from modelsql.errors import DataError, NotSupportedError, ProgrammingError

__all__ = ["ConversionCheck", "check_conversion", "DEFAULT_SAMPLE_ROWS", "DEFAULT_SAMPLE_SEED", "MAX_SAMPLE_ROWS",
           "PROBABILITY_TOLERANCE", "same_labels"]

DEFAULT_SAMPLE_ROWS = 256
"""Rows of the default sample (see :func:`check_conversion`)."""

DEFAULT_SAMPLE_SEED = 0
"""Seed of ``numpy.random.default_rng`` drawing the default sample (and the rows kept of a large one)."""

MAX_SAMPLE_ROWS = 10_000
"""Rows of a user's sample that are compared at most: a larger one is cut to this many,
drawn without replacement (in their order) with the seed above."""


@dataclass(frozen=True)
class ConversionCheck:
    """What :func:`check_conversion` found.

    Attributes:
        rows: sample rows both sides were run on.
        max_abs_diff: the largest absolute difference over every compared numeric
            output (probabilities, regression predictions, transforms), over the rows
            where both sides answered; 0.0 if only labels were compared; ``inf`` where
            one side gives NaN and the other a number.
        label_mismatches: rows whose label differs (any target, for multi-output
            models), plus rows where ONNX Runtime fails while the estimator answers.
        compared: what was compared, ``"estimator method vs ONNX output"`` pairs
            joined by ``", "``, e.g. ``"predict vs label, predict_proba vs probabilities"``.
        first_mismatch: ``(row, estimator_label, onnx_label)`` of the first
            disagreeing row as display strings (``onnx_label`` names the ONNX Runtime
            error where it failed); None when no row disagrees.
        max_probability_diff: the largest absolute difference of ``predict_proba`` against the
            probabilities alone (0.0 without them): bounded by 1, so comparable across models.
    """

    rows: int
    max_abs_diff: float
    label_mismatches: int
    compared: str
    first_mismatch: Optional[tuple[int, str, str]] = None
    max_probability_diff: float = 0.0


PROBABILITY_TOLERANCE = 1e-3
"""How far an imported classifier's ONNX probabilities may lie from ``predict_proba`` before the import is refused
(float32 rounding gives about 1e-6; a converter that computes another formula, 0.1: skl2onnx 1.20 squares the odds
of a binary ``LinearDiscriminantAnalysis``); a model trained in SQL is held to it too
(:func:`modelsql.estimators.conversion_tolerance`)."""


def check_conversion(
    estimator: Any,
    model: onnx.ModelProto,
    sample: Any = None,
    *,
    features: Optional[Sequence[str]] = None,
    accept_mismatch: bool = False,
    tolerance: Optional[float] = None,
) -> Optional[ConversionCheck]:
    """Run ``estimator`` and its conversion ``model`` on the same rows and compare them.

    Args:
        estimator: the fitted scikit-learn estimator or Pipeline ``model`` was converted from.
        model: its conversion by :func:`modelsql.converters.from_sklearn`: one input
            ``"input"`` ``[N, n_features]``, or (a pipeline selecting columns by name)
            one ``[N, 1]`` input per column, named after it.
        sample: the rows to compare on. For a single 2-D input: a 2-D array-like
            ``[rows, n_features]`` (a numpy array, a list of rows; a 1-D one is one
            row), or a pyarrow Table / pandas DataFrame with the ``features`` columns.
            For a pipeline selecting columns by name: a pyarrow Table or pandas
            DataFrame with a column per model input (numbers, or text for text inputs).
            Of a sample over :data:`MAX_SAMPLE_ROWS` (10,000) rows, that many are
            compared, drawn with a fixed seed. None: the default sample. For a single 2-D numeric input it is
            :data:`DEFAULT_SAMPLE_ROWS` (256) rows drawn from a standard normal with
            ``numpy.random.default_rng(DEFAULT_SAMPLE_SEED)``. A by-name pipeline has no
            default sample: the check is skipped (returns None), as it is when the
            estimator itself fails on the default rows (a OneHotEncoder with
            ``handle_unknown='error'`` meeting values it never saw).
        features: the input's feature names in column order, used to take a table
            sample's columns for a single 2-D input (default: the estimator's
            ``feature_names_in_``).
        accept_mismatch: if False (the default), a label disagreement, or probabilities off by more than
            :data:`PROBABILITY_TOLERANCE`, raises (below); if True, it is only counted.
        tolerance: the most a numeric output may differ (``max_abs_diff``) unless ``accept_mismatch``; None:
            any difference is only recorded (an imported model is what its author made it; a model trained in
            SQL must predict what its estimator predicts, so its statement gives one).

    Compared, each where both exist: ``predict`` vs ``label`` (as strings; a row
    differs if any of its targets does), ``predict_proba`` vs ``probabilities``,
    ``predict`` vs ``prediction`` (regressors; or their only output), and for other estimators
    ``transform`` vs their one output besides ``label``. The estimator gets the sample
    as given (float64 rows, or the table); the ONNX model gets it as PREDICT feeds it
    (float32 numbers, ``str`` objects for text), so input rounding counts as a
    difference. Where ONNX Runtime fails on a batch, its halves are rerun down to
    single rows; a row it fails on while the estimator answers is a label mismatch.

    Returns:
        a :class:`ConversionCheck`, or None when the check is skipped (see ``sample``)
        or no estimator method matches an output.

    Raises:
        DataError: code ``conversion_mismatch`` if ``accept_mismatch`` is False and some
            row disagrees, naming how many of how many rows, the first one's two labels,
            and ``accept_mismatch=True`` (or the probabilities do, by more than :data:`PROBABILITY_TOLERANCE`), or
            if a numeric output differs by more than ``tolerance``; code ``invalid_onnx`` if ONNX Runtime cannot
            load ``model``.
        NotSupportedError: code ``conversion_failed`` if an ONNX output does not fit the
            estimator's answer (not one row per input row, or another width), or the
            model's inputs are not those :func:`from_sklearn` makes.
        ProgrammingError: code ``bad_sample`` for a sample of the wrong form or width,
            missing a column, or one the estimator fails on.
    """
    from modelsql.operators.backends.onnxruntime import OrtModel

    what = type(estimator).__name__
    # One thread, as PREDICT's sessions mostly get (cores // DuckDB threads): tree ensembles
    # sum their trees in an order that depends on the thread count.
    ort_model = OrtModel(model.SerializeToString(), f"the ONNX conversion of the {what}", intra_op_threads=1)
    prepared = _prepare(estimator, ort_model, sample, features)
    if prepared is None:
        return None
    est_input, feeds, rows = prepared
    answers = _estimator_answers(estimator, est_input, ort_model.output_names, default=sample is None)
    if not answers:
        return None
    outs, ok, errors = _run_rows(ort_model, feeds, rows)
    _check_declared(model, outs, what)
    check = _compare(answers, outs, ok, errors, what)
    if accept_mismatch:
        return check
    if check.label_mismatches:
        raise _mismatch_error(check, what)
    if tolerance is not None and check.max_abs_diff > tolerance:
        raise _stray_error(check, what, check.max_abs_diff, tolerance)
    if check.max_probability_diff > PROBABILITY_TOLERANCE:
        raise _stray_error(check, what, check.max_probability_diff, PROBABILITY_TOLERANCE)
    return check


_ACCEPT = ("pass accept_mismatch=True to import_model (WITH (accept_mismatch = true) in SQL) to accept it, the "
           "difference recorded")
"""How a conversion_mismatch error says to keep the model anyway."""


def _stray_error(check: ConversionCheck, what: str, diff: float, allowed: float) -> DataError:
    """The DataError ``conversion_mismatch`` for numbers that differ by ``diff``, more than ``allowed``."""
    return DataError(
        f"the ONNX conversion of the {what} differs from scikit-learn's answers by up to {diff:.3g} on {check.rows} "
        f"rows ({check.compared}), more than the {allowed:.3g} allowed: it does not compute what the estimator "
        "computes (a converter that disagrees with scikit-learn, or float32 rounding of an ill-conditioned fit, "
        f"such as values far from zero, or ties the two break apart); {_ACCEPT}.",
        code="conversion_mismatch",
    )


# ------------------------------------------------------------------------------ sample


def _is_table(sample: Any) -> bool:
    """A pyarrow Table / RecordBatch or a pandas DataFrame."""
    return hasattr(sample, "column_names") or (hasattr(sample, "columns") and hasattr(sample, "iloc"))


def _column(table: Any, name: str) -> np.ndarray:
    """Column ``name`` of a table sample, 1-D; ProgrammingError ``bad_sample`` if it has none."""
    names = list(table.column_names) if hasattr(table, "column_names") else [str(c) for c in table.columns]
    if name not in names:
        raise ProgrammingError(
            f"the sample has no column {name!r} (it has {', '.join(map(repr, names)) or 'none'})", code="bad_sample"
        )
    if hasattr(table, "column_names"):
        return table.column(name).to_numpy(zero_copy_only=False)
    return table[name].to_numpy()


def _as_feed(values: np.ndarray, dtype: Any) -> np.ndarray:
    """``values`` in an ONNX input's numpy dtype: ``str`` objects for text, else a cast."""
    if dtype is np.object_:
        return np.array([str(v) for v in values.reshape(-1)], dtype=object).reshape(values.shape)
    try:
        return np.asarray(values, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ProgrammingError(f"the sample has values that are not numbers: {exc}", code="bad_sample") from None


def _prepare(estimator: Any, ort_model: Any, sample: Any, features: Optional[Sequence[str]]):
    """``(estimator_input, feeds, rows)``, or None where the check is skipped.

    A pipeline selecting columns by name gets one ``[rows, 1]`` feed per model input, from
    the table's column of that name; a model of one text per row (a text vectorizer first) the sample's texts;
    any other model one ``[rows, n]`` feed."""
    from modelsql.converters.sklearn import selects_columns_by_name

    names = ort_model.input_names
    sample = _at_most(sample, MAX_SAMPLE_ROWS)
    if selects_columns_by_name(estimator):
        if sample is None:
            return None
        if not _is_table(sample):
            raise ProgrammingError(
                f"the {type(estimator).__name__} selects columns by name: pass the sample as a pyarrow Table "
                "or pandas DataFrame with those columns",
                code="bad_sample",
            )
        feeds = {n: _as_feed(_column(sample, n).reshape(-1, 1), ort_model.input_dtypes[n]) for n in names}
        return _in_fit_order(estimator, sample), feeds, len(feeds[names[0]])
    if len(names) == 1 and len(ort_model.input_shapes[names[0]]) == 1 and ort_model.input_dtypes[names[0]] is np.object_:
        if sample is None:  # one text per row (a text vectorizer first): no default sample, as for named columns
            return None
        texts = [str(v) for v in np.asarray(sample, dtype=object).reshape(-1)]
        return texts, {names[0]: np.array(texts, dtype=object)}, len(texts)
    if len(names) != 1 or len(ort_model.input_shapes[names[0]]) != 2:
        raise NotSupportedError(
            f"cannot check a conversion with inputs {names}: expected one 2-D input", code="conversion_failed"
        )
    name = names[0]
    width, dtype = ort_model.input_shapes[name][1], ort_model.input_dtypes[name]
    if sample is None:
        if not isinstance(width, int) or dtype is np.object_:
            return None
        rows = np.random.default_rng(DEFAULT_SAMPLE_SEED).standard_normal((DEFAULT_SAMPLE_ROWS, width))
        return rows, {name: _as_feed(rows, dtype)}, DEFAULT_SAMPLE_ROWS
    if _is_table(sample):
        matrix = _table_matrix(estimator, sample, features)
        named = getattr(estimator, "feature_names_in_", None) is not None
        est_input = _in_fit_order(estimator, sample) if named else matrix
        return est_input, {name: _as_feed(matrix, dtype)}, len(matrix)
    rows = _rows(sample, width)
    return rows, {name: _as_feed(rows, dtype)}, len(rows)


def _at_most(sample: Any, limit: int) -> Any:
    """``sample`` (None, a table or an array-like), cut to ``limit`` seeded rows in their order."""
    if sample is None:
        return None
    if _is_table(sample):
        n = sample.num_rows if hasattr(sample, "num_rows") else len(sample)
    else:
        try:
            sample = np.asarray(sample)
        except (TypeError, ValueError):
            return sample  # _rows says what is wrong with it
        n = len(sample) if sample.ndim == 2 else 0
    if n <= limit:
        return sample
    keep = np.sort(np.random.default_rng(DEFAULT_SAMPLE_SEED).choice(n, limit, replace=False))
    if isinstance(sample, np.ndarray):
        return sample[keep]
    return sample.take(keep) if hasattr(sample, "column_names") else sample.iloc[keep]


def _rows(sample: Any, width: Any) -> np.ndarray:
    """An array-like sample as a 2-D array ``[rows, width]``; ProgrammingError ``bad_sample`` if it is not one."""
    try:
        rows = np.asarray(sample)
    except (TypeError, ValueError) as exc:
        raise ProgrammingError(f"the sample is not a 2-D array of rows: {exc}", code="bad_sample") from None
    rows = rows.reshape(1, -1) if rows.ndim == 1 else rows
    if rows.ndim != 2 or not len(rows) or (isinstance(width, int) and rows.shape[1] != width):
        raise ProgrammingError(
            f"the sample has shape {list(rows.shape)}; the model takes rows of {width} features", code="bad_sample"
        )
    return rows


def _in_fit_order(estimator: Any, table: Any) -> Any:
    """``table`` with just the estimator's ``feature_names_in_`` columns, in that order
    (scikit-learn refuses a table whose columns are in another order)."""
    fitted = getattr(estimator, "feature_names_in_", None)
    if fitted is None:
        return table
    names = [str(n) for n in fitted]
    for n in names:
        _column(table, n)  # ProgrammingError if missing
    return table.select(names) if hasattr(table, "column_names") else table[names]


def _table_matrix(estimator: Any, table: Any, features: Optional[Sequence[str]]) -> np.ndarray:
    """A table sample's feature columns, in model order, as one ``[rows, n]`` array."""
    names = list(features) if features is not None else getattr(estimator, "feature_names_in_", None)
    if names is None:
        raise ProgrammingError(
            "the sample is a table but the model's feature names are unknown: pass features, or the rows as an array",
            code="bad_sample",
        )
    return np.column_stack([_column(table, str(n)) for n in names])


# ------------------------------------------------------------------------------ running


def _pairs(estimator: Any, outputs: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``[(estimator method, ONNX output, is_label)]`` to compare (see :func:`check_conversion`)."""
    from sklearn.base import is_classifier, is_regressor

    pairs = []
    if "label" in outputs and hasattr(estimator, "predict"):
        pairs.append(("predict", "label", True))
    if "probabilities" in outputs and is_classifier(estimator) and hasattr(estimator, "predict_proba"):
        pairs.append(("predict_proba", "probabilities", False))
    if is_regressor(estimator) and ("prediction" in outputs or len(outputs) == 1):
        pairs.append(("predict", "prediction" if "prediction" in outputs else outputs[0], False))
    rest = [o for o in outputs if o != "label"]
    if not (is_classifier(estimator) or is_regressor(estimator)) and len(rest) == 1 and hasattr(estimator, "transform"):
        pairs.append(("transform", rest[0], False))
    return pairs


def _estimator_answers(estimator: Any, rows: Any, outputs: Sequence[str], *, default: bool) -> list[tuple]:
    """``[(method, output, values, is_label)]``, ``values`` the estimator's answer.

    Raises ProgrammingError ``bad_sample`` if the estimator fails on a user's sample;
    returns ``[]`` if it fails on the default sample."""
    answers = []
    for method, output, is_label in _pairs(estimator, outputs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "X does not have valid feature names" ...
                values = np.asarray(getattr(estimator, method)(rows))
        except Exception as exc:
            if default:
                return []
            raise ProgrammingError(
                f"{type(estimator).__name__}.{method} fails on the sample: {_first_line(exc)}", code="bad_sample"
            ) from None
        answers.append((method, output, values, is_label))
    return answers


def _run_rows(ort_model: Any, feeds: dict, rows: int) -> tuple[dict, np.ndarray, dict]:
    """Run ONNX Runtime over all rows; where a run fails, over each half, down to single rows.

    Returns:
        ``(outputs, ok, errors)``: ``outputs`` maps each output name to its values over
        the rows that ran (None if none did), ``ok`` is the bool ``[rows]`` mask of those
        rows, and ``errors`` maps each failed row to ONNX Runtime's reason.
    """
    ok = np.ones(rows, dtype=bool)
    errors: dict[int, str] = {}
    done: list[tuple[int, list]] = []
    stack = [(0, rows)]
    while stack:
        lo, hi = stack.pop()
        try:
            done.append((lo, ort_model.run({k: v[lo:hi] for k, v in feeds.items()})))
        except DataError as exc:
            if hi - lo > 1:
                stack += [((lo + hi) // 2, hi), (lo, (lo + hi) // 2)]
            else:
                ok[lo] = False
                errors[lo] = _ort_reason(exc)
    done.sort(key=lambda piece: piece[0])
    outputs = {
        name: np.concatenate([got[i] for _, got in done], axis=0) if done else None
        for i, name in enumerate(ort_model.output_names)
    }
    return outputs, ok, errors


# ------------------------------------------------------------------------------ comparing


def _check_declared(model: onnx.ModelProto, outs: dict, what: str) -> None:
    """Each output's rows have the shape the graph declares for them, where it declares one (PREDICT reads the
    declared shape: skl2onnx 1.20 declares a binary RidgeClassifier's scores in a pipeline ``[N, 2]`` and gives
    ``[N, 1]``, which every PREDICT would fail on).

    Raises:
        NotSupportedError: ``conversion_failed``, naming the output and both shapes.
    """
    for out in model.graph.output:
        got = outs.get(out.name)
        if got is None or not out.type.HasField("tensor_type") or not out.type.tensor_type.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in out.type.tensor_type.shape.dim][1:]
        if dims and all(d is not None for d in dims) and tuple(dims) != tuple(np.shape(got)[1:]):
            raise NotSupportedError(
                f"the ONNX conversion of the {what} declares output {out.name!r} of rows {dims} but gives rows "
                f"{list(np.shape(got)[1:])}: the converter's graph contradicts itself, and PREDICT could not read it",
                code="conversion_failed",
            )


def _per_row(values: np.ndarray, rows: int, source: str) -> np.ndarray:
    """``values`` as ``[rows, width]``; NotSupportedError naming ``source`` if it has not one row per input row."""
    if values.ndim == 0 or values.shape[0] != rows:
        raise NotSupportedError(
            f"{source} gives shape {list(values.shape)} for {rows} rows, not one row per input row",
            code="conversion_failed",
        )
    return values.reshape(rows, -1)


def _compare(answers: list, outs: dict, ok: np.ndarray, errors: dict, what: str) -> ConversionCheck:
    """Compare the estimator's answers with the ONNX outputs over the rows ONNX Runtime answered."""
    rows, ran = len(ok), np.flatnonzero(ok)
    mismatch = ~ok
    labels: Optional[tuple[np.ndarray, Optional[np.ndarray]]] = None
    max_diff = probability_diff = 0.0
    for method, output, values, is_label in answers:
        expected = _per_row(values, rows, f"{what}.{method}")
        got = expected[:0] if outs[output] is None else _per_row(outs[output], len(ran), f"the ONNX output {output!r}")
        if got.shape[1] != expected.shape[1]:
            raise NotSupportedError(
                f"the ONNX output {output!r} gives {got.shape[1]} values per row; {what}.{method} gives "
                f"{expected.shape[1]}",
                code="conversion_failed",
            )
        if is_label:
            onnx_labels = np.full(expected.shape, None, dtype=object)
            onnx_labels[ran] = got
            labels = (expected, onnx_labels)
            mismatch[ran] |= ~same_labels(expected[ran], got)
        else:
            diff = _max_abs_diff(expected[ran].astype(np.float64), got.astype(np.float64))
            max_diff = max(max_diff, diff)
            if method == "predict_proba":
                probability_diff = max(probability_diff, diff)
    mismatch[ran] &= ~_tied(answers, rows, ran)
    if labels is None:  # no label output: a mismatch is a failed row, shown with the first answer
        labels = (_per_row(answers[0][2], rows, what), None)
    compared = ", ".join(f"{m} vs {o}" for m, o, _, _ in answers)
    return ConversionCheck(rows, max_diff, int(mismatch.sum()), compared, _first_mismatch(mismatch, labels, errors),
                           probability_diff)


TIE = 1e-6
"""Two classes whose ``predict_proba`` lie this close tie: either label is the arg-max (a forest's 10 votes of 20,
float32 sums 0.49999994 and 0.50000006), so the labels of such a row may differ."""


def _tied(answers: list, rows: int, ran: np.ndarray) -> np.ndarray:
    """Bool ``[len(ran)]``: the rows ONNX Runtime ran whose two most probable classes tie (:data:`TIE`) in
    ``predict_proba``; all False without probabilities."""
    proba = next((values for method, _, values, _ in answers if method == "predict_proba"), None)
    if proba is None:
        return np.zeros(len(ran), dtype=bool)
    top = np.sort(_per_row(proba, rows, "predict_proba")[ran].astype(np.float64), axis=1)
    return (top[:, -1] - top[:, -2] <= TIE) if top.shape[1] > 1 else np.zeros(len(ran), dtype=bool)


def _first_mismatch(mismatch: np.ndarray, labels: tuple, errors: dict) -> Optional[tuple[int, str, str]]:
    """``(row, estimator label, ONNX label or error)`` of the first disagreeing row, as strings;
    ``labels`` is ``(estimator's [rows, k], ONNX's [rows, k] or None)``."""
    bad = np.flatnonzero(mismatch)
    if not len(bad):
        return None
    r = int(bad[0])
    got = f"an error ({errors[r]})" if r in errors else _label(labels[1][r])
    return r, _label(labels[0][r]), got


def same_labels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bool ``[rows]``: whether each row's labels agree (as numbers where both are, else as strings)."""
    if a.dtype.kind in "biuf" and b.dtype.kind in "biuf":
        return (a == b).all(axis=1)
    return (a.astype(str) == b.astype(str)).all(axis=1)


def _max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest ``|a - b|``; NaN on both sides counts 0, NaN on one side ``inf``."""
    if not a.size:
        return 0.0
    d = np.abs(a - b)
    d[np.isnan(a) & np.isnan(b)] = 0.0
    d[np.isnan(d)] = np.inf
    return float(d.max())


def _label(row: np.ndarray) -> str:
    """One row's label(s) or values for a message: ``1``, ``'setosa'``, ``[0, 1, 1]``, ``[188.2, 35.8]``."""
    items = [v.item() if hasattr(v, "item") else v for v in row]
    text = [f"{v:.7g}" if isinstance(v, float) else repr(v) for v in items]
    return text[0] if len(text) == 1 else f"[{', '.join(text)}]"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _ort_reason(exc: BaseException) -> str:
    """ONNX Runtime's own reason from a failed run ("Unknown Category and zeros = 0")."""
    text = _first_line(exc)
    return text.split("Status Message: ", 1)[-1].strip().rstrip(".") if "Status Message: " in text else text


def _mismatch_error(check: ConversionCheck, what: str) -> DataError:
    """The DataError ``conversion_mismatch`` for a check with disagreeing rows."""
    row, est, got = check.first_mismatch or (0, "?", "?")
    return DataError(
        f"the ONNX conversion of the {what} disagrees with scikit-learn on {check.label_mismatches} of "
        f"{check.rows} sample rows: row {row} is {est} in scikit-learn but {got} in ONNX Runtime; {_ACCEPT}",
        code="conversion_mismatch",
    )
