"""scikit-learn estimators and pipelines to ONNX, through skl2onnx.

A fitted estimator becomes an ONNX graph with one input and named outputs:

* input ``"input"``: ``FLOAT`` of shape ``["N", n_features]`` (float32 rows);
* classifiers: ``"label"`` (shape ``["N"]``, INT64 or STRING like the training
  labels) and ``"probabilities"`` (``FLOAT`` ``["N", n_classes]``); a matrix,
  never skl2onnx's ZipMap list of dicts;
* regressors: ``"prediction"`` (``FLOAT`` ``["N", 1]`` as skl2onnx emits it, or
  ``["N", k]`` for a regressor predicting ``k > 1`` targets: skl2onnx declares
  ``[N, 1]`` for trees, MLPs and bagging, whose graphs return ``[N, k]`` or
  ``[N * k, 1]``; the declaration is corrected and the latter reshaped);
* multi-output classifiers (``predict`` gives ``[N, k]``) are converted only if
  skl2onnx's outputs give one row per input row (a ``label`` of ``[N, k]``);
  skl2onnx's multi-output trees and k-NN (probabilities ``[k, N, c]``),
  ``MultiOutputClassifier`` (a sequence of tensors) and multi-label MLPs (label
  declared ``[N]``) are refused at conversion;
* anything else (transformers, clusterers): skl2onnx's output names, unchanged.

Translating a classical ML pipeline into a tensor graph is the first step of
"neural translation" of pipelines (Yu et al., 2019; the Hummingbird line of
work): once a pipeline is a graph, modelsql can fuse, share and fine-tune it.
skl2onnx is imported lazily: it is an optional dependency
(``pip install 'modelsql[sklearn]'``).
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.converters import text
from modelsql.converters.graph_edit import BATCH_DIM, dedupe_opsets, name_batch_dim, rename_value
from modelsql.converters.label_values import with_label_values
from modelsql.onnxformat.load import check_model

__all__ = ["from_sklearn", "is_sklearn_estimator", "DEFAULT_OPSET", "ML_OPSET"]

DEFAULT_OPSET = 17
"""Default-domain opset of converted models (supported by onnxruntime >= 1.14)."""

ML_OPSET = 3
"""``ai.onnx.ml`` opset of converted models (TreeEnsemble*/LinearClassifier v3 and earlier)."""

_INSTALL_HINT = "pip install 'modelsql[sklearn]'"


def is_sklearn_estimator(obj: Any) -> bool:
    """True for scikit-learn estimators (and pipelines), without importing scikit-learn.

    An object qualifies if it has ``fit`` and ``get_params`` and its class comes
    from a module named ``sklearn...``.
    """
    cls = type(obj)
    return (
        hasattr(obj, "fit")
        and hasattr(obj, "get_params")
        and (cls.__module__ or "").split(".")[0] == "sklearn"
        and not isinstance(obj, type)
    )


def _final_step(estimator: Any) -> Any:
    """The last estimator of a (possibly nested) Pipeline, or the estimator itself."""
    while hasattr(estimator, "steps") and estimator.steps:
        estimator = estimator.steps[-1][1]
    return estimator


def _nested(estimator: Any) -> Iterator[Any]:
    """``estimator`` and every estimator inside it, depth first: a pipeline's steps, a FeatureUnion's members, a
    (fitted) ColumnTransformer's parts."""
    stack = [estimator]
    while stack:
        est = stack.pop()
        yield est
        inside = [*(getattr(est, "steps", None) or []), *(getattr(est, "transformer_list", None) or []),
                  *((name, part) for name, part, _ in getattr(est, "transformers_", None) or [])]
        stack += [part for _, part in inside if hasattr(part, "get_params") and not isinstance(part, str)]


def _names_of(cols: Any) -> Optional[list[str]]:
    """The columns a ColumnTransformer part selects, when it selects them by name (one name, or a list of them);
    None when it selects them otherwise (positions, a mask, a callable)."""
    names = [cols] if isinstance(cols, str) else list(cols) if isinstance(cols, (list, tuple)) else None
    return names if names is not None and all(isinstance(c, str) for c in names) else None


def selects_columns_by_name(estimator: Any) -> Optional[dict[str, set[str]]]:
    """For an estimator containing a ColumnTransformer that selects columns by name:
    ``{"text": {columns fed to an encoder fitted on strings}}``; else None."""
    from sklearn.compose import ColumnTransformer

    found: Optional[dict[str, set[str]]] = None
    for est in _nested(estimator):
        for _, trans, cols in est.transformers_ if isinstance(est, ColumnTransformer) else []:
            names = _names_of(cols)
            if names:
                found = found or {"text": set()}
                found["text"].update(col for col, text in zip(names, _fitted_on_text(trans)) if text)
    return found


def _text_by_position(estimator: Any) -> Optional[str]:
    """The name of a ColumnTransformer part that reads text columns chosen by position (fitted on an array of
    objects), or None: one ONNX input holds one type, so such a pipeline's text and numbers cannot share it."""
    from sklearn.compose import ColumnTransformer

    for est in _nested(estimator):
        for part, trans, cols in est.transformers_ if isinstance(est, ColumnTransformer) else []:
            if _names_of(cols) is None and not isinstance(trans, str) and any(_fitted_on_text(trans)):
                return str(part)
    return None


def _fitted_on_text(trans: Any) -> list[bool]:
    """Per column a ColumnTransformer's part reads: whether it was fitted on strings (an encoder's categories,
    an imputer's filling values are text; a text vectorizer reads text); a pipeline's first step tells, a
    FeatureUnion's members together."""
    steps = getattr(trans, "steps", None)
    if steps:
        return _fitted_on_text(steps[0][1])
    members = [_fitted_on_text(t) for _, t in getattr(trans, "transformer_list", None) or [] if hasattr(t, "get_params")]
    if members:  # a FeatureUnion: its members read the same columns
        return [any(m[i] for m in members if i < len(m)) for i in range(max(map(len, members)))]
    if hasattr(trans, "build_analyzer"):  # a text vectorizer (CountVectorizer, TfidfVectorizer): one text column
        return [True]
    categories = getattr(trans, "categories_", None)
    if categories is not None:
        return [bool(len(cats)) and isinstance(cats[0], str) for cats in categories]
    statistics = getattr(trans, "statistics_", None)  # SimpleImputer's
    return [isinstance(v, str) for v in statistics] if statistics is not None else []


def _n_outputs(final: Any, regressor: bool) -> int:
    """Number of targets ``final`` predicts per row: the width of ``predict`` on one row of
    zeros (``[1, k]`` -> k, ``[1]`` -> 1); if that fails, a regressor's ``n_outputs_``
    (a classifier's can count classes, as MLPClassifier's does); else 1."""
    n = getattr(final, "n_features_in_", None)
    if n is not None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "X does not have valid feature names" ...
                shape = np.shape(final.predict(np.zeros((1, int(n)))))
            return int(shape[1]) if len(shape) == 2 else 1
        except Exception:  # a step that needs other inputs than zeros: fall back
            pass
    k = getattr(final, "n_outputs_", None) if regressor else None
    return int(k) if isinstance(k, (int, np.integer)) and k > 0 else 1


def _dims(value: onnx.ValueInfoProto) -> Optional[list]:
    """The declared dims of a tensor value (int, name or None each); None if not a tensor or rank unknown."""
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in value.type.tensor_type.shape.dim
    ]


def _shape_text(dims: list) -> str:
    """``[3, ?, 3]``: dims for a message, ``?`` where unknown."""
    return f"[{', '.join('?' if d is None else str(d) for d in dims)}]"


def _unused_name(model: onnx.ModelProto, base: str) -> str:
    """``base``, or ``base_2``, ``base_3`` ..., whichever no value or node of the main graph uses."""
    g = model.graph
    used = {n for node in g.node for n in list(node.input) + list(node.output) + [node.name]}
    used |= {v.name for v in list(g.input) + list(g.output) + list(g.value_info)} | {t.name for t in g.initializer}
    name, i = base, 1
    while name in used:
        i += 1
        name = f"{base}_{i}"
    return name


def _reshape_prediction(model: onnx.ModelProto, k: int) -> None:
    """Make the graph output ``prediction`` of a regressor predicting ``k`` targets
    return and declare ``[N, k]``; a no-op if it is declared ``[batch, k]`` already.

    skl2onnx declares ``[N, 1]`` for all of these. A ``TreeEnsembleRegressor`` with
    ``n_targets = k`` (trees, forests, extra trees) returns ``[N, k]``: only the
    declaration changes. An MLP's final ``Reshape`` to ``[-1, 1]`` returns ``[N * k, 1]``:
    it reshapes to ``[-1, k]`` instead. Anything else (bagging's ``[N * k, 1]``) gets a
    final ``Reshape`` to ``[-1, k]``; all of them are row-major, so rows keep their values.
    """
    out = model.graph.output[0]
    dims = _dims(out)
    if dims is not None and len(dims) == 2 and not isinstance(dims[0], int) and dims[1] == k:
        return
    g = model.graph
    producer = next((n for n in g.node if "prediction" in n.output), None)
    if producer is not None and producer.op_type == "Reshape" and _constant(model, producer.input[1]) == [-1, 1]:
        old = producer.input[1]
        producer.input[1] = _add_shape(model, k)
        if not any(old in n.input for n in g.node):
            g.initializer.remove(next(t for t in g.initializer if t.name == old))
    elif not (
        producer is not None and producer.op_type == "TreeEnsembleRegressor" and _int_attr(producer, "n_targets") == k
    ):
        raw = _unused_name(model, "prediction_unshaped")
        rename_value(model, "prediction", raw)
        reshape = helper.make_node("Reshape", [raw, _add_shape(model, k)], ["prediction"])
        reshape.name = _unused_name(model, "Reshape_prediction")
        g.node.append(reshape)
    for v in [v for v in g.value_info if v.name == "prediction"]:
        g.value_info.remove(v)
    g.output[0].CopyFrom(helper.make_tensor_value_info("prediction", out.type.tensor_type.elem_type, [BATCH_DIM, k]))


def _int_attr(node: onnx.NodeProto, name: str) -> Optional[int]:
    """An INT attribute of ``node``, or None."""
    return next((int(a.i) for a in node.attribute if a.name == name and a.type == onnx.AttributeProto.INT), None)


def _constant(model: onnx.ModelProto, name: str) -> Optional[list]:
    """The values of initializer ``name`` as a flat list, or None if it is not one."""
    t = next((t for t in model.graph.initializer if t.name == name), None)
    return None if t is None else numpy_helper.to_array(t).reshape(-1).tolist()


def _add_shape(model: onnx.ModelProto, k: int) -> str:
    """Add an INT64 initializer ``[-1, k]`` (a Reshape target) and return its name."""
    name = _unused_name(model, "prediction_shape")
    model.graph.initializer.append(numpy_helper.from_array(np.array([-1, k], dtype=np.int64), name))
    return name


def _check_multi_output_classifier(model: onnx.ModelProto, k: int, cls_name: str) -> None:
    """Refuse a classifier predicting ``k > 1`` targets unless each output is a tensor with
    the batch on axis 0 and ``label`` is ``[N, k]``.

    Raises:
        NotSupportedError: code ``conversion_failed``, naming the output and its shape.
    """
    for out in model.graph.output:
        dims = _dims(out)
        if dims is None:
            problem = "is not a tensor" if not out.type.HasField("tensor_type") else "has no declared shape"
        elif not dims or isinstance(dims[0], int):
            problem = f"has shape {_shape_text(dims)}, not one row per input row"
        elif out.name == "label" and (len(dims) != 2 or dims[1] != k):
            problem = f"is declared with shape {_shape_text(dims)}, not [N, {k}]"
        else:
            continue
        raise NotSupportedError(
            f"skl2onnx cannot convert the {cls_name} predicting {k} targets per row: its output {out.name!r} "
            f"{problem}; import one classifier per target instead",
            code="conversion_failed",
        )


def _bind_inputs_to_columns(model: onnx.ModelProto, columns: Sequence[str]) -> None:
    """One input per fitted column: named exactly as the column, and only those the graph reads.

    skl2onnx turns characters it does not take in names into ``_`` (``"a/b"`` -> ``a_b``, and a real
    ``a_b`` then -> ``a_b1``), so PREDICT would bind by the changed name, possibly to another column:
    the inputs get their columns' names back (ONNX and ONNX Runtime take any string). Columns the
    ``ColumnTransformer`` drops stay graph inputs in skl2onnx's graph; unread, they are removed, so a
    table needs only the columns the pipeline uses.
    """
    init = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in init]
    if len(inputs) != len(columns):
        return  # not the one-input-per-column graph this expects: leave it as converted
    taken = {x for node in model.graph.node for x in node.output} | init
    for value, column in zip(inputs, columns):
        if value.name != column:
            if column in taken:
                raise NotSupportedError(
                    f'the pipeline\'s column "{column}" has the name of a value inside its ONNX graph; rename the '
                    "column before fitting", code="conversion_failed",
                )
            rename_value(model, value.name, column)
    read = {x for node in model.graph.node for x in node.input} | {o.name for o in model.graph.output}
    for subgraph_reads in _subgraph_inputs(model):
        read |= subgraph_reads
    unused = [v for v in model.graph.input if v.name not in init and v.name not in read]
    if len(unused) < len(inputs):
        for v in unused:
            model.graph.input.remove(v)


def _subgraph_inputs(model: onnx.ModelProto) -> Iterator[set[str]]:
    """The names each subgraph of a main-graph node reads, one set per subgraph."""
    for node in model.graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                yield {x for n in g.node for x in n.input}


def _require_sklearn() -> None:
    """Raise ``missing_dependency`` unless scikit-learn and skl2onnx can be imported."""
    try:
        from skl2onnx import convert_sklearn, get_latest_tested_opset_version  # noqa: F401
        from skl2onnx.common.data_types import FloatTensorType  # noqa: F401
        from sklearn.base import is_classifier, is_regressor  # noqa: F401
        from sklearn.exceptions import NotFittedError  # noqa: F401
        from sklearn.utils.validation import check_is_fitted  # noqa: F401
    except ImportError as exc:
        raise NotSupportedError(
            f"converting scikit-learn models needs scikit-learn and skl2onnx ({exc}): {_INSTALL_HINT}",
            code="missing_dependency",
        ) from None


def _check_fitted(estimator: Any, cls_name: str) -> None:
    """Raise ``not_fitted`` for an unfitted estimator, ``unsupported_model`` for a non-estimator."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(estimator)
    except NotFittedError:
        raise ProgrammingError(
            f"the {cls_name} is not fitted: call fit() before importing it", code="not_fitted"
        ) from None
    except TypeError as exc:
        raise ProgrammingError(f"{cls_name} is not a scikit-learn estimator: {exc}", code="unsupported_model") from None


def _text_model(estimator: Any, **kwargs: Any) -> onnx.ModelProto:
    """modelsql's own conversion of an estimator :func:`text.supports` accepts, with input ``"input"``."""
    from modelsql.converters import text

    model = text.convert(estimator, input_name="input", **kwargs)
    assert model is not None, "text.convert refused an estimator text.supports accepts"
    return model


def _feature_count(estimator: Any, n_features: Optional[int], cls_name: str) -> int:
    """The estimator's number of input features: its ``n_features_in_``, else ``n_features``."""
    fitted_n = getattr(estimator, "n_features_in_", None)
    if fitted_n is None:
        if n_features is None:
            raise ProgrammingError(
                f"the number of input features of the {cls_name} is unknown: pass n_features",
                code="n_features_required",
            )
        return int(n_features)
    n = int(fitted_n)
    if n_features is not None and int(n_features) != n:
        raise ProgrammingError(
            f"n_features={n_features} but the {cls_name} was fitted on {n} features",
            code="feature_mismatch",
        )
    return n


def _feature_names(
    estimator: Any, feature_names: Optional[Sequence[str]], n: int, cls_name: str
) -> Optional[tuple[str, ...]]:
    """The feature names from ``feature_names_in_``, else ``feature_names``, else None; checked against ``n``."""
    features: Optional[tuple[str, ...]] = None
    fitted_names = getattr(estimator, "feature_names_in_", None)
    if fitted_names is not None:
        features = tuple(str(f) for f in fitted_names)
    elif feature_names is not None:
        features = tuple(str(f) for f in feature_names)
    if features is not None and len(features) != n:
        raise ProgrammingError(
            f"{len(features)} feature names given but the {cls_name} takes {n} features",
            code="feature_mismatch",
        )
    return features


def _column_input_types(
    by_name: dict[str, set[str]], features: Optional[tuple[str, ...]], cls_name: str
) -> list[tuple[str, Any]]:
    """skl2onnx's initial types for a pipeline selecting columns by name: one ``[N, 1]`` input per column."""
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    if features is None:
        raise ProgrammingError(
            f"the {cls_name} selects columns by name but has no feature_names_in_: fit it on a table "
            "(a pyarrow Table or DataFrame) so its column names are known",
            code="feature_names_required",
        )
    # One [N, 1] input per column, named after it: PREDICT binds each to its column,
    # and skl2onnx can follow the ColumnTransformer's selection by name.
    return [
        (f, StringTensorType([None, 1]) if f in by_name["text"] else FloatTensorType([None, 1])) for f in features
    ]


def _convert(
    estimator: Any, name: str, initial_types: list[tuple[str, Any]], classifier: bool, cls_name: str
) -> onnx.ModelProto:
    """Run skl2onnx (no ZipMap for a classifier), its failures raised as ``conversion_failed``."""
    from skl2onnx import convert_sklearn, get_latest_tested_opset_version

    # an entry for the final step, even empty, also keeps skl2onnx's Pipeline parser from asking for a ZipMap
    options = {id(_final_step(estimator)): {"zipmap": False} if _has_zipmap(estimator) else {}} if classifier else None
    target = {"": min(DEFAULT_OPSET, get_latest_tested_opset_version()), "ai.onnx.ml": ML_OPSET}
    functions: tuple[Optional[dict], Optional[dict]] = (None, None)
    if _has_text_vectorizer(estimator):  # modelsql's exact featurizer (text.py), not skl2onnx's approximation
        functions = text.skl2onnx_functions()
        target[""] = max(target[""], text.OPSET)
    try:
        model = convert_sklearn(estimator, name, initial_types=initial_types, options=options, target_opset=target,
                                custom_conversion_functions=functions[0], custom_shape_calculators=functions[1])
    except Exception as exc:  # skl2onnx raises RuntimeError, MissingShapeCalculator, NameError ...
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotSupportedError(
            f"skl2onnx cannot convert the {cls_name}: {msg}", code="conversion_failed"
        ) from None
    return model


def _has_text_vectorizer(estimator: Any) -> bool:
    """Whether a CountVectorizer or TfidfVectorizer sits anywhere in ``estimator`` (a pipeline's steps, a
    ColumnTransformer's parts, a FeatureUnion's members)."""
    from sklearn.feature_extraction.text import CountVectorizer

    return any(isinstance(est, CountVectorizer) for est in _nested(estimator))  # (TfidfVectorizer is one)


def _has_zipmap(estimator: Any) -> bool:
    """Whether skl2onnx's converter of the final step has a ZipMap to turn off (LinearSVC's converter returns
    tensors already and refuses the option). True for a converter skl2onnx does not list (a user's registered
    one)."""
    from skl2onnx._supported_operators import sklearn_operator_name_map
    from skl2onnx.common._registration import get_converter

    alias = sklearn_operator_name_map.get(type(_final_step(estimator)))
    if alias is None:
        return True
    try:
        allowed = get_converter(alias).get_allowed_options()
    except (KeyError, ValueError, AttributeError):
        return True
    return allowed is None or "zipmap" in allowed


def _name_outputs(model: onnx.ModelProto, classifier: bool, regressor: bool) -> None:
    """Rename the outputs to ``label``/``probabilities`` or ``prediction``, and name every batch dim."""
    outputs = [o.name for o in model.graph.output]
    if classifier and len(outputs) == 2:
        for old, new in zip(outputs, ("label", "probabilities")):
            rename_value(model, old, new)
    elif regressor and len(outputs) == 1:
        rename_value(model, outputs[0], "prediction")
    for v in list(model.graph.input) + list(model.graph.output):
        name_batch_dim(v)


def _shape_targets(model: onnx.ModelProto, estimator: Any, classifier: bool, regressor: bool, cls_name: str) -> None:
    """For ``k > 1`` targets per row: reshape a regressor's ``prediction``, or check a classifier's outputs."""
    k = _n_outputs(_final_step(estimator), regressor) if classifier or regressor else 1
    if regressor and k > 1 and len(model.graph.output) == 1:
        _reshape_prediction(model, k)
    elif classifier and k > 1:
        _check_multi_output_classifier(model, k, cls_name)


def from_sklearn(
    estimator: Any,
    *,
    feature_names: Optional[Sequence[str]] = None,
    n_features: Optional[int] = None,
    name: str = "model",
) -> tuple[onnx.ModelProto, Optional[tuple[str, ...]]]:
    """Convert a fitted scikit-learn estimator or Pipeline to ONNX.

    Args:
        estimator: a fitted estimator or ``Pipeline``.
        feature_names: column names for the input's features, used when the
            estimator has no ``feature_names_in_`` (fitted on a plain array).
        n_features: the number of input features, used only when the estimator
            has no ``n_features_in_``; must agree with it otherwise.
        name: the ONNX graph name.

    Returns:
        ``(model, features)``: the checked ModelProto (see the module docstring
        for its inputs and outputs) and the feature names (from
        ``feature_names_in_``, else ``feature_names``, else None).

    Raises:
        NotSupportedError: code ``missing_dependency`` if scikit-learn or skl2onnx is
            not installed; code ``conversion_failed`` if skl2onnx cannot convert it, or
            converts a multi-output classifier to outputs without one row per input row.
        ProgrammingError: code ``not_fitted`` for an unfitted estimator;
            ``n_features_required`` if the feature count is unknown;
            ``feature_mismatch`` if the names or ``n_features`` disagree with it.
    """
    model, features = _convert_estimator(estimator, feature_names, n_features, name)
    if is_classifier_fitted_on_booleans(estimator):  # BigQuery ML predicts a BOOL label for a BOOL target
        model = with_label_values(model, "label", [False, True])
    return model, features


def _convert_estimator(estimator: Any, feature_names: Optional[Sequence[str]], n_features: Optional[int], name: str
                       ) -> tuple[onnx.ModelProto, Optional[tuple[str, ...]]]:
    """:func:`from_sklearn`'s conversion by skl2onnx (or modelsql's own text featurizers and linear heads)."""
    _require_sklearn()
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.base import is_classifier, is_regressor

    from modelsql.converters import text  # exact text featurizers and initializer-based linear heads (PRETZEL)

    cls_name = type(estimator).__name__
    _check_fitted(estimator, cls_name)
    if text.supports(estimator) and not hasattr(estimator, "n_features_in_"):  # string input: a text featurizer
        return _text_model(estimator), None
    n = _feature_count(estimator, n_features, cls_name)
    features = _feature_names(estimator, feature_names, n, cls_name)
    if text.supports(estimator):  # a linear head: MatMul + Add, weights as initializers
        return _text_model(estimator, n_features=n, regressor_output="prediction"), features

    classifier = bool(is_classifier(estimator))
    regressor = bool(is_regressor(estimator))
    initial_types: list[tuple[str, Any]] = [("input", FloatTensorType([None, n]))]
    by_name = selects_columns_by_name(estimator)
    if by_name:
        initial_types = _column_input_types(by_name, features, cls_name)
        features = None
    elif (by_position := _text_by_position(estimator)) is not None:
        raise NotSupportedError(
            f"the {cls_name}'s ColumnTransformer part {by_position!r} reads text columns chosen by "
            "position (it was fitted on an array of objects), and one ONNX input holds one type: fit the pipeline on "
            "a pandas DataFrame or a pyarrow Table, whose named columns each become an input of their own.",
            code="conversion_failed")
    model = _convert(estimator, name, initial_types, classifier, cls_name)
    dedupe_opsets(model)
    if by_name:
        _bind_inputs_to_columns(model, [column for column, _ in initial_types])
    _name_outputs(model, classifier, regressor)
    _shape_targets(model, estimator, classifier, regressor, cls_name)
    check_model(model, f"the ONNX graph converted from the {cls_name}")
    return model, features


def is_classifier_fitted_on_booleans(estimator: Any) -> bool:
    """Whether a single-output classifier was fitted on booleans (``classes_`` ``[False, True]``, or one of them
    alone): its converted label output then holds their 0 / 1, which is each one's index in ``[False, True]``."""
    classes = getattr(_final_step(estimator), "classes_", None)
    return (isinstance(classes, np.ndarray) and classes.dtype == np.bool_ and classes.ndim == 1
            and classes.tolist() in ([False, True], [False], [True]))
