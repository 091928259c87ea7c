"""Does a row's answer depend on the other rows of its batch? A graph analysis.

PREDICT runs a model over many rows at once. That is only right when the model
is *row-independent*: output row ``i`` is a function of input row ``i`` alone.
Most models are (dense and convolutional networks, tree ensembles, linear
models), but some mix rows: ``DynamicQuantizeLinear`` (onnxruntime's
``quantize_dynamic``) computes its scale and zero point over the whole tensor,
so a row's quantized value depends on its neighbours; a reduction, softmax or
normalisation over axis 0, a ``Gather`` along the batch axis, a ``Reshape``
that merges rows, or arithmetic on the batch size read by ``Shape`` do too.

:func:`batch_dependence` follows the batch axis through the graph: every graph
input starts with its batch on axis 0, and each node either moves it to a
known axis of its outputs (elementwise ops, matrix products that do not
contract it, convolutions, transposes ...) or is reported as the reason the
model is batch-dependent. An operator the analysis does not know is reported
too: when it cannot tell, it says so rather than guess (PREDICT then runs the
model one row at a time, which is always right, only slower).

The batch size itself (``Shape`` of a batch-carrying tensor) may flow into the
shape inputs of ``Reshape``, ``Expand`` and ``ConstantOfShape`` when it stays
the leading dimension (``x.view(x.size(0), -1)`` in torch); used as a value in
arithmetic or ``Range``, it makes the model batch-dependent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, numpy_helper

from modelsql.onnxformat.inference import infer_shapes

__all__ = ["batch_dependence"]

@dataclass(frozen=True)
class _Batch:
    """A dimension holding ``c`` times the batch size (torch's attention folds the heads into it)."""

    c: int = 1


N = _Batch(1)
"""Marks the batch size in a tracked shape value."""


def _has_batch(vals) -> bool:
    return any(isinstance(v, _Batch) for v in vals)


def _batch_at(vals) -> list[int]:
    return [i for i, v in enumerate(vals) if isinstance(v, _Batch)]

_ELEMENTWISE = {
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd",
    "BitwiseNot", "BitwiseOr", "BitwiseXor", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Cos", "Cosh",
    "DequantizeLinear", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater",
    "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu",
    "QuantizeLinear", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
    "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
    "Bernoulli", "RandomNormalLike", "RandomUniformLike",
}
"""Ops applied element by element (with broadcasting): the batch axis keeps its aligned position."""

_PER_SAMPLE = {
    "AveragePool", "BatchNormalization", "Conv", "ConvInteger", "ConvTranspose", "DepthToSpace",
    "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "GroupNormalization", "InstanceNormalization",
    "LpPool", "LRN", "MaxPool", "MaxUnpool", "QLinearConv", "Resize", "SpaceToDepth", "Upsample",
}
"""Ops over ``[N, C, ...]`` tensors that treat each sample on its own (batch on axis 0 in and out)."""

_ML_PER_ROW = {
    "ArrayFeatureExtractor", "Binarizer", "CategoryMapper", "DictVectorizer", "FeatureVectorizer", "Imputer",
    "LabelEncoder", "LinearClassifier", "LinearRegressor", "Normalizer", "OneHotEncoder", "SVMClassifier",
    "SVMRegressor", "Scaler", "TreeEnsemble", "TreeEnsembleClassifier", "TreeEnsembleRegressor", "ZipMap",
}
"""ai.onnx.ml ops, each computing one output row from one input row (batch on axis 0)."""

_ML_SAME_RANK = {"Binarizer", "CategoryMapper", "Imputer", "LabelEncoder", "Normalizer", "Scaler"}

_REDUCE = {
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "ReduceSumSquare",
}

_SHAPE_VAL_KEEPS = {"Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape"}
"""Ops that hand a tracked shape value (their input 0) on with its elements unchanged."""

_SHAPE_PASS = {"Cast", "Identity", "Squeeze", "Unsqueeze", "Concat", "Gather", "Slice", "Reshape"}
"""Ops through which a tracked shape value (holding the batch size) is followed."""


class _Mixes(Exception):
    """Raised by a rule: this node (the message says why) makes rows depend on each other."""


_ML_KEEPS_SHAPE = {"Imputer", "Scaler", "Binarizer", "Normalizer"}
"""ai.onnx.ml operators whose float output has their input's shape, for which ONNX infers no shape."""


def _inferred(model: ModelProto) -> ModelProto:
    """``model`` with ONNX's shape inference, carried past the :data:`_ML_KEEPS_SHAPE` operators (each output given
    its input's shape, and inference run again): without that, what follows a scikit-learn ``SimpleImputer`` had no
    shape, and a reshape after it could not be shown to keep rows apart."""
    try:
        current = infer_shapes(model, strict_mode=False)
    except Exception:
        return model
    for _ in range(8):  # one more chain of them carried each round
        known = {v.name: v for v in list(current.graph.value_info) + list(current.graph.input)
                 if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}
        added = []
        for node in current.graph.node:
            if node.domain == "ai.onnx.ml" and node.op_type in _ML_KEEPS_SHAPE and node.input[0] in known \
                    and node.output[0] not in known:
                dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                        for d in known[node.input[0]].type.tensor_type.shape.dim]
                added.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, dims))
        if not added:
            return current
        seeded = ModelProto()
        seeded.CopyFrom(current)
        seeded.graph.value_info.extend(added)
        try:
            current = infer_shapes(seeded, strict_mode=False)
        except Exception:
            return seeded
    return current


class _Graph:
    """What is known of the graph's values while the nodes are followed in order."""

    def __init__(self, model: ModelProto) -> None:
        g = _inferred(model).graph
        self.shapes: dict[str, Optional[tuple]] = {}
        for v in list(g.value_info) + list(g.input) + list(g.output):
            t = v.type.tensor_type if v.type.HasField("tensor_type") else None
            if t is not None and t.HasField("shape"):
                self.shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        self.consts: dict[str, np.ndarray] = {}
        for t in g.initializer:
            try:
                self.consts[t.name] = numpy_helper.to_array(t)
            except Exception:
                pass
            self.shapes.setdefault(t.name, tuple(t.dims))
        self.opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [0])
        self.axis: dict[str, int] = {}
        """Batch-carrying value -> the axis its batch is on."""
        self.fold: dict[str, tuple[int, int]] = {}
        """Batch-carrying value -> ``(outer, inner)`` when its batch axis holds ``outer * N * inner``
        entries, entry ``(a * N + n) * inner + j`` belonging to row ``n`` (absent: ``(1, 1)``)."""
        self.shape_vals: dict[str, list] = {}
        """1-D int values holding the batch size: each element an int, :data:`N` or None (unknown)."""
        self.n_values: set[str] = set()
        """Values computed from the batch size (Shape, Size), as data."""

    def rank(self, name: str) -> Optional[int]:
        shape = self.shapes.get(name)
        return None if shape is None else len(shape)

    def const(self, node: NodeProto, i: int) -> Optional[np.ndarray]:
        if i >= len(node.input) or not node.input[i]:
            return None
        return self.consts.get(node.input[i])

    def ints(self, node: NodeProto, attr: str, i: int) -> Optional[list[int]]:
        """An int list given as attribute ``attr`` (older opsets) or as constant input ``i``."""
        for a in node.attribute:
            if a.name == attr:
                return list(a.ints)
        value = self.const(node, i)
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _norm(axis: int, rank: Optional[int]) -> int:
    if axis < 0:
        if rank is None:
            raise _Mixes(f"uses axis {axis} of a tensor of unknown rank")
        return axis + rank
    return axis


def _only_input(g: _Graph, node: NodeProto) -> tuple[str, int]:
    """The single batch-carrying input (index 0) and its batch axis; refuses batch-carrying others."""
    carried = [(i, g.axis[x]) for i, x in enumerate(node.input) if x in g.axis]
    if [i for i, _ in carried] != [0]:
        raise _Mixes("combines the batch with a batch-dependent parameter")
    return node.input[0], carried[0][1]


def _set(g: _Graph, node: NodeProto, pos: int, outputs: Optional[range] = None,
         fold: Optional[tuple[int, int]] = None) -> None:
    """Outputs carry the batch on ``pos``, folded as the batch-carrying inputs are (they must agree)."""
    if fold is None:
        folds = {g.fold.get(x, (1, 1)) for x in node.input if x in g.axis}
        if len(folds) > 1:
            raise _Mixes("combines tensors whose batch axes fold other axes in differently")
        fold = folds.pop() if folds else (1, 1)
    for i in outputs if outputs is not None else range(len(node.output)):
        if i < len(node.output) and node.output[i]:
            g.axis[node.output[i]] = pos
            if fold != (1, 1):
                g.fold[node.output[i]] = fold


def _broadcast(shapes: list) -> Optional[tuple]:
    """NumPy broadcasting of known shapes (dims int or None); None when a shape is unknown."""
    if any(sh is None for sh in shapes):
        return None
    rank = max((len(sh) for sh in shapes), default=0)
    out = []
    for i in range(rank):
        dims = [sh[i - rank + len(sh)] for sh in shapes if i - rank + len(sh) >= 0]
        big = [d for d in dims if d not in (1,)]
        out.append(big[0] if big and all(d is not None for d in big) else (None if big else 1))
    return tuple(out)


def _put_shape(g: _Graph, name: str, dims: tuple) -> None:
    """Record ``dims`` for ``name``, keeping what is already known (inference may know some dims only)."""
    known = g.shapes.get(name)
    if known is None or len(known) != len(dims):
        g.shapes[name] = tuple(dims)
    else:
        g.shapes[name] = tuple(k if k is not None else d for k, d in zip(known, dims))


def _record_rank(g: _Graph, name: str, rank: Optional[int]) -> None:
    """Remember a value's rank where shape inference did not give it (ai.onnx.ml ops stop it)."""
    if rank is not None and g.rank(name) is None:
        g.shapes[name] = (None,) * rank


def _same_rank(g: _Graph, node: NodeProto) -> None:
    _record_rank(g, node.output[0], g.rank(node.input[0]))


# ------------------------------------------------------------------------------------ the rules


def _elementwise(g: _Graph, node: NodeProto) -> None:
    """Broadcasting aligns trailing axes: every batch-carrying input must put its batch at one output axis."""
    out_rank = g.rank(node.output[0])
    ranks = [g.rank(x) for x in node.input if x]
    known = [r for r in ranks if r is not None]
    if out_rank is None and len(known) == len(ranks):
        out_rank = max(known, default=0)
    positions = set()
    for x in node.input:
        if x in g.axis:
            r = g.rank(x)
            shift = out_rank - r if out_rank is not None and r is not None else 0
            positions.add(g.axis[x] + shift)
    if len(positions) != 1:
        raise _Mixes("broadcasts batch axes of its inputs against each other")
    _set(g, node, positions.pop())
    _record_rank(g, node.output[0], out_rank)
    shape = _broadcast([g.shapes.get(x) for x in node.input if x])
    if shape is not None:
        _put_shape(g, node.output[0], shape)


def _per_sample(g: _Graph, node: NodeProto) -> None:
    _, pos = _only_input(g, node)
    if pos != 0:
        raise _Mixes("treats axis 0 as the batch, but the batch is on another axis")
    if node.op_type == "BatchNormalization" and _attr(node, "training_mode", 0):
        raise _Mixes("normalises with statistics of the batch (training_mode = 1)")
    _set(g, node, 0, range(1))
    _same_rank(g, node)


def _array_feature_extractor(g: _Graph, node: NodeProto) -> None:
    """``Y = X[..., indices]``: selects along X's last axis; batch-carrying indices pick per row."""
    x, indices = node.input[0], node.input[1]
    if x in g.axis and indices in g.axis:
        raise _Mixes("selects with batch-carrying indices from batch-carrying data")
    if x in g.axis:
        rank = g.rank(x)
        if rank is None or g.axis[x] >= rank - 1:
            raise _Mixes("selects along the batch axis")
        _set(g, node, g.axis[x])
        _same_rank(g, node)
        return
    if g.rank(x) == 1:  # ONNX Runtime returns [1, indices.size] for a 1-D X: the rows end on axis 1
        if g.axis[indices] != 0 or g.rank(indices) not in (1, 2) or (g.shapes.get(indices) or (0, 0))[1:] not in ((), (1,)):
            raise _Mixes("selects with indices holding more than one value per row")
        _set(g, node, 1)
        g.shapes[node.output[0]] = (1, None)
        return
    _set(g, node, g.axis[indices])


def _ml_per_row(g: _Graph, node: NodeProto) -> None:
    if node.op_type == "ArrayFeatureExtractor":
        _array_feature_extractor(g, node)
        return
    _, pos = _only_input(g, node)
    if pos != 0:
        raise _Mixes("treats axis 0 as the rows, but the batch is on another axis")
    _set(g, node, 0)
    if node.op_type in _ML_SAME_RANK:
        _same_rank(g, node)


def _matmul(g: _Graph, node: NodeProto) -> None:
    a, b = node.input[0], node.input[1]
    ra, rb = g.rank(a), g.rank(b)
    if ra is None or rb is None:
        raise _Mixes("multiplies tensors of unknown rank")
    out = max(ra, rb) if min(ra, rb) >= 2 else (ra if rb == 1 else rb) - (1 if min(ra, rb) == 1 else 0)
    positions = set()
    if a in g.axis:
        pa = g.axis[a]
        if ra == 1 or pa == ra - 1:
            raise _Mixes("contracts the batch axis of its first input")
        positions.add(pa if rb == 1 else pa + out - ra)
    if b in g.axis:
        pb = g.axis[b]
        if rb == 1 or pb == rb - 2:
            raise _Mixes("contracts the batch axis of its second input")
        positions.add(out - 1 if pb == rb - 1 else pb + out - rb)
    for x in node.input[2:]:
        if x in g.axis:
            raise _Mixes("takes a batch-dependent zero point")
    if len(positions) != 1:
        raise _Mixes("multiplies two batch-carrying tensors along different axes")
    _set(g, node, positions.pop())
    _record_rank(g, node.output[0], out)
    sa, sb = g.shapes.get(a), g.shapes.get(b)
    if sa is not None and sb is not None and ra >= 2 and rb >= 2:
        stacked = _broadcast([sa[:-2], sb[:-2]])
        if stacked is not None:
            _put_shape(g, node.output[0], stacked + (sa[-2], sb[-1]))


def _gemm(g: _Graph, node: NodeProto) -> None:
    positions = set()
    for i, x in enumerate(node.input[:3]):
        if x not in g.axis:
            continue
        pos = g.axis[x]
        if i == 0:
            if pos != (1 if _attr(node, "transA", 0) else 0):
                raise _Mixes("contracts the batch axis of A")
            positions.add(0)
        elif i == 1:
            if pos != (0 if _attr(node, "transB", 0) else 1):
                raise _Mixes("contracts the batch axis of B")
            positions.add(1)
        else:
            positions.add(pos + 2 - (g.rank(x) or 2))
    if len(positions) != 1:
        raise _Mixes("mixes batch axes of its inputs")
    _set(g, node, positions.pop())
    _record_rank(g, node.output[0], 2)


def _transpose(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    perm = _attr(node, "perm")
    rank = g.rank(x)
    if perm is None:
        if rank is None:
            raise _Mixes("reverses the axes of a tensor of unknown rank")
        perm = list(reversed(range(rank)))
    _set(g, node, list(perm).index(pos))
    shape = g.shapes.get(x)
    if shape is not None:
        _put_shape(g, node.output[0], tuple(shape[p] for p in perm))


def _flatten(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    axis = _norm(_attr(node, "axis", 1), g.rank(x))
    if pos != 0 or axis < 1:
        raise _Mixes("flattens the batch axis into the row")
    _set(g, node, 0)


def _squeeze(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    axes = g.ints(node, "axes", 1)
    if axes is None:
        shape = g.shapes.get(x)
        if shape is None:
            raise _Mixes("squeezes unknown axes, perhaps the batch")
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = [_norm(a, g.rank(x)) for a in axes]
    if pos in axes:
        raise _Mixes("squeezes the batch axis")
    _set(g, node, pos - sum(1 for a in axes if a < pos))
    shape = g.shapes.get(x)
    if shape is not None:
        _put_shape(g, node.output[0], tuple(d for i, d in enumerate(shape) if i not in axes))


def _unsqueeze(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    axes = g.ints(node, "axes", 1)
    rank = g.rank(x)
    if axes is None or rank is None:
        raise _Mixes("inserts axes that cannot be read")
    out_rank = rank + len(axes)
    axes = sorted(_norm(a, out_rank) for a in axes)
    kept = [i for i in range(out_rank) if i not in axes]
    _set(g, node, kept[pos])
    shape = g.shapes.get(x)
    if shape is not None:
        dims = iter(shape)
        _put_shape(g, node.output[0], tuple(1 if i in axes else next(dims) for i in range(out_rank)))


def _concat(g: _Graph, node: NodeProto) -> None:
    if any(x in g.shape_vals for x in node.input):
        g.shape_vals[node.output[0]] = _concat_shape_vals(g, node)
        return
    axis = _norm(_attr(node, "axis", 0), g.rank(node.output[0]) or g.rank(node.input[0]))
    positions = {g.axis[x] for x in node.input if x in g.axis}
    if axis in positions:
        raise _Mixes("concatenates along the batch axis")
    if len(positions) != 1:
        raise _Mixes("concatenates tensors with their batch on different axes")
    _set(g, node, positions.pop())


def _concat_shape_vals(g: _Graph, node: NodeProto) -> list:
    out: list = []
    for x in node.input:
        if x in g.shape_vals:
            out.extend(g.shape_vals[x])
        elif x in g.consts:
            out.extend(int(v) for v in np.asarray(g.consts[x]).reshape(-1))
        else:
            shape = g.shapes.get(x)
            out.extend([None] * (int(np.prod(shape)) if shape and all(shape) else 1))
    return out


def _split(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    if _norm(_attr(node, "axis", 0), g.rank(x)) == pos:
        raise _Mixes("splits along the batch axis")
    _set(g, node, pos)


def _slice(g: _Graph, node: NodeProto) -> None:
    if node.input[0] in g.shape_vals:
        _slice_shape_val(g, node)
        return
    x, pos = _only_input(g, node)
    starts, ends = g.ints(node, "starts", 1), g.ints(node, "ends", 2)
    axes, steps = g.ints(node, "axes", 3), g.ints(node, "steps", 4)
    if starts is None or ends is None:
        raise _Mixes("slices with bounds that cannot be read")
    axes = [_norm(a, g.rank(x)) for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(axes)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if a == pos and not (s == 0 and e >= 2**31 - 1 and st == 1):
            raise _Mixes("slices the batch axis")
    _set(g, node, pos)


def _slice_shape_val(g: _Graph, node: NodeProto) -> None:
    starts, ends = g.ints(node, "starts", 1), g.ints(node, "ends", 2)
    steps = g.ints(node, "steps", 4) or [1]
    vals = g.shape_vals[node.input[0]]
    if starts is None or ends is None or len(starts) != 1:
        g.shape_vals[node.output[0]] = [None, N]  # unknown, but still holding the batch size
        return
    picked = vals[slice(starts[0], min(ends[0], len(vals)), steps[0])]
    if _has_batch(picked):
        g.shape_vals[node.output[0]] = picked
    elif all(isinstance(v, int) for v in picked):
        g.consts[node.output[0]] = np.array(picked, dtype=np.int64)


def _gather(g: _Graph, node: NodeProto) -> None:
    data, indices = node.input[0], node.input[1]
    if data in g.shape_vals and indices not in g.axis:
        idx = g.consts.get(indices)
        vals = g.shape_vals[data]
        picked = [vals[int(i)] if -len(vals) <= int(i) < len(vals) else None for i in np.asarray(idx).reshape(-1)] \
            if idx is not None else [None, N]
        if _has_batch(picked):
            g.shape_vals[node.output[0]] = picked
        elif all(isinstance(v, int) for v in picked):  # dims that are not the batch size: constants
            g.consts[node.output[0]] = np.array(picked if idx is not None and np.ndim(idx) else picked[0],
                                                dtype=np.int64)
        return
    axis = _norm(_attr(node, "axis", 0), g.rank(data))
    if data in g.axis and indices in g.axis:
        raise _Mixes("gathers batch-carrying data with batch-carrying indices")
    if data in g.axis:
        pos = g.axis[data]
        if axis == pos:
            raise _Mixes("gathers along the batch axis (selects rows)")
        irank = g.rank(indices)
        if irank is None:
            raise _Mixes("gathers with indices of unknown rank")
        _set(g, node, pos if axis > pos else pos + irank - 1)
        shape, ishape = g.shapes.get(data), g.shapes.get(indices)
        if shape is not None and ishape is not None:
            _put_shape(g, node.output[0], tuple(shape[:axis]) + tuple(ishape) + tuple(shape[axis + 1:]))
        return
    _set(g, node, axis + g.axis[indices])


def _gather_elements(g: _Graph, node: NodeProto) -> None:
    data = node.input[0]
    positions = {g.axis[x] for x in node.input[:2] if x in g.axis}
    axis = _norm(_attr(node, "axis", 0), g.rank(data))
    if len(positions) != 1 or axis in positions:
        raise _Mixes("gathers along the batch axis")
    _set(g, node, positions.pop())


def _reshape(g: _Graph, node: NodeProto) -> None:
    x, shape_in = node.input[0], node.input[1]
    x, pos = _only_input(g, node) if shape_in not in g.shape_vals else (x, g.axis.get(x))
    target = g.shape_vals.get(shape_in)
    if target is None and shape_in in g.consts:
        target = [int(v) for v in np.asarray(g.consts[shape_in]).reshape(-1)]
    if pos is None:  # a constant reshaped to a shape holding the batch size: rows of constants
        if target is not None and len(_batch_at(target)) == 1:
            q = _batch_at(target)[0]
            _set(g, node, q, fold=(1, target[q].c))
            _target_shape(g, node.output[0], target)
            return
        raise _Mixes("reshapes to a shape that uses the batch size")
    free = _single_free_axis(g, x, pos, target)
    if free is not None:
        _set(g, node, free)
        return
    out = _row_axis_after_reshape(g, x, pos, target, bool(_attr(node, "allowzero", 0))) if target else None
    if out is None:
        raise _Mixes("reshapes across the batch axis (rows may be merged or split)")
    assert target is not None  # out is computed only from a target
    _set(g, node, out[0], fold=out[1])
    _target_shape(g, node.output[0], target)


def _target_shape(g: _Graph, out: str, target: list) -> None:
    """Record the shape a Reshape / Expand / ConstantOfShape target gives (N and -1 as unknown)."""
    _put_shape(g, out, tuple(d if isinstance(d, int) and d > 0 else None for d in target))



def _single_free_axis(g: _Graph, x: str, pos: int, target: Optional[list]) -> Optional[int]:
    """For ``x`` whose every axis but the batch has size 1, the one target axis that takes the batch."""
    shape = g.shapes.get(x)
    if not target or shape is None or any(d != 1 for i, d in enumerate(shape) if i != pos):
        return None
    free = [i for i, d in enumerate(target) if d != 1]
    if len(free) == 1 and target[free[0]] in (-1, N):
        return free[0]
    return None


def _prod(dims) -> Optional[int]:
    return int(np.prod(dims, dtype=np.int64)) if all(isinstance(d, int) and d > 0 for d in dims) else None


def _row_axis_after_reshape(g: _Graph, x: str, pos: int, target: list, allowzero: bool
                            ) -> Optional[tuple[int, tuple[int, int]]]:
    """The axis the batch lands on when ``x`` (batch on ``pos``) is reshaped to ``target``, and how it
    folds other entries in (see ``_Graph.fold``), or None when the reshape may merge or split rows.

    A reshape keeps the flat (row-major) order. Before it, row ``n``'s entries sit at
    ``(a * N + n) * S + s`` with ``P`` choices of ``a`` (the axes before the batch, times its outer
    fold) and ``S`` of ``s`` (its inner fold, times the axes after it). The target must put as many
    entries before and after one axis, which then holds ``P' * N * S'`` entries: the target's
    ``c * N`` (read from ``Shape``, times a constant), a ``0`` copying the batch axis (no
    ``allowzero``), or its one ``-1`` when every other dim is known.
    """
    shape = g.shapes.get(x)
    if shape is None or len(shape) <= pos:
        return None
    outer, inner = g.fold.get(x, (1, 1))
    dims = list(target)
    if not allowzero:
        dims = [(_Batch(outer * inner) if i == pos else (shape[i] if i < len(shape) else None)) if d == 0 else d
                for i, d in enumerate(dims)]
    before, after = _prod(shape[:pos] or [1]), _prod(shape[pos + 1:] or [1])
    if before is None or after is None:
        return None
    before, after = before * outer, after * inner
    places = _batch_at(dims)
    if len(places) == 1:
        return _fold_at(dims, places[0], before, after)
    if places or dims.count(-1) != 1:
        return None
    q = dims.index(-1)  # the -1 takes the batch: every other dim must be known
    before_out, after_out = _prod(dims[:q] or [1]), _prod(dims[q + 1:] or [1])
    if before_out is None or after_out is None or before % before_out or after % after_out:
        return None
    return q, (before // before_out, after // after_out)


def _fold_at(dims: list, q: int, before: int, after: int) -> Optional[tuple[int, tuple[int, int]]]:
    """Target axis ``q`` holds ``c * N`` entries: the fold it takes, given ``before`` / ``after`` entries
    around the input's batch; a ``-1`` on one side is what the other side leaves."""
    c = dims[q].c
    head, tail = dims[:q] or [1], dims[q + 1:] or [1]
    if -1 in head and -1 in tail:
        return None
    if -1 in head:
        after_out = _prod(tail)
        if after_out is None or after % after_out or c % (after // after_out):
            return None
        inner = after // after_out
        return (q, (c // inner, inner)) if before % (c // inner) == 0 else None
    before_out = _prod(head)
    if before_out is None or before % before_out or c % (before // before_out):
        return None
    outer = before // before_out
    inner = c // outer
    if -1 in tail:
        return (q, (outer, inner)) if after % inner == 0 else None
    after_out = _prod(tail)
    return (q, (outer, inner)) if after_out is not None and after_out * inner == after else None


def _expand(g: _Graph, node: NodeProto) -> None:
    x, shape_in = node.input[0], node.input[1]
    target = g.shape_vals.get(shape_in)
    if x not in g.axis:
        if target is not None and len(_batch_at(target)) == 1:
            q = _batch_at(target)[0]
            _set(g, node, q, fold=(1, target[q].c))  # a constant broadcast to N rows
            return
        raise _Mixes("expands to a shape that uses the batch size")
    if shape_in in g.axis:
        raise _Mixes("expands to a batch-dependent shape")
    rank, out_rank = g.rank(x), g.rank(node.output[0])
    if out_rank is None and target is not None:
        out_rank = max(len(target), rank or 0)
    if rank is None or out_rank is None:
        raise _Mixes("expands a tensor of unknown rank")
    pos = g.axis[x] + out_rank - rank
    if target is not None and any(isinstance(d, _Batch) for i, d in enumerate(target) if i + out_rank - len(target) != pos):
        raise _Mixes("expands to a shape holding the batch size on another axis")
    _set(g, node, pos)


def _constant_of_shape(g: _Graph, node: NodeProto) -> None:
    target = g.shape_vals.get(node.input[0])
    if target is None or len(_batch_at(target)) != 1:
        raise _Mixes("builds a tensor whose shape uses the batch size")
    q = _batch_at(target)[0]
    _set(g, node, q, fold=(1, target[q].c))
    _target_shape(g, node.output[0], target)


def _shape(g: _Graph, node: NodeProto) -> None:
    x = node.input[0]
    rank = g.rank(x)
    if rank is None:
        raise _Mixes("reads the shape of a tensor of unknown rank, so where the batch size lands cannot be told")
    known = g.shapes[x]
    assert known is not None  # its rank is known
    outer, inner = g.fold.get(x, (1, 1))
    vals = [_Batch(outer * inner) if i == g.axis[x] else known[i] for i in range(rank)]
    start, end = _attr(node, "start", 0), _attr(node, "end", rank)
    vals = vals[slice(start, end)]
    if _has_batch(vals):
        g.shape_vals[node.output[0]] = vals
    # without the batch axis in range the result is a constant: nothing to track


def _size(g: _Graph, node: NodeProto) -> None:
    g.n_values.add(node.output[0])


def _axis_op(what: str, default: int, *, through: bool = False) -> Callable[[_Graph, NodeProto], None]:
    """A rule for ops working along one ``axis`` attribute: they mix rows when it is the batch axis
    (``through``: the op's axis and all after it, as LayerNormalization normalises)."""

    def rule(g: _Graph, node: NodeProto) -> None:
        x, pos = _only_input(g, node)
        axis = _norm(_attr(node, "axis", default), g.rank(x))
        if axis == pos or (through and pos >= axis):
            raise _Mixes(f"{what} along the batch axis")
        _set(g, node, pos, range(1) if node.op_type == "LayerNormalization" else None)

    return rule


def _softmax(g: _Graph, node: NodeProto) -> None:
    if g.opset >= 13:
        _axis_op("normalises", -1)(g, node)
        return
    x, pos = _only_input(g, node)  # opset < 13: the input is coerced to 2-D at ``axis``
    if _norm(_attr(node, "axis", 1), g.rank(x)) <= pos:
        raise _Mixes("normalises over axes that include the batch axis")
    _set(g, node, pos)


def _reduce(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    axes = g.ints(node, "axes", 1)
    if not axes:
        if node.input[1:2] and node.input[1] and node.input[1] not in g.consts:
            raise _Mixes("reduces over axes that cannot be read")
        if _attr(node, "noop_with_empty_axes", 0):
            _set(g, node, pos)
            return
        raise _Mixes("reduces over every axis, the batch axis included")
    axes = [_norm(a, g.rank(x)) for a in axes]
    if pos in axes:
        raise _Mixes("reduces over the batch axis")
    keep = _attr(node, "keepdims", 1)
    _set(g, node, pos if keep else pos - sum(1 for a in axes if a < pos))


def _arg_reduce(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    axis = _norm(_attr(node, "axis", 0), g.rank(x))
    if axis == pos:
        raise _Mixes("reduces over the batch axis")
    _set(g, node, pos if _attr(node, "keepdims", 1) or axis > pos else pos - 1)


def _mvn(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    if pos in [_norm(a, g.rank(x)) for a in _attr(node, "axes", [0, 2, 3])]:
        raise _Mixes("normalises over the batch axis")
    _set(g, node, pos)


def _cumsum(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    axis = g.const(node, 1)
    if axis is None or _norm(int(np.asarray(axis).reshape(-1)[0]), g.rank(x)) == pos:
        raise _Mixes("accumulates along the batch axis (or an axis that cannot be read)")
    _set(g, node, pos)


def _tile(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    repeats = g.const(node, 1)
    if repeats is None or int(np.asarray(repeats).reshape(-1)[pos]) != 1:
        raise _Mixes("repeats along the batch axis")
    _set(g, node, pos)


def _pad(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    pads = g.ints(node, "pads", 1)
    rank = g.rank(x)
    if pads is None or rank is None or g.ints(node, "axes", 3) is not None:
        raise _Mixes("pads axes that cannot be read, perhaps the batch")
    if pads[pos] or pads[pos + rank]:
        raise _Mixes("pads the batch axis")
    _set(g, node, pos)


def _one_hot(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    axis = _attr(node, "axis", -1)
    rank = g.rank(x)
    if rank is None:
        raise _Mixes("encodes a tensor of unknown rank")
    axis = axis + rank + 1 if axis < 0 else axis
    _set(g, node, pos if axis > pos else pos + 1)


def _recurrent(g: _Graph, node: NodeProto) -> None:
    """RNN / GRU / LSTM: X is ``[seq, batch, in]`` (layout 0) or ``[batch, seq, in]`` (layout 1)."""
    layout = _attr(node, "layout", 0)
    carried = {i: g.axis[x] for i, x in enumerate(node.input) if x in g.axis}
    expected = {0: 1 if layout == 0 else 0, 5: 1 if layout == 0 else 0, 6: 1 if layout == 0 else 0}
    if not carried or any(expected.get(i) != p for i, p in carried.items()):
        raise _Mixes("runs a recurrence with the batch on an axis other than its batch axis")
    for i, out in enumerate(node.output):
        if out:
            g.axis[out] = (2 if i == 0 else 1) if layout == 0 else 0


def _trailing_pair(what: str) -> Callable[[_Graph, NodeProto], None]:
    def rule(g: _Graph, node: NodeProto) -> None:
        x, pos = _only_input(g, node)
        rank = g.rank(x)
        if rank is None or pos >= rank - 2:
            raise _Mixes(f"{what} the last two axes, which hold the batch")
        _set(g, node, pos)

    return rule


def _topk(g: _Graph, node: NodeProto) -> None:
    x, pos = _only_input(g, node)
    if _norm(_attr(node, "axis", -1), g.rank(x)) == pos:
        raise _Mixes("ranks along the batch axis")
    _set(g, node, pos)


def _per_row_strings(g: _Graph, node: NodeProto) -> None:
    """StringNormalizer: element by element over ``[C]`` or ``[1, C]``; a batch on axis 0 of ``[N]`` stays."""
    x, pos = _only_input(g, node)
    if _attr(node, "stopwords"):
        raise _Mixes("removes stopwords, which changes how many values remain")
    if pos != 0 or g.rank(x) != 1:
        raise _Mixes("normalises strings of a tensor whose batch it cannot follow")
    _set(g, node, 0)
    _record_rank(g, node.output[0], 1)


def _tfidf(g: _Graph, node: NodeProto) -> None:
    """TfIdfVectorizer: ``[N, C]`` -> ``[N, F]`` row by row; a 1-D input is one document (all rows mixed)."""
    x, pos = _only_input(g, node)
    if pos != 0 or g.rank(x) != 2:
        raise _Mixes("counts n-grams over the whole batch (a 1-D input is one document)")
    _set(g, node, 0)
    _record_rank(g, node.output[0], 2)


def _einsum(g: _Graph, node: NodeProto) -> None:
    """Einsum: every batch-carrying operand's batch axis is one letter, kept in the output (not summed)."""
    equation = str(_attr(node, "equation", b"").decode() if isinstance(_attr(node, "equation"), bytes)
                   else _attr(node, "equation", "")).replace(" ", "")
    if "..." in equation or "->" not in equation:
        raise _Mixes("has an equation with an implicit output or ellipsis the analysis does not follow")
    operands, out = equation.split("->")
    letters: set[Optional[str]] = set()
    for term, x in zip(operands.split(","), node.input):
        if x in g.axis:
            letters.add(term[g.axis[x]] if g.axis[x] < len(term) else None)
    letter = next(iter(letters)) if len(letters) == 1 else None
    if letter is None or letter not in out:
        raise _Mixes("sums over or mixes the batch axis")
    _set(g, node, out.index(letter))
    _record_rank(g, node.output[0], len(out))


def _always(why: str) -> Callable[[_Graph, NodeProto], None]:
    def rule(g: _Graph, node: NodeProto) -> None:
        raise _Mixes(why)

    return rule


_RULES: dict[str, Callable[[_Graph, NodeProto], None]] = {
    "MatMul": _matmul, "MatMulInteger": _matmul, "QLinearMatMul": _always("is a quantized matrix product the analysis does not follow"),
    "Gemm": _gemm, "Transpose": _transpose, "Flatten": _flatten, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Concat": _concat, "Split": _split, "Slice": _slice, "Gather": _gather, "GatherElements": _gather_elements,
    "Reshape": _reshape, "Expand": _expand, "ConstantOfShape": _constant_of_shape, "Shape": _shape, "Size": _size,
    "Softmax": _softmax, "LogSoftmax": _softmax, "Hardmax": _softmax,
    "LpNormalization": _axis_op("normalises", -1), "LayerNormalization": _axis_op("normalises", -1, through=True),
    "MeanVarianceNormalization": _mvn, "ArgMax": _arg_reduce, "ArgMin": _arg_reduce, "CumSum": _cumsum,
    "TopK": _topk, "Tile": _tile, "Pad": _pad, "OneHot": _one_hot,
    "RNN": _recurrent, "GRU": _recurrent, "LSTM": _recurrent, "Trilu": _trailing_pair("works on"),
    "Det": _trailing_pair("takes determinants over"),
    "DynamicQuantizeLinear": _always("computes its quantization scale and zero point over the whole batch"),
    "StringNormalizer": _per_row_strings, "TfIdfVectorizer": _tfidf, "Einsum": _einsum,
}


def _rule_for(node: NodeProto) -> Optional[Callable[[_Graph, NodeProto], None]]:
    domain = node.domain or ""
    if domain in ("", "ai.onnx"):
        if node.op_type in _ELEMENTWISE:
            return _elementwise
        if node.op_type in _PER_SAMPLE:
            return _per_sample
        if node.op_type in _REDUCE:
            return _reduce
        return _RULES.get(node.op_type)
    if domain == "ai.onnx.ml" and node.op_type in _ML_PER_ROW:
        return _ml_per_row
    if domain == "com.microsoft" and node.op_type.startswith("DynamicQuantize"):
        return _always("quantizes with a scale computed over the whole batch")
    return None


def _captured(node: NodeProto) -> set[str]:
    """Names a node's subgraphs read from the enclosing scope (or anywhere: a superset is fine)."""
    names: set[str] = set()
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for n in sub.node:
                names.update(n.input)
                names |= _captured(n)
    return names


_FOLD_MAX = 64
"""Constant inputs of at most this many elements are folded (shape arithmetic: Mod, Add, Slice ...)."""


def _fold(g: _Graph, node: NodeProto) -> None:
    """Evaluate a node that does not touch the batch when its inputs are small constants, so shapes and
    axes computed in the graph (torch's attention reshapes) can be read by the rules."""
    if node.op_type == "Constant":
        value = _attr(node, "value")
        if value is not None:
            g.consts[node.output[0]] = numpy_helper.to_array(value)
        return
    inputs = [x for x in node.input if x]
    if not inputs or node.domain not in ("", "ai.onnx") or _captured(node) or any(
        x not in g.consts or np.asarray(g.consts[x]).size > _FOLD_MAX for x in inputs
    ):
        return
    try:
        from onnx.reference import ReferenceEvaluator

        graph = onnx.helper.make_graph(
            [node], "fold",
            [onnx.helper.make_tensor_value_info(x, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(g.consts[x]).dtype),
                                                np.shape(g.consts[x])) for x in dict.fromkeys(inputs)],
            [onnx.helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o],
        )
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", g.opset or 17)])
        results = ReferenceEvaluator(model).run(None, {x: np.asarray(g.consts[x]) for x in dict.fromkeys(inputs)})
    except Exception:
        return  # not folded: the rules then see an unknown value and stay conservative
    for name, value in zip([o for o in node.output if o], results):
        g.consts[name] = np.asarray(value)


def _scaled_batch(g: _Graph, node: NodeProto) -> bool:
    """``Mul`` of the batch size (one tracked element) by a constant integer: ``bsz * num_heads``."""
    vals = [g.shape_vals.get(x) for x in node.input]
    consts = [g.consts.get(x) for x in node.input]
    for v, c in ((vals[0], consts[1]), (vals[1], consts[0])):
        if v is not None and len(v) == 1 and isinstance(v[0], _Batch) and c is not None and np.size(c) == 1 \
                and np.issubdtype(np.asarray(c).dtype, np.integer) and int(np.asarray(c).reshape(-1)[0]) > 0:
            g.shape_vals[node.output[0]] = [_Batch(v[0].c * int(np.asarray(c).reshape(-1)[0]))]
            return True
    return False


def _follow(g: _Graph, node: NodeProto) -> None:
    """Apply the node's rule when it touches the batch; raise :class:`_Mixes` when it mixes rows."""
    inputs = [x for x in node.input if x]
    touches = [x for x in inputs if x in g.axis or x in g.shape_vals or x in g.n_values]
    if _captured(node) & (set(g.axis) | set(g.shape_vals) | g.n_values):
        raise _Mixes("runs a subgraph over batch-carrying values")
    if not touches:
        _fold(g, node)
        return
    if node.op_type == "Mul" and _scaled_batch(g, node):
        return
    if any(x in g.n_values for x in inputs) or (
        any(x in g.shape_vals for x in inputs) and node.op_type not in _SHAPE_PASS | {"Expand", "ConstantOfShape"}
    ):
        raise _Mixes("uses the batch size as a value")
    if node.op_type in _SHAPE_VAL_KEEPS and inputs[0] in g.shape_vals:
        g.shape_vals[node.output[0]] = g.shape_vals[inputs[0]]  # the same elements, in another rank or type
        return
    rule = _rule_for(node)
    if rule is None:
        raise _Mixes("is an operator this analysis does not know; it cannot tell whether rows stay independent")
    rule(g, node)
    _infer_ranks(g, node)


_RANK_OF_INPUT = {"Flatten": lambda r, n: 2, "FeatureVectorizer": lambda r, n: 2, "DictVectorizer": lambda r, n: 2,
                  "OneHotEncoder": lambda r, n: r + 1, "OneHot": lambda r, n: r + 1,
                  "ArgMax": lambda r, n: r if _attr(n, "keepdims", 1) else r - 1,
                  "ArgMin": lambda r, n: r if _attr(n, "keepdims", 1) else r - 1}
"""Output rank from input 0's rank, for ops whose output rank is not input 0's."""

_ML_CLASSIFIERS = {"LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier"}

_SAME_SHAPE = {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "LpNormalization", "CumSum",
               "MeanVarianceNormalization", "BatchNormalization", "InstanceNormalization", "GroupNormalization",
               "LRN", "Dropout"}
"""Ops whose first output has their first input's shape."""


def _infer_ranks(g: _Graph, node: NodeProto) -> None:
    """Record the ranks of a followed node's outputs where shape inference left them unknown
    (inference stops at ai.onnx.ml ops, whose outputs then lose their ranks downstream)."""
    rank = g.rank(node.input[0]) if node.input else None
    op = node.op_type
    if op in _ML_CLASSIFIERS:
        for i, r in enumerate((1, 2)):
            if i < len(node.output):
                _record_rank(g, node.output[i], r)
    elif op in ("LinearRegressor", "SVMRegressor", "TreeEnsembleRegressor", "TreeEnsemble", "Normalizer"):
        _record_rank(g, node.output[0], 2)
    elif op == "Reshape" and node.input[1] in g.consts:
        _record_rank(g, node.output[0], int(np.asarray(g.consts[node.input[1]]).size))
    elif op in _RANK_OF_INPUT and rank is not None:
        _record_rank(g, node.output[0], _RANK_OF_INPUT[op](rank, node))
    elif op in _ELEMENTWISE | _PER_SAMPLE | _ML_SAME_RANK | {"Transpose", "Concat", "Softmax", "LogSoftmax",
                                                             "LayerNormalization", "CumSum", "TopK", "Tile"}:
        for out in node.output[:1]:
            _record_rank(g, out, rank)
    if op in ("Cast", "Identity", "CastLike") or op in _ML_SAME_RANK | _SAME_SHAPE or (
            op in _ELEMENTWISE and len(node.input) == 1):
        _refine(g, node.output[0], node.input[0])
    if op == "TreeEnsembleClassifier" and len(node.output) > 1:
        classes = _attr(node, "classlabels_int64s") or _attr(node, "classlabels_strings") or []
        if classes:
            g.shapes[node.output[1]] = (None, len(classes))
    if op in _REDUCE or op in ("ArgMax", "ArgMin"):
        _reduced_shape(g, node)


def _reduced_shape(g: _Graph, node: NodeProto) -> None:
    """The output shape of a reduction whose axes are known, from its input's shape."""
    shape = g.shapes.get(node.input[0])
    axes = [_attr(node, "axis", 0)] if node.op_type in ("ArgMax", "ArgMin") else g.ints(node, "axes", 1)
    current = g.shapes.get(node.output[0])
    if shape is None or not axes or (current is not None and None not in current):
        return
    axes = [a + len(shape) if a < 0 else a for a in axes]
    if _attr(node, "keepdims", 1):
        g.shapes[node.output[0]] = tuple(1 if i in axes else d for i, d in enumerate(shape))
    else:
        g.shapes[node.output[0]] = tuple(d for i, d in enumerate(shape) if i not in axes)


def _refine(g: _Graph, out: str, src: str) -> None:
    """Fill unknown dims of ``out`` from ``src`` of the same shape (inference loses what ML ops gave)."""
    a, b = g.shapes.get(out), g.shapes.get(src)
    if a is not None and b is not None and len(a) == len(b):
        g.shapes[out] = tuple(x if x is not None else y for x, y in zip(a, b))


def batch_dependence(model: ModelProto) -> Optional[str]:
    """Why output row ``i`` of ``model`` may depend on input rows other than ``i``, or None.

    Args:
        model: a checked ONNX model whose graph inputs carry the batch on axis 0
            (the convention PREDICT feeds them by).

    Returns:
        None when the analysis follows the batch axis through every node to the
        graph outputs (each output row is a function of its input row alone);
        otherwise a sentence naming the first node that mixes rows or that the
        analysis cannot follow, e.g. ``'node "x_QuantizeLinear" (DynamicQuantizeLinear)
        computes its quantization scale and zero point over the whole batch'``.
        A model with no input of rank 1 or more has nothing to mix: None.

    The analysis is conservative: None is only returned when row independence
    follows from the ONNX operator semantics; the converse (a reason given for a
    model that happens to be row-independent) costs speed, never correctness.
    A model that declares itself row-independent in its ``metadata_props``
    (``modelsql.rows_independent``, which modelsql's own text featurizers carry:
    :func:`modelsql.converters.text.rows_independent`) is taken at its word.
    """
    if any(p.key == "modelsql.rows_independent" for p in model.metadata_props):
        return None
    g = _Graph(model)
    init = {t.name for t in model.graph.initializer}
    for v in model.graph.input:
        if v.name not in init and g.rank(v.name) != 0:
            g.axis[v.name] = 0
            if v.name not in g.shapes and v.type.HasField("tensor_type"):
                g.shapes.pop(v.name, None)
    for node in model.graph.node:
        try:
            _follow(g, node)
        except _Mixes as why:
            return f'node "{node.name or node.output[0]}" ({node.op_type}) {why}'
        except (IndexError, ValueError, TypeError) as exc:
            return f'node "{node.name or node.output[0]}" ({node.op_type}) could not be analysed ({exc})'
    return _outputs_by_row(g, model)


def _outputs_by_row(g: _Graph, model: ModelProto) -> Optional[str]:
    """PREDICT reads output row i as axis-0 slice i: an output with its batch elsewhere (a transpose),
    or holding the batch size as a value, would hand rows other rows' values."""
    for v in model.graph.output:
        if v.name in g.shape_vals or v.name in g.n_values:
            return f'output "{v.name}" holds the batch size as a value'
        if g.fold.get(v.name, (1, 1)) != (1, 1):
            return f'output "{v.name}" has the batch folded together with another axis'
        if g.axis.get(v.name, 0) != 0:
            return f'output "{v.name}" has the batch on axis {g.axis[v.name]}, not on axis 0 (its rows are not the input\'s)'
    return None
