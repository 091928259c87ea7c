"""Splitting a fitted scikit-learn pipeline into one ONNX model per step (PRETZEL's white box).

PRETZEL (Lee et al., OSDI 2018) stores and serves a pipeline as its operators,
so that a featurizer several pipelines share is stored, loaded and computed
once. :func:`split_pipeline` walks a fitted ``Pipeline`` / ``FeatureUnion`` /
``ColumnTransformer`` (nested in any way) and converts each leaf estimator on
its own:

* ``Pipeline``: its steps in order (``"passthrough"`` / ``None`` skipped), each
  fed by the one before;
* ``FeatureUnion``: each branch fed by the union's input, then a ``Concat``
  step (:func:`concat_model`) joining their outputs on axis 1;
* ``ColumnTransformer`` over a numeric array: per transformer a column
  selection step (:func:`select_model`, a ``Gather`` on axis 1) feeding the
  transformer (``"passthrough"`` keeps the selection, ``"drop"`` is skipped),
  then a ``Concat`` step; the remainder is handled the same way;
* a text vectorizer (``TfidfVectorizer``, ``CountVectorizer``) or a linear
  head (logistic regression, linear SVM, ridge, ...): the exact converters of
  :mod:`modelsql.converters.text` (a head's weights become initializers, which the
  server memory-maps and shares); any other estimator:
  :func:`modelsql.converters.sklearn.from_sklearn`.

Each step's example input is the example pushed through scikit-learn itself,
so every converted step is checked against its estimator on those rows (the
largest absolute difference must stay within :data:`STEP_TOLERANCE`).
Conversions are cached per process by a digest of the pickled fitted estimator
and its input: importing 250 pipelines that share one fitted featurizer
converts it once.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper

from modelsql.converters.conversion_check import same_labels
from modelsql.errors import DataError, NotSupportedError, ProgrammingError

__all__ = ["SplitStep", "split_pipeline", "check_chain", "concat_model", "select_model", "STEP_TOLERANCE"]

STEP_TOLERANCE = 1e-4
"""Largest absolute difference accepted between a converted step and its estimator on the example rows
(relative to the output's magnitude when that exceeds 1)."""

Source = tuple[Optional[int], str]  # (step index, output name), or (None, pipeline input name)


@dataclass(frozen=True)
class SplitStep:
    """One step of a split pipeline.

    Attributes:
        path: where it sits in the scikit-learn object, e.g. ``"features.word"`` or ``"features.concat"``.
        model: the converted, checked ONNX model.
        feeds: step input name -> its source ``(step index, value name)``, or ``(None, pipeline input)``.
        kind: ``"sklearn"`` (a converted estimator) or ``"onnx"`` (a Concat or selection built here).
        source: ``"sklearn:<class>"`` or ``"modelsql:concat"`` / ``"modelsql:select"``.
        check: ``(rows, max abs difference, label mismatches)`` of the converted estimator against
            scikit-learn on the example rows; None for steps built here.
        features: the column names feeding a step that reads the (numeric) pipeline input, else None.
    """

    path: str
    model: onnx.ModelProto
    feeds: tuple[tuple[str, Source], ...]
    kind: str
    source: str
    check: Optional[tuple[int, float, int]] = None
    features: Optional[tuple[str, ...]] = None


_LOCK = threading.Lock()
_CONVERTED: "OrderedDict[str, onnx.ModelProto]" = OrderedDict()
_CACHE_SIZE = 64


def concat_model(widths: list[int], opset: int = 17) -> onnx.ModelProto:
    """``x0 .. x{k-1}`` (FLOAT ``[N, widths[i]]``) -> ``features`` (FLOAT ``[N, sum(widths)]``), one Concat on axis 1."""
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["N", w]) for i, w in enumerate(widths)]
    out = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", sum(widths)])
    node = helper.make_node("Concat", [i.name for i in inputs], ["features"], axis=1, name="concat")
    graph = helper.make_graph([node], "concat", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="modelsql")


def select_model(width: int, columns: list[int], opset: int = 17) -> onnx.ModelProto:
    """``input`` (FLOAT ``[N, width]``) -> ``selected`` (FLOAT ``[N, len(columns)]``): a Gather on axis 1."""
    idx = helper.make_tensor("columns", TensorProto.INT64, [len(columns)], [int(c) for c in columns])
    node = helper.make_node("Gather", ["input", "columns"], ["selected"], axis=1, name="select")
    graph = helper.make_graph(
        [node], "select", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("selected", TensorProto.FLOAT, ["N", len(columns)])], initializer=[idx],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="modelsql")


def _dense(x: Any) -> np.ndarray:
    return np.asarray(x.toarray() if hasattr(x, "toarray") else x)


def _is_text(est: Any) -> bool:
    from sklearn.feature_extraction.text import CountVectorizer

    return isinstance(est, CountVectorizer)  # TfidfVectorizer is a CountVectorizer


class _Splitter:
    """The walk of :func:`split_pipeline` (one instance per call): steps so far, and the input's name."""

    def __init__(self, input_name: str, features: Optional[tuple[str, ...]]):
        self.steps: list[SplitStep] = []
        self.input_name = input_name
        self.features = features

    def add(self, path: str, model, feeds, kind: str, source: str, check=None) -> int:
        reads_input = any(src[0] is None for _, src in feeds) and len(feeds) == 1
        features = self.features if reads_input and self.features and model.graph.input[0].type.tensor_type.elem_type \
            != onnx.TensorProto.STRING else None
        self.steps.append(SplitStep(path, model, tuple(feeds), kind, source, check, features))
        return len(self.steps) - 1

    def split(self, est: Any, x: Any, src: Source, path: str) -> tuple[Source, Any]:
        """Steps for ``est`` fed by ``src`` (whose example rows are ``x``): its output source and example."""
        from sklearn.compose import ColumnTransformer
        from sklearn.pipeline import FeatureUnion, Pipeline

        if isinstance(est, Pipeline):
            for name, sub in est.steps:
                if sub is None or sub == "passthrough":
                    continue
                src, x = self.split(sub, x, src, f"{path}.{name}" if path else name)
            return src, x
        if isinstance(est, FeatureUnion):
            return self.union(est, x, src, path)
        if isinstance(est, ColumnTransformer):
            return self.columns(est, x, src, path)
        return self.leaf(est, x, src, path)

    def union(self, est, x, src: Source, path: str) -> tuple[Source, Any]:
        if est.transformer_weights:
            raise NotSupportedError(f'FeatureUnion "{path}": transformer_weights are not supported; fold them '
                                    "into the branches", code="conversion_failed")
        outs = [self.split(t, x, src, f"{path}.{name}" if path else name)
                for name, t in est.transformer_list if t not in (None, "drop")]
        return self.concat(outs, path)

    def concat(self, outs: list[tuple[Source, Any]], path: str) -> tuple[Source, Any]:
        if len(outs) == 1:
            return outs[0]
        xs = [np.asarray(_dense(o[1]), dtype=np.float32) for o in outs]
        model = concat_model([a.shape[1] for a in xs])
        feeds = [(f"x{i}", o[0]) for i, o in enumerate(outs)]
        i = self.add(f"{path}.concat" if path else "concat", model, feeds, "onnx", "modelsql:concat")
        return (i, "features"), np.hstack(xs)

    def columns(self, est, x, src: Source, path: str) -> tuple[Source, Any]:
        _check_fitted(est, path)
        x = np.asarray(x)
        if x.dtype.kind not in "fiub" or x.ndim != 2:
            raise NotSupportedError(
                f'ColumnTransformer "{path}": only a ColumnTransformer over a numeric array is split into steps '
                "(select its columns by position); import it whole with import_model instead.",
                code="conversion_failed",
            )
        outs = []
        for name, trans, cols in est.transformers_:
            if trans == "drop":
                continue
            if any(isinstance(c, str) for c in np.atleast_1d(cols)):
                raise NotSupportedError(f'ColumnTransformer "{path}": transformer "{name}" selects columns by '
                                        "name; fit it on an array (columns by position)", code="conversion_failed")
            idx = np.arange(x.shape[1])[cols].tolist()
            if not idx:
                continue
            sub = f"{path}.{name}" if path else name
            sel = self.add(f"{sub}.select", select_model(x.shape[1], idx), [("input", src)], "onnx", "modelsql:select")
            part = ((sel, "selected"), x[:, idx])
            outs.append(part if trans == "passthrough" else self.split(trans, part[1], part[0], sub))
        return self.concat(outs, path)

    def leaf(self, est, x, src: Source, path: str) -> tuple[Source, Any]:
        _check_fitted(est, path)
        try:
            if not _is_text(est):
                np.asarray(x, dtype=np.float32)  # the rows the converted step will be fed
            produced = _dense(est.transform(x)) if hasattr(est, "transform") and not _is_predictor(est) else None
        except (ValueError, TypeError) as exc:
            raise _bad_example(est, path, exc) from None
        model = _convert_cached(est, x, self.input_name if src[0] is None else "input",
                                self.features if src[0] is None else None)
        check = _check_step(est, model, x, path)
        inp = model.graph.input[0].name
        i = self.add(path or type(est).__name__.lower(), model, [(inp, src)], "sklearn", f"sklearn:{type(est).__name__}",
                     check)
        out = model.graph.output[0].name
        return (i, out), produced


def _check_fitted(est: Any, path: str) -> None:
    """ProgrammingError ``not_fitted`` naming the part of the pipeline that is not fitted."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(est)
    except NotFittedError:
        raise ProgrammingError(f'step "{path or type(est).__name__}" ({type(est).__name__}) is not fitted: fit the '
                               "pipeline before importing it", code="not_fitted") from None
    except TypeError:
        pass  # not an estimator check_is_fitted knows ("passthrough" handled by the caller)


def _bad_example(est: Any, path: str, exc: BaseException) -> ProgrammingError:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ProgrammingError(f'step "{path or type(est).__name__}" ({type(est).__name__}) cannot run on the example '
                            f"rows: {text}. Give example_input rows of the kind the pipeline was fitted on.",
                            code="bad_sample")


def _is_predictor(est) -> bool:
    from sklearn.base import is_classifier, is_regressor

    return bool(is_classifier(est) or is_regressor(est))


def _convert(est: Any, x: Any, input_name: str, features) -> onnx.ModelProto:
    """A text vectorizer or a linear head: modelsql's exact graphs (:mod:`modelsql.converters.text`: a
    linear head's weights are initializers, shareable and memory-mapped); anything else: skl2onnx."""
    from modelsql.converters import sklearn as sk
    from modelsql.converters import text

    width = np.asarray(x).shape[1] if np.ndim(x) == 2 else None
    if _is_text(est):
        return text.text_featurizer_onnx(est, input_name=input_name, output_name="features")
    if text.supports(est):  # a linear classifier or regressor
        return text.linear_head_onnx(est, width, input_name, output_name="prediction")
    model, _ = sk.from_sklearn(est, feature_names=features, n_features=width, name="step")
    return model


def _convert_cached(est: Any, x: Any, input_name: str, features) -> onnx.ModelProto:
    try:
        key = hashlib.sha256(pickle.dumps((est, input_name, features, np.shape(x)[1:]), protocol=4)).hexdigest()
    except Exception:  # an estimator that cannot be pickled: convert it every time
        return _convert(est, x, input_name, features)
    with _LOCK:
        hit = _CONVERTED.get(key)
        if hit is not None:
            _CONVERTED.move_to_end(key)
            return hit
    model = _convert(est, x, input_name, features)
    with _LOCK:
        _CONVERTED[key] = model
        while len(_CONVERTED) > _CACHE_SIZE:
            _CONVERTED.popitem(last=False)
    return model


def _labels_differ(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The rows whose labels differ, as the whole model's check compares them (:func:`.conversion_check.same_labels`:
    numbers by value, so a classifier fitted on 0.0 / 1.0 agrees with its graph's int64 0 / 1)."""
    return np.flatnonzero(~same_labels(got.reshape(len(got), -1), want.reshape(len(want), -1)))


def _check_step(est: Any, model: onnx.ModelProto, x: Any, path: str) -> tuple[int, float, int]:
    """The converted step against its estimator on the example rows (ONNX Runtime vs scikit-learn):
    a predictor's labels (or predictions) and a transformer's output, within :data:`STEP_TOLERANCE`.

    Returns:
        ``(rows, max abs difference, label mismatches)``.

    Raises:
        DataError: ``conversion_mismatch``.
    """
    from modelsql.operators.backends.onnxruntime import OrtModel

    ort_model = OrtModel(model.SerializeToString(), f'step "{path}"', intra_op_threads=1)
    feed = np.asarray(x, dtype=object) if _is_text(est) else np.asarray(x, dtype=np.float32)
    outputs = [np.asarray(o) for o in ort_model.run({ort_model.input_names[0]: feed})]
    got = outputs[0]
    if hasattr(est, "classes_") and _is_predictor(est):
        want = np.asarray(est.predict(x))
        differ = _labels_differ(got.reshape(want.shape), want)
        bad = len(differ)
        ok, err = bad == 0, 0.0
        diff = f"{bad} of {len(want)} labels differ; first row {differ[0]}: {got.reshape(want.shape)[differ[0]]!r} " \
               f"instead of {want[differ[0]]!r}" if bad else ""
    else:
        want = np.asarray(est.predict(x) if _is_predictor(est) else _dense(est.transform(x)), dtype=np.float64)
        fitting = [o for o in outputs if o.size == want.size]  # a clusterer's label is not its first output
        if not fitting:
            raise DataError(f'Step "{path}" ({type(est).__name__}): no output of the converted ONNX graph has the '
                            f"shape of scikit-learn's answer {want.shape}.", code="conversion_mismatch")
        g = fitting[0].astype(np.float64).reshape(want.shape)
        rel = np.abs(g - want) / np.maximum(1.0, np.abs(want))
        err = float(np.max(rel)) if want.size else 0.0
        row = int(np.unravel_index(np.argmax(rel), rel.shape)[0]) if want.size else 0
        ok, bad = err <= STEP_TOLERANCE, 0
        diff = f"max relative difference {err:.3g} > {STEP_TOLERANCE}, first at row {row}"
    if not ok:
        raise DataError(f'Step "{path}" ({type(est).__name__}): the converted ONNX graph disagrees with '
                        f"scikit-learn on the example rows ({diff}).", code="conversion_mismatch")
    return len(want), err, bad


def check_chain(estimator: Any, steps: list[SplitStep], example_input: Any, input_name: str, *,
                accept_mismatch: bool = False) -> tuple[int, float, int]:
    """The split steps run one after another in ONNX Runtime (as PREDICT runs them, float32 between
    steps) against the whole estimator on the example rows: drift that builds up across steps shows
    here, not in the per-step checks (each fed scikit-learn's own float64 output of the step before).

    Compared: labels against ``predict`` (a classifier), ``probabilities`` against ``predict_proba``,
    a regressor's prediction against ``predict``, or the last output against ``transform``.

    Returns:
        ``(rows, max abs difference, label mismatches)``.

    Raises:
        DataError: ``conversion_mismatch`` when labels differ (unless ``accept_mismatch``), naming the
            first row and both labels.
    """
    from modelsql.operators.backends.onnxruntime import OrtModel

    text = isinstance(example_input, (list, tuple)) and example_input and isinstance(example_input[0], str)
    values: dict[tuple[Optional[int], str], np.ndarray] = {
        (None, input_name): np.asarray(example_input, dtype=object if text else np.float32)
    }
    for i, st in enumerate(steps):
        m = OrtModel(st.model.SerializeToString(), f'step "{st.path}"', intra_op_threads=1)
        outs = m.run({inp: values[src] for inp, src in st.feeds})
        values.update({(i, name): arr for name, arr in zip(m.output_names, outs)})
    last = len(steps) - 1
    got = {name: arr for (i, name), arr in values.items() if i == last}
    rows, diff, bad = len(values[(None, input_name)]), 0.0, 0
    if _is_predictor(estimator) and hasattr(estimator, "classes_") and "label" in got:
        want = np.asarray(estimator.predict(example_input))
        labels = got["label"].reshape(want.shape)
        differ = _labels_differ(labels, want)
        bad = len(differ)
        if bad and not accept_mismatch:
            r = int(differ[0])
            raise DataError(f"the split pipeline's labels differ from the {type(estimator).__name__}'s on {bad} of "
                            f"{rows} example rows; first row {r}: {labels[r]!r} instead of {want[r]!r} (float32 "
                            "between steps). Pass accept_mismatch=True to import it anyway (the count is kept).",
                            code="conversion_mismatch")
        if "probabilities" in got and hasattr(estimator, "predict_proba"):
            want_p = np.asarray(estimator.predict_proba(example_input), dtype=np.float64)
            if want_p.shape == got["probabilities"].shape:
                diff = float(np.max(np.abs(got["probabilities"] - want_p)))
    elif _is_predictor(estimator):
        want = np.asarray(estimator.predict(example_input), dtype=np.float64)
        diff = float(np.max(np.abs(_output_like(got, want, estimator) - want)))
    elif hasattr(estimator, "transform"):
        want = _dense(estimator.transform(example_input)).astype(np.float64)
        diff = float(np.max(np.abs(_output_like(got, want, estimator) - want)))
    return rows, diff, bad


def _output_like(got: dict[str, np.ndarray], want: np.ndarray, estimator: Any) -> np.ndarray:
    """The last step's output holding as many values as scikit-learn's answer (a clusterer's ``label`` is not its
    first output), as float64 in that shape.

    Raises:
        DataError: ``conversion_mismatch`` when no output does.
    """
    for name in ("label", *got):
        if name in got and got[name].size == want.size:
            return got[name].astype(np.float64).reshape(want.shape)
    raise DataError(f"no output of the split {type(estimator).__name__}'s last step has the shape of scikit-learn's "
                    f"answer {want.shape}.", code="conversion_mismatch")


def split_pipeline(estimator: Any, example_input: Any, *, input_name: str = "input",
                   features: Optional[tuple[str, ...]] = None) -> list[SplitStep]:
    """The steps of ``estimator``, converted and checked (see the module docstring).

    Args:
        estimator: a fitted ``Pipeline``, ``FeatureUnion``, ``ColumnTransformer`` or single estimator.
        example_input: rows it accepts: a 2-D numeric array ``[n, F]``, or a sequence of ``n`` strings
            for a text pipeline (a vectorizer first). At least one row.
        input_name: the name of the pipeline input (the column PREDICT feeds, for a text input).
        features: column names of a numeric input, in order.

    Returns:
        the steps in an order where every step comes after the steps that feed it.

    Raises:
        ProgrammingError: no example rows (``example_missing``).
        NotSupportedError: a part that cannot be split or converted (``conversion_failed``).
        DataError: a converted step disagrees with its estimator (``conversion_mismatch``).
    """
    if example_input is None or len(example_input) == 0:
        raise ProgrammingError("import_pipeline needs example_input: at least one row the pipeline accepts "
                               "(each step is converted for, and checked on, those rows pushed through it)",
                               code="example_missing")
    if not isinstance(input_name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", input_name):
        raise ProgrammingError(f"input_name must be a column name (letters, digits and underscores, starting with a "
                               f"letter), not {input_name!r}", code="invalid_name")
    if features is not None and len(set(features)) != len(features):
        twice = sorted({f for f in features if list(features).count(f) > 1})
        raise ProgrammingError(f"features names {twice[0]!r} more than once", code="duplicate_feature")
    splitter = _Splitter(input_name, features)
    x = list(example_input) if isinstance(example_input, (list, tuple)) and isinstance(example_input[0], str) \
        else example_input
    splitter.split(estimator, x, (None, input_name), "")
    return splitter.steps
