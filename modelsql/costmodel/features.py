"""The feature vector of one run (a model, a batch size, a backend configuration) that the learned cost
model reads: program features in the manner of Mantis (Chun et al., "Mantis: Predicting System
Performance through Program Analysis and Modeling", 2010) and of nn-Meter (Zhang et al., MobiSys 2021:
per-operator-class work as the unit of a DL latency predictor).

:func:`model_features` gives the static part of a model at a batch size: the per-operator-class node
counts, FLOPs and bytes of :func:`modelsql.analyses.cost_features.cost_features` (less the nodes the backend
folds at load), the kernels that run on every call per class (the per-call overhead of a runtime is per
kernel), the graph's inputs and outputs, the bytes of one-row (GEMV) products, plus the work of the
``ai.onnx.ml`` operators that ONNX shape inference cannot see (tree ensembles, linear models: scikit-
learn pipelines). :func:`row` adds the run's :class:`Config` and lays everything out in the fixed
order :data:`FEATURES`, whose meaning and unit each name states (:data:`FEATURE_DOCS`). Every feature
is a physical quantity of one run (``run()`` call); none is standardized or logged here, that is the
model's business (:mod:`modelsql.costmodel.mantis`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx

from modelsql.errors import DataError, ProgrammingError
from modelsql.analyses.cost_features import OP_CLASSES, cost_features

__all__ = ["BACKENDS", "DEVICES", "TARGETS", "PRODUCT_CLASSES", "MEMORY_CLASSES", "FEATURES", "FEATURE_DOCS",
           "Config", "model_features", "row", "matrix", "target_column"]

BACKENDS = ("onnxruntime", "tvm")
"""Backends a configuration may name."""
DEVICES = ("cpu", "cuda")
"""Devices a configuration may name."""
TARGETS = tuple(f"{b}_{d}" for d in DEVICES for b in BACKENDS)
"""``backend_device`` pairs; each has a one-hot feature ``on_<target>``."""

PRODUCT_CLASSES = ("conv", "gemm", "matmul")
"""Operator classes with multiply-accumulate FLOPs (compute-bound at large sizes)."""
MEMORY_CLASSES = ("elementwise", "normalization", "reduction", "data", "other")
"""Operator classes counted one operation per output element (memory-bound)."""

KERNEL_CLASSES = ("conv", "dense", *MEMORY_CLASSES)
"""Classes of the per-call node counts (``<class>_kernels``): convolutions, dense products (Gemm, MatMul and
their variants) and the memory-bound classes."""
_CONVS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv"})
_DENSE = frozenset({"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "Einsum"})
_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli"})

_ML_SAME_SHAPE = frozenset({"Scaler", "Normalizer", "Binarizer", "Imputer"})
_ML_LINEAR = frozenset({"LinearClassifier", "LinearRegressor", "SVMClassifier", "SVMRegressor"})
_ML_TREES = frozenset({"TreeEnsembleClassifier", "TreeEnsembleRegressor"})

FEATURE_DOCS: dict[str, str] = {
    "batch_size": "rows per run",
    "threads": "intra-op threads of the session",
    "merge_factor": "members one run computes (N of a NetFuse merge, 1 otherwise)",
    **{f"on_{t}": f"1 if the run is on {t.replace('_', ' on ')}, else 0" for t in TARGETS},
    "nodes": "nodes of the ONNX main graph (before the backend fuses any)",
    "unknown_nodes": "nodes whose output shape static inference cannot tell (their work is not counted)",
    "params": "initializer elements",
    "param_bytes": "initializer bytes",
    "input_bytes": "bytes of the graph inputs at the batch size",
    **{f"{c}_{w}": {"nodes": f"{c} nodes", "flops": f"{c} FLOPs per run (2 per multiply-add)",
                    "bytes": f"bytes read and written by {c} nodes per run"}[w]
       for c in PRODUCT_CLASSES for w in ("nodes", "flops", "bytes")},
    **{f"{c}_{w}": {"nodes": f"{c} nodes", "flops": f"{c} output elements per run",
                    "bytes": f"bytes read and written by {c} nodes per run"}[w]
       for c in MEMORY_CLASSES for w in ("nodes", "flops", "bytes")},
    "io_tensors": "graph inputs and outputs (each is bound and converted on every call)",
    "constant_nodes": "nodes computable from initializers alone (the backend folds them when it loads the model)",
    **{f"{c}_kernels": f"{c} nodes that run on every call (not constant)" for c in KERNEL_CLASSES},
    "gemv_bytes": "bytes of the 2-D products when the batch is one row (matrix-vector products: every weight "
                  "read once, no reuse; 0 at other batch sizes)",
    "tree_visits": "tree-ensemble node comparisons per run: rows x sum over trees of the mean leaf depth",
    "tree_outputs": "tree-ensemble leaf weights accumulated per run: rows x sum over trees of weights per leaf",
    "ml_flops": "FLOPs of ai.onnx.ml linear models and scalers per run (2 per coefficient per row)",
}
"""Feature name -> meaning and unit."""

FEATURES: tuple[str, ...] = tuple(FEATURE_DOCS)
"""The feature order of :func:`row` and :func:`matrix` (and of the cost model's ONNX input)."""

_STATIC = FEATURES[3 + len(TARGETS):]


@dataclass(frozen=True)
class Config:
    """How a run is executed.

    Attributes:
        batch_size: rows per run (>= 1).
        backend: one of :data:`BACKENDS`.
        threads: intra-op threads (>= 1).
        merge_factor: members one run computes (>= 1; N for a NetFuse-merged graph).
        device: one of :data:`DEVICES`.

    Raises:
        ProgrammingError: ``invalid_option`` for an unknown backend or device or a count below 1.
    """

    batch_size: int
    backend: str = "onnxruntime"
    threads: int = 1
    merge_factor: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ProgrammingError(f"unknown backend {self.backend!r}: the cost model knows {list(BACKENDS)}",
                                   code="invalid_option")
        if self.device not in DEVICES:
            raise ProgrammingError(f"unknown device {self.device!r}: the cost model knows {list(DEVICES)}",
                                   code="invalid_option")
        for what in ("batch_size", "threads", "merge_factor"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ProgrammingError(f"{what} must be a positive integer, got {v!r}", code="invalid_option")

    @property
    def target(self) -> str:
        """``backend_device``, one of :data:`TARGETS`."""
        return f"{self.backend}_{self.device}"


def target_column(target: str) -> str:
    """The one-hot feature of ``target`` (``"on_" + target``)."""
    return f"on_{target}"


def model_features(model: onnx.ModelProto, batch_size: int) -> dict[str, float]:
    """The static features of running ``model`` on ``batch_size`` rows: ``batch_size`` and the keys of
    :data:`FEATURES` after the configuration ones. Per-class counts, FLOPs and bytes as
    :func:`~modelsql.analyses.cost_features.cost_features` counts them; the per-call kernel counts and graph
    inputs and outputs; the GEMV bytes; and the work of ``ai.onnx.ml`` tree ensembles and linear models
    (``tree_visits``, ``tree_outputs``, ``ml_flops``), which shape inference does not see. About 1-100 ms
    (shape inference on a copy of the graph); cache it per (model, batch size).

    ``model`` may be full or stripped (only shapes, initializer dims and node attributes are read). The
    outputs of shape-preserving ``ai.onnx.ml`` operators (Scaler, Normalizer, Binarizer, Imputer) are given
    their input's shape first, so the tensor nodes after them (a scikit-learn MLP after its scaler) are
    counted. Nodes computable from initializers alone (:func:`_constant_nodes`: the reshapes and concatenations
    of a NetFuse merge's weights) are folded by the backend when it loads the model, so their FLOPs, bytes and
    counts are left out of the per-class features (``nodes`` still counts every node).

    Raises:
        ProgrammingError: ``invalid_option`` for a batch size below 1.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ProgrammingError(f"batch_size must be a positive integer, got {batch_size!r}", code="invalid_option")
    out = dict(cost_features(_ml_shapes(model, batch_size), batch_size))
    folded = _constant_nodes(model.graph)
    if folded:
        for key, value in cost_features(_subgraph(model, folded), 1).items():
            if key.endswith(("_nodes", "_flops", "_bytes")) and key != "param_bytes":
                out[key] = max(0.0, out[key] - value)
    out.update(_ml_work(model, batch_size))
    out.update(_kernels(model, folded))
    out["gemv_bytes"] = out["gemm_bytes"] if batch_size == 1 else 0.0
    return {"batch_size": float(batch_size), **{k: float(out.get(k, 0.0)) for k in _STATIC}}


def _ml_shapes(model: onnx.ModelProto, batch_size: int) -> onnx.ModelProto:
    """A copy of ``model`` with its symbolic batch bound and shape-preserving ML operators' outputs declared."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {}
    for v in m.graph.input:
        dims = v.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].dim_value = batch_size
        if len(dims) and all(d.HasField("dim_value") for d in dims):
            known[v.name] = v.type
    declared = {v.name for v in m.graph.value_info}
    for node in m.graph.node:
        if node.domain == "ai.onnx.ml" and node.op_type in _ML_SAME_SHAPE and node.input and node.input[0] in known:
            t = onnx.TypeProto()
            t.CopyFrom(known[node.input[0]])
            known[node.output[0]] = t
            if node.output[0] not in declared:
                m.graph.value_info.append(onnx.helper.make_value_info(node.output[0], t))
    return m


def _kernel_class(node: onnx.NodeProto) -> str:
    if node.op_type in _CONVS:
        return "conv"
    if node.op_type in _DENSE:
        return "dense"
    if node.domain in ("", "ai.onnx"):
        return next((c for c, ops in OP_CLASSES.items() if node.op_type in ops), "other")
    return "other"


def _constant_nodes(graph: onnx.GraphProto) -> list[int]:
    """Indices of the nodes whose inputs are all initializers or outputs of such nodes (and Constant nodes):
    what ONNX Runtime's constant folding computes once at load. Random operators are never constant."""
    constant = {t.name for t in graph.initializer} | {""}
    out = []
    for i, node in enumerate(graph.node):
        if node.op_type not in _RANDOM and (node.input or node.op_type == "Constant") and \
                all(name in constant for name in node.input):
            constant.update(node.output)
            out.append(i)
    return out


def _subgraph(model: onnx.ModelProto, indices: list[int]) -> onnx.ModelProto:
    """The nodes ``indices`` of ``model`` alone, with the initializers they read, their outputs as outputs."""
    nodes = [model.graph.node[i] for i in indices]
    used = {name for n in nodes for name in n.input}
    graph = onnx.helper.make_graph(nodes, "constants", [],
                                   [onnx.helper.make_empty_tensor_value_info(o) for n in nodes for o in n.output if o],
                                   [t for t in model.graph.initializer if t.name in used])
    return onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)


def _kernels(model: onnx.ModelProto, folded: list[int]) -> dict[str, float]:
    """``constant_nodes``, ``<class>_kernels`` and ``io_tensors`` of the main graph."""
    graph, skip = model.graph, set(folded)
    out = dict.fromkeys((f"{c}_kernels" for c in KERNEL_CLASSES), 0.0)
    for i, node in enumerate(graph.node):
        if i not in skip:
            out[f"{_kernel_class(node)}_kernels"] += 1
    initializers = {t.name for t in graph.initializer}
    out["constant_nodes"] = float(len(folded))
    out["io_tensors"] = float(sum(v.name not in initializers for v in graph.input) + len(graph.output))
    return out


def _attr(node: onnx.NodeProto, name: str):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return None


def _ml_work(model: onnx.ModelProto, batch_size: int) -> dict[str, float]:
    visits = outputs = flops = 0.0
    for node in model.graph.node:
        if node.domain != "ai.onnx.ml":
            continue
        if node.op_type in _ML_TREES:
            v, o = _tree_work(node)
            visits, outputs = visits + v, outputs + o
        elif node.op_type in _ML_LINEAR:
            coefficients = _attr(node, "coefficients") or _attr(node, "support_vectors") or []
            flops += 2.0 * len(coefficients)
        elif node.op_type == "Scaler":
            flops += 2.0 * len(_attr(node, "scale") or [])
    return {"tree_visits": batch_size * visits, "tree_outputs": batch_size * outputs, "ml_flops": batch_size * flops}


def _tree_work(node: onnx.NodeProto) -> tuple[float, float]:
    """(sum over trees of the mean leaf depth, sum over trees of leaf weights per leaf) of a TreeEnsemble node
    (ai.onnx.ml v1-v3 attributes); (0, 0) when it has none of them."""
    trees = _attr(node, "nodes_treeids") or []
    ids = _attr(node, "nodes_nodeids") or []
    true_ids = _attr(node, "nodes_truenodeids") or []
    false_ids = _attr(node, "nodes_falsenodeids") or []
    modes = _attr(node, "nodes_modes") or []
    if not trees or not (len(trees) == len(ids) == len(true_ids) == len(false_ids) == len(modes)):
        return 0.0, 0.0
    children = {(t, i): (a, b, m == b"LEAF") for t, i, a, b, m in zip(trees, ids, true_ids, false_ids, modes)}
    referenced = {(t, c) for (t, _), (a, b, leaf) in children.items() if not leaf for c in (a, b)}
    roots: dict[int, int] = {}
    for key in children:
        if key not in referenced:
            roots.setdefault(key[0], key[1])
    depth_sum = sum(_mean_leaf_depth(children, tree, roots.get(tree, 0)) for tree in set(trees))
    weights = _attr(node, "class_treeids") or _attr(node, "target_treeids") or []
    leaves = sum(1 for _, _, leaf in children.values() if leaf)
    return depth_sum, (len(weights) / leaves * len(set(trees)) if leaves else 0.0)


def _mean_leaf_depth(children: dict, tree: int, root: int) -> float:
    depths, stack = [], [(root, 1)]
    while stack:
        i, d = stack.pop()
        a, b, leaf = children.get((tree, i), (0, 0, True))
        if leaf or d > 10_000:
            depths.append(d)
        else:
            stack += [(a, d + 1), (b, d + 1)]
    return float(np.mean(depths)) if depths else 0.0


def row(static: Mapping[str, float], config: Config) -> dict[str, float]:
    """The features of one run, keyed and ordered as :data:`FEATURES`.

    Args:
        static: the static features of the graph that runs, at ``config.batch_size`` rows
            (:func:`model_features`; a :func:`~modelsql.analyses.cost_features.cost_features` dict is
            accepted too, the ML-operator keys then count 0). For a NetFuse merge, of the merged graph.
        config: how it runs.

    Raises:
        ProgrammingError: ``invalid_option`` when ``static`` was computed at another batch size.
        DataError: ``invalid_feature`` for a negative, NaN or infinite value.
    """
    if not isinstance(config, Config):
        raise ProgrammingError(f"config must be a Config, got {type(config).__name__}", code="invalid_option")
    if "batch_size" in static and float(static["batch_size"]) != config.batch_size:
        raise ProgrammingError(f"the static features are for batch size {static['batch_size']:g}, the "
                               f"configuration for {config.batch_size}", code="invalid_option")
    out = {"batch_size": float(config.batch_size), "threads": float(config.threads),
           "merge_factor": float(config.merge_factor)}
    out.update({target_column(t): float(t == config.target) for t in TARGETS})
    for name in _STATIC:
        value = float(static.get(name, 0.0))
        if not math.isfinite(value) or value < 0:
            raise DataError(f"feature {name!r} is {value!r}: features must be finite and non-negative",
                            code="invalid_feature")
        out[name] = value
    return out


def matrix(rows: Sequence[Mapping[str, float]]) -> np.ndarray:
    """``float64 [len(rows), len(FEATURES)]``: the rows' features in :data:`FEATURES` order.

    Raises:
        ProgrammingError: ``invalid_feature`` for a row missing a feature.
        DataError: ``invalid_feature`` for a NaN, infinite or negative value.
    """
    try:
        x = np.array([[float(r[name]) for name in FEATURES] for r in rows], dtype=np.float64).reshape(-1, len(FEATURES))
    except KeyError as exc:
        raise ProgrammingError(f"a feature row lacks {exc.args[0]!r}: build rows with modelsql.costmodel.row()",
                               code="invalid_feature") from None
    if not np.isfinite(x).all() or (x < 0).any():
        raise DataError("feature rows must be finite and non-negative", code="invalid_feature")
    return x
