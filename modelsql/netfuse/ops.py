"""NetFuse's per-operator rewrites (see :mod:`modelsql.netfuse` for the paper and the
interface, :mod:`modelsql.netfuse.layout` for the layouts R, K, S and C).

Each handler ``f(merger, node, values, where)`` writes the merged counterpart of one node
whose inputs include at least one per-instance tensor (nodes over shared values only are
copied by the merger; nodes over constants only are replicated per member) and registers
its outputs' layouts, or raises :class:`~modelsql.netfuse.layout.Declined` naming
``where`` and the reason. ``OPS`` maps ONNX operator types to handlers.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from modelsql.netfuse.layout import INT64_MAX, Declined, Value

__all__ = ["OPS"]

OPS: dict = {}


def _handles(*ops: str):
    def register(f):
        for op in ops:
            OPS[op] = f
        return f
    return register


def _attr(node, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _attrs(node, drop: tuple = ()) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


def _shift(axis: int) -> int:
    """An axis of the original tensor as an axis of its S layout."""
    return axis + 1 if axis >= 0 else axis


def _norm(axis: int, rank, where: str) -> int:
    if axis >= 0:
        return axis
    if rank is None:
        raise Declined(where, "a negative axis on a tensor of unknown rank")
    return axis + rank


def _only_first_output(node, where: str, m) -> None:
    used = {x for n in m.models[0].graph.node for x in n.input} | m.outputs
    if any(o and o in used for o in node.output[1:]):
        raise Declined(where, f"{node.op_type}'s extra outputs are used (training-mode statistics or indices)")


def _act(v) -> bool:
    return v is not None and not v.const


# ------------------------------------------------------------ element-wise
_UNARY = ("Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal",
          "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Mish",
          "ThresholdedRelu", "Cast", "Identity", "Dropout", "Not", "Floor", "Ceil", "Round", "Sign", "Sin",
          "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "IsNaN", "IsInf", "Clip", "Shrink")


@_handles(*_UNARY)
def _unary(m, node, vals, where):
    """Per-element: any layout stays as it is (extra inputs, e.g. Clip's bounds, must be shared)."""
    x = vals[0]
    if any(v is not None and v.layout != "R" for v in vals[1:]):
        raise Declined(where, f"{node.op_type}'s extra inputs differ between members")
    if x.layout == "K":
        x = Value("S", m.b.to_s(x, where), rank=x.rank, dims=x.dims)
    m.emit(node, node.op_type, [x.name] + [v.name if v else "" for v in vals[1:]], x.layout, **_attrs(node))
    if node.op_type == "Dropout":
        _only_first_output(node, where, m)


@_handles("CastLike")
def _cast_like(m, node, vals, where):
    x = vals[0] if vals[0].layout != "K" else Value("S", m.b.to_s(vals[0], where), rank=vals[0].rank)
    target = vals[1].name if vals[1].layout != "K" else vals[1].members[0]
    m.emit(node, "CastLike", [x.name, target], x.layout, **_attrs(node))


_BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Less", "LessOrEqual",
              "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu", "Mod", "BitShift")


@_handles(*_BROADCAST)
def _broadcast(m, node, vals, where):
    """Broadcasting element-wise ops: in C when every per-instance input is C and each constant
    lines up with the channel axis (biases ``[C, 1, 1]``: concatenated); otherwise in S, with
    per-instance constants stacked to ``[N, 1, ..., *dims]``."""
    rank = m.shape_of(node.output[0])[0]
    if rank is None:
        raise Declined(where, "the output's rank is unknown")
    if any(v.layout == "C" for v in vals) and not any(v.layout == "S" for v in vals):
        names = [_channel_operand(m, v, rank, node, where) for v in vals]
        if None not in names:
            m.emit(node, node.op_type, names, "C", **_attrs(node))
            return
    names = [_s_operand(m, v, rank, where) for v in vals]
    m.emit(node, node.op_type, names, "S", **_attrs(node))


def _s_operand(m, v, rank: int, where: str) -> str:
    if v.layout == "R":
        return v.name  # broadcasts from the right, as before
    if v.layout == "K":
        return m.b.stacked(v, rank)
    name = m.b.to_s(v, where)
    if v.rank is None:
        raise Declined(where, "an input's rank is unknown")
    return name if v.rank == rank else m.b.unsqueeze(name, list(range(1, 1 + rank - v.rank)))


def _channel_operand(m, v, rank: int, node, where: str):
    """``v`` as an operand against C tensors of rank ``rank``, or None (use S instead)."""
    if v.layout == "C":
        return v.name if v.rank == rank else None  # a lower-rank C operand would broadcast off its channel axis
    if v.rank is None or v.dims is None:
        return None
    axis = 1 - (rank - v.rank)  # the channel axis in v's own dims
    if axis < 0 or v.dims[axis] == 1:
        if v.layout == "R":
            return v.name
        if axis < 0:
            return None
        c = m.shape_of(node.output[0])[1]
        if c is None or not isinstance(c[1], int):
            return None
        reps = [1] * v.rank
        reps[axis] = c[1]
        tiled = [m.b.one("Tile", [x, m.b.const(reps)]) for x in m.b.member_inputs(v)]
        return m.b.one("Concat", tiled, axis=axis) if len(tiled) > 1 else tiled[0]
    if v.layout == "R" and not v.const:
        return m.b.one("Concat", [v.name] * m.n, axis=axis) if m.n > 1 else v.name
    return m.b.concat_on(v, axis)


# --------------------------------------------------------------- convolution
@_handles("Conv")
def _conv(m, node, vals, where):
    """Conv -> grouped Conv (``group * N``) over C, weights and bias concatenated on axis 0; on a
    shared input with ``group == 1``, one wide Conv whose output is already C."""
    x, w = vals[0], vals[1]
    if _act(w) or (len(vals) > 2 and _act(vals[2])):
        raise Declined(where, "Conv weights computed at run time")
    group = _attr(node, "group", 1)
    attrs = _attrs(node, drop=("group",))
    if x.layout == "R" and group == 1:
        xn, g = x.name, 1
    else:
        xn, g = m.b.to_c(x, where), group * m.n
    inputs = [xn, m.b.concat_on(w, 0)] + ([m.b.concat_on(vals[2], 0)] if len(vals) > 2 and vals[2] else [])
    m.emit(node, "Conv", inputs, "C", group=g, **attrs)


@_handles("BatchNormalization", "InstanceNormalization")
def _channel_norm(m, node, vals, where):
    """Per-channel normalization over C with concatenated parameters."""
    if _attr(node, "training_mode", 0):
        raise Declined(where, "BatchNormalization in training mode")
    _only_first_output(node, where, m)
    if any(_act(v) for v in vals[1:]):
        raise Declined(where, "normalization parameters computed at run time")
    inputs = [m.b.to_c(vals[0], where)] + [m.b.concat_on(v, 0) for v in vals[1:]]
    m.emit(node, node.op_type, inputs, "C", **_attrs(node))


@_handles("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _pool(m, node, vals, where):
    """Pooling works per channel: unchanged over C."""
    if node.op_type == "MaxPool":
        _only_first_output(node, where, m)
    m.emit(node, node.op_type, [m.b.to_c(vals[0], where)], "C", **_attrs(node))


# --------------------------------------------------------- matrix products
@_handles("Gemm")
def _gemm(m, node, vals, where):
    """Gemm -> batched MatMul over S with stacked ``B`` (``[N, K, M]``) and bias ``[N, 1, M]``;
    on a shared input, one wide Gemm with ``B`` concatenated to ``[K, N*M]`` (output C)."""
    a, bm, c = vals[0], vals[1], vals[2] if len(vals) > 2 else None
    alpha, beta = _attr(node, "alpha", 1.0), _attr(node, "beta", 1.0)
    trans_a, trans_b = _attr(node, "transA", 0), _attr(node, "transB", 0)
    if trans_a or _act(bm) or _act(c):
        raise Declined(where, "Gemm with transA or weights computed at run time")
    if a.layout == "R" and not a.const:
        wide = [m.b.one("Transpose", [w], perm=[1, 0]) if trans_b else w for w in m.b.member_inputs(bm)]
        inputs = [a.name, m.b.one("Concat", wide, axis=1) if m.n > 1 else wide[0]]
        if c is not None:
            inputs.append(_wide_bias(m, c, bm, trans_b, where))
        m.emit(node, "Gemm", inputs, "C", alpha=alpha, beta=beta)
        return
    if m.dense == "conv" and bm.layout == "K" and a.rank == 2:
        _dense_as_conv(m, node, a, bm, c, trans_b, alpha, beta, where)
        return
    xs = m.b.to_s(a, where)
    w = m.b.stacked(bm, 2) if bm.layout == "K" else bm.name
    if trans_b:
        w = m.b.one("Transpose", [w], perm=[0, 2, 1] if bm.layout == "K" else [1, 0])
    y = m.b.one("MatMul", [xs, w])
    if alpha != 1.0:
        y = m.b.one("Mul", [y, m.b.const(alpha, np.float32)])
    if c is not None:
        bias = m.b.stacked(c, 2) if c.layout == "K" else c.name
        if beta != 1.0:
            bias = m.b.one("Mul", [bias, m.b.const(beta, np.float32)])
        y = m.b.one("Add", [y, bias])
    m.emit(node, "Identity", [y], "S")


def _dense_as_conv(m, node, a, w, c, trans_b: bool, alpha: float, beta: float, where: str) -> None:
    """A 2-D product ``a @ w (+ c)`` as a grouped 1x1 Conv over C (``group = N``): faster than a
    batched MatMul in ONNX Runtime for a few rows per instance (NetFuse's FC-as-grouped-conv)."""
    b = m.b
    k = w.dims[1] if trans_b else w.dims[0]
    x4 = b.one("Reshape", [b.to_c(_with_dims(a, k), where), b.const([0, m.n * k, 1, 1])])
    kernels = []
    for name in b.member_inputs(w):
        wt = name if trans_b else b.one("Transpose", [name], perm=[1, 0])
        kernels.append(b.one("Unsqueeze", [wt, b.const([2, 3])]) if m.opset >= 13
                       else b.one("Unsqueeze", [wt], axes=[2, 3]))
    inputs = [x4, b.one("Concat", kernels, axis=0) if m.n > 1 else kernels[0]]
    if alpha != 1.0:
        inputs[1] = b.one("Mul", [inputs[1], b.const(alpha, np.float32)])
    if c is not None:
        bias = _wide_bias(m, c, w, trans_b, where)
        inputs.append(bias if beta == 1.0 else b.one("Mul", [bias, b.const(beta, np.float32)]))
    y = b.one("Conv", inputs, group=m.n, kernel_shape=[1, 1])
    width = w.dims[0] if trans_b else w.dims[1]
    m.emit(node, "Reshape", [y, b.const([0, m.n * width])], "C")


def _with_dims(v, k: int):
    """``v`` (rank 2) with its channel dim known to be ``k`` (from the weight)."""
    return Value(v.layout, v.name, v.members, 2, (None, k), v.const, v.elem)


def _wide_bias(m, c, bm, trans_b: bool, where: str) -> str:
    if c.rank not in (1, 2) or (c.rank == 2 and c.dims[0] != 1):
        raise Declined(where, "a Gemm bias that is not per output column")
    width = bm.dims[0] if trans_b else bm.dims[1]
    parts = []
    for name in m.b.member_inputs(c):
        flat = m.b.one("Reshape", [name, m.b.const([-1])])
        parts.append(flat if c.dims[-1] == width else m.b.one("Expand", [flat, m.b.const([width])]))
    return m.b.one("Concat", parts, axis=0) if m.n > 1 else parts[0]


@_handles("MatMul")
def _matmul(m, node, vals, where):
    """MatMul -> batched MatMul over S (constants stacked, ranks aligned); a shared 2-D input
    times per-instance weights is one wide MatMul (output C)."""
    a, b = vals
    if any(v.rank is None or v.rank < 2 for v in vals):
        raise Declined(where, "MatMul on a vector or a tensor of unknown rank")
    if a.layout == "R" and not a.const and b.layout == "K" and a.rank == 2 and b.rank == 2:
        m.emit(node, "MatMul", [a.name, m.b.concat_on(b, 1)], "C")
        return
    if m.dense == "conv" and b.layout == "K" and a.rank == 2 and b.rank == 2 and not a.const:
        _dense_as_conv(m, node, a, b, None, False, 1.0, 1.0, where)
        return
    rank = max(a.rank, b.rank)
    m.emit(node, "MatMul", [_s_operand(m, a, rank, where), _s_operand(m, b, rank, where)], "S")


# ------------------------------------------------------------ shape and axes
def _in_s(m, v, where) -> str:
    if v.layout == "R" and v.const:
        raise Declined(where, "a shared constant where a per-instance tensor was expected")
    return m.b.to_s(v, where)


@_handles("Reshape")
def _reshape(m, node, vals, where):
    """Reshape over S: the target gains a leading 0 (copy N), or N itself under ``allowzero``
    (where a 0 is a literal zero-sized dim)."""
    x, shape = vals
    if shape.layout != "R":
        raise Declined(where, "a Reshape target that differs between members")
    allowzero = _attr(node, "allowzero", 0)
    target = _shifted_shape(m, shape, where, lead=m.n if allowzero else 0)
    m.emit(node, "Reshape", [_in_s(m, x, where), target], "S", **_attrs(node))


def _shifted_shape(m, shape, where: str, lead: int) -> str:
    if shape.const and shape.name in m.ref_values:
        return m.b.const([lead] + [int(d) for d in m.ref_values[shape.name]])
    return m.b.one("Concat", [m.b.const([lead]), shape.name], axis=0)


@_handles("Flatten")
def _flatten(m, node, vals, where):
    x = vals[0]
    axis = _norm(_attr(node, "axis", 1), x.rank, where)
    if axis in (0, 1):
        target = [0, 1, -1] if axis == 0 else [0, 0, -1]
    else:
        tail = x.dims[axis:] if x.dims else [None]
        if not all(isinstance(d, int) for d in tail):
            raise Declined(where, "Flatten past axis 1 with dynamic trailing dims")
        target = [0, -1, int(np.prod(tail))]
    m.emit(node, "Reshape", [_in_s(m, x, where), m.b.const(target)], "S")


@_handles("Transpose")
def _transpose(m, node, vals, where):
    x = vals[0]
    if x.rank is None:
        raise Declined(where, "Transpose of a tensor of unknown rank")
    perm = _attr(node, "perm", list(reversed(range(x.rank))))
    m.emit(node, "Transpose", [_in_s(m, x, where)], "S", perm=[0] + [p + 1 for p in perm])


@_handles("Squeeze", "Unsqueeze")
def _squeeze(m, node, vals, where):
    x = vals[0]
    if len(vals) > 1 and vals[1] is not None:
        axes = m.const_value(vals[1], "axes", where)
    else:
        axes = _attr(node, "axes")
    if axes is None:
        raise Declined(where, "Squeeze without axes")
    new = [_shift(int(a)) for a in np.ravel(axes)]
    xs = _in_s(m, x, where)
    if m.opset >= 13:
        m.emit(node, node.op_type, [xs, m.b.const(new)], "S")
    else:
        m.emit(node, node.op_type, [xs], "S", axes=new)


@_handles("Concat")
def _concat(m, node, vals, where):
    axis = _attr(node, "axis")
    rank = m.shape_of(node.output[0])[0]
    if rank is None:
        raise Declined(where, "Concat of tensors of unknown rank")
    if all(v.layout == "C" for v in vals) and _norm(axis, rank, where) >= 2:
        m.emit(node, "Concat", [v.name for v in vals], "C", axis=axis)
        return
    m.emit(node, "Concat", [m.b.to_s(v, where) for v in vals], "S", axis=_shift(axis))


@_handles("Split")
def _split(m, node, vals, where):
    rest = [v.name if v is not None else "" for v in vals[1:]]
    if any(v is not None and v.layout != "R" for v in vals[1:]):
        raise Declined(where, "Split sizes that differ between members")
    attrs = _attrs(node, drop=("axis",))
    m.emit(node, "Split", [_in_s(m, vals[0], where)] + rest, "S", axis=_shift(_attr(node, "axis", 0)), **attrs)


@_handles("Slice")
def _slice(m, node, vals, where):
    x, starts = vals[0], vals[1]
    if any(v is not None and v.layout != "R" for v in vals[1:]):
        raise Declined(where, "Slice bounds that differ between members")
    if len(vals) > 3 and vals[3] is not None:
        axes = m.const_value(vals[3], "Slice axes", where)
    else:
        known = m.ref_values.get(starts.name) if starts.const else None
        if known is None:
            raise Declined(where, "Slice without axes and with computed starts")
        axes = np.arange(len(known))
    inputs = [_in_s(m, x, where), vals[1].name, vals[2].name, m.b.const([_shift(int(a)) for a in axes])]
    if len(vals) > 4 and vals[4] is not None:
        inputs.append(vals[4].name)
    m.emit(node, "Slice", inputs, "S")


@_handles("Shape")
def _shape(m, node, vals, where):
    """The original shape: ``Shape`` of S without its first entry, of C with the channel divided by N."""
    x = vals[0]
    start, end = _attr(node, "start"), _attr(node, "end")
    if x.layout == "C":
        full = m.b.one("Div", [m.b.one("Shape", [x.name]), m.b.const([1, m.n] + [1] * (x.rank - 2))])
        s = 0 if start is None else start
        e = INT64_MAX if end is None else end
        m.emit(node, "Slice", [full, m.b.const([s]), m.b.const([e])], "R")
    else:
        xs = m.b.to_s(x, where)
        s = 1 if start is None else _shift(start)
        e = INT64_MAX if end is None else _shift(end)
        full = m.b.one("Shape", [xs])
        m.emit(node, "Slice", [full, m.b.const([s]), m.b.const([e])], "R")
    m.values[node.output[0]].const = False


@_handles("Expand")
def _expand(m, node, vals, where):
    x, shape = vals
    if shape.layout != "R":
        raise Declined(where, "an Expand shape that differs between members")
    rank = m.shape_of(node.output[0])[0]
    if rank is None or x.rank is None:
        raise Declined(where, "Expand of unknown rank")
    m.emit(node, "Expand", [_s_operand(m, x, rank, where), _shifted_shape(m, shape, where, lead=1)], "S")


@_handles("Tile")
def _tile(m, node, vals, where):
    x, reps = vals
    if reps.layout != "R":
        raise Declined(where, "Tile repeats that differ between members")
    m.emit(node, "Tile", [_in_s(m, x, where), _shifted_shape(m, reps, where, lead=1)], "S")


@_handles("Pad")
def _pad(m, node, vals, where):
    x = vals[0]
    if len(vals) > 3 and vals[3] is not None:
        raise Declined(where, "Pad with axes")
    pads = m.const_value(vals[1], "pads", where) if len(vals) > 1 else np.array(_attr(node, "pads"))
    r = len(pads) // 2
    new = [0] + [int(p) for p in pads[:r]] + [0] + [int(p) for p in pads[r:]]
    rest = [vals[2].name] if len(vals) > 2 and vals[2] is not None else []
    if rest and vals[2].layout != "R":
        raise Declined(where, "a Pad value that differs between members")
    inputs = [_in_s(m, x, where), m.b.const(new)] + rest
    m.emit(node, "Pad", inputs, "S", **_attrs(node, drop=("pads",)))


# ------------------------------------------------------------ axis operators
def _axis_default(node, opset: int) -> int:
    if node.op_type in ("Softmax", "LogSoftmax", "Hardmax"):
        return 1 if opset < 13 else -1
    return 0


@_handles("Softmax", "LogSoftmax", "Hardmax", "ArgMax", "ArgMin", "CumSum")
def _axis_op(m, node, vals, where):
    """One-axis operators: over C when the axis is spatial, else over S with the axis shifted."""
    x = vals[0]
    if node.op_type == "CumSum":
        axis = int(np.ravel(m.const_value(vals[1], "the CumSum axis", where))[0])
    else:
        axis = _attr(node, "axis", _axis_default(node, m.opset))
    keep = _attrs(node, drop=("axis",))
    if x.layout == "C" and _norm(axis, x.rank, where) >= 2:
        m.emit(node, node.op_type, [x.name] + [v.name for v in vals[1:]], "C", **keep, **_axis_attr(node, axis))
        return
    xs = _in_s(m, x, where)
    if node.op_type == "CumSum":
        m.emit(node, "CumSum", [xs, m.b.const(_shift(axis))], "S", **keep)
    else:
        m.emit(node, node.op_type, [xs], "S", axis=_shift(axis), **keep)


def _axis_attr(node, axis: int) -> dict:
    return {} if node.op_type == "CumSum" else {"axis": axis}


_REDUCE = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@_handles(*_REDUCE)
def _reduce(m, node, vals, where):
    """Reductions over named axes: over C when every axis is spatial, else over S shifted."""
    x = vals[0]
    axes_input = len(vals) > 1 and vals[1] is not None
    axes = m.const_value(vals[1], "reduction axes", where) if axes_input else _attr(node, "axes")
    if axes is None or len(np.ravel(axes)) == 0:
        raise Declined(where, f"{node.op_type} over all axes would mix the members")
    axes = [int(a) for a in np.ravel(axes)]
    keep = _attrs(node, drop=("axes",))
    if x.layout == "C" and min(_norm(a, x.rank, where) for a in axes) >= 2:
        new, xn, layout = axes, x.name, "C"
    else:
        new, xn, layout = [_shift(a) for a in axes], _in_s(m, x, where), "S"
    if axes_input:
        m.emit(node, node.op_type, [xn, m.b.const(new)], layout, **keep)
    else:
        m.emit(node, node.op_type, [xn], layout, axes=new, **keep)


@_handles("LayerNormalization")
def _layer_norm(m, node, vals, where):
    """LayerNormalization over S; per-instance scale and bias become a plain normalization
    (unit scale, zero bias) followed by a stacked Mul and Add."""
    _only_first_output(node, where, m)
    x, scale = vals[0], vals[1]
    bias = vals[2] if len(vals) > 2 else None
    axis = _attr(node, "axis", -1)
    attrs = _attrs(node, drop=("axis",))
    xs = _in_s(m, x, where)
    if scale.layout == "R" and (bias is None or bias.layout == "R"):
        inputs = [xs, scale.name] + ([bias.name] if bias is not None else [])
        m.emit(node, "LayerNormalization", inputs, "S", axis=_shift(axis), **attrs)
        return
    if _act(scale) or _act(bias) or scale.dims is None:
        raise Declined(where, "LayerNormalization parameters computed at run time")
    dtype = helper.tensor_dtype_to_np_dtype(scale.elem or TensorProto.FLOAT)
    ones, zeros = m.b.const(np.ones(scale.dims), dtype), m.b.const(np.zeros(scale.dims), dtype)
    y = m.b.one("LayerNormalization", [xs, ones, zeros], axis=_shift(axis), **attrs)
    y = m.b.one("Mul", [y, m.b.stacked(scale, x.rank)])
    if bias is not None:
        y = m.b.one("Add", [y, m.b.stacked(bias, x.rank)])
    m.emit(node, "Identity", [y], "S")


# ------------------------------------------------------------------ gather
@_handles("Gather")
def _gather(m, node, vals, where):
    """Per-instance tables (embeddings): one Gather over the tables concatenated, indices offset
    by ``i * rows`` (negative ones wrapped first; out-of-range ones kept out of range, so the
    merged model fails as a member would). Per-instance data with shared indices: axis shifted."""
    data, idx = vals
    axis = _attr(node, "axis", 0)
    if data.layout == "K":
        if _norm(axis, data.rank, where) != 0 or data.dims is None:
            raise Declined(where, "a per-instance Gather table on an axis other than 0")
        m.emit(node, "Gather", [m.b.concat_on(data, 0), _offset_indices(m, idx, data.dims[0], where)], "S",
               axis=0)
        return
    if idx.layout == "R":
        m.emit(node, "Gather", [_in_s(m, data, where), idx.name], "S", axis=_shift(_norm(axis, data.rank, where)))
        return
    if data.layout == "R" and _norm(axis, data.rank, where) == 0:
        m.emit(node, "Gather", [data.name, m.b.to_s(idx, where)], "S", axis=0)
        return
    raise Declined(where, "a Gather whose data and indices both differ between members")


def _offset_indices(m, idx, rows: int, where: str) -> str:
    b = m.b
    xs = b.to_s(idx, where)
    rank = idx.rank
    dtype = np.int32 if idx.elem == TensorProto.INT32 else np.int64
    size = b.const(rows, dtype)
    wrapped = b.one("Where", [b.one("Less", [xs, b.const(0, dtype)]), b.one("Add", [xs, size]), xs])
    valid = b.one("And", [b.one("GreaterOrEqual", [wrapped, b.const(0, dtype)]), b.one("Less", [wrapped, size])])
    offsets = b.const(np.arange(m.n).reshape([m.n] + [1] * rank) * rows, dtype)
    shifted = b.one("Add", [wrapped, offsets])
    return b.one("Where", [valid, shifted, b.const(m.n * rows, dtype)])
