"""The tensor layouts of a NetFuse-merged graph and the nodes that convert between them.

NetFuse (Jeong et al., "NetFuse: Short-Circuiting Neural Networks by Merging
Model Instances", 2020) runs N copies of one architecture with different weights
as one graph. Every tensor of the merged graph holds the N instances' values of
one original tensor in one of these layouts (``N`` = number of members; shapes are
the original tensor's shape ``[d0, d1, ...]``):

``R`` (replicated)
    one tensor ``[d0, d1, ...]`` equal for every instance: a shared input row, a
    constant equal in all members, a shape computation.
``K`` (per-instance constant)
    a constant that differs between members (weights), kept as N separate
    initializers (the members' own tensors, so their blobs are shared) and combined
    by foldable nodes (Concat, Reshape, Transpose) where an operator needs them.
``S`` (stacked)
    ``[N, d0, d1, ...]``: instance ``i`` at index ``i`` of a new leading axis.
``C`` (channel-concatenated)
    ``[d0, N*d1, d2, ...]``: instances side by side on the channel axis, the layout
    a grouped convolution reads (NetFuse's rewrite of Conv and BatchNormalization).

:class:`GraphBuilder` holds the merged graph being written and converts a value to
the layout an operator needs (``to_s``, ``to_c``, ``stacked``, ``concat_on``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper

__all__ = ["Value", "GraphBuilder", "Declined", "INT64_MAX"]

INT64_MAX = np.iinfo(np.int64).max


class Declined(Exception):
    """The merge cannot rewrite one node exactly: ``node`` (its name in the first member, or
    ``"#i OpType"``) and ``reason`` (why)."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"{node}: {reason}")
        self.node, self.reason = node, reason


@dataclass
class Value:
    """One original tensor in the merged graph.

    Attributes:
        layout: ``"R"``, ``"K"``, ``"S"`` or ``"C"`` (module docstring).
        name: the merged tensor (R, S, C); for K, None.
        members: for K, the N per-member tensor names; else None.
        rank: rank of the original tensor (None when shape inference could not tell).
        dims: the original tensor's dims (int, or None for a symbolic/unknown dim), or None.
        const: for R and K constants, True (their values are known at merge time).
        elem: the ONNX element type (``TensorProto.FLOAT`` ...), when known.
    """

    layout: str
    name: Optional[str] = None
    members: Optional[tuple[str, ...]] = None
    rank: Optional[int] = None
    dims: Optional[tuple] = None
    const: bool = False
    elem: Optional[int] = None

    def merged(self) -> str:
        """``name``: the one merged tensor of an R, S or C value."""
        assert self.name is not None, f"a value in layout {self.layout} has no merged tensor"
        return self.name

    def per_member(self) -> tuple[str, ...]:
        """``members``: the N per-member tensors of a K value."""
        assert self.members is not None, f"a value in layout {self.layout} has no per-member tensors"
        return self.members


class GraphBuilder:
    """The merged graph being written: nodes, initializers, fresh names and layout conversions.

    Args:
        n: the number of members.
        opset: the members' default-domain opset (decides Unsqueeze's axes as attribute or input).
    """

    def __init__(self, n: int, opset: int) -> None:
        self.n, self.opset = n, opset
        self.nodes: list = []
        self.initializers: list[TensorProto] = []
        self._counter = 0
        self._consts: dict[bytes, str] = {}
        self._converted: dict[tuple[str, str], str] = {}

    # ----------------------------------------------------------------- writing
    def fresh(self, hint: str = "t") -> str:
        self._counter += 1
        return f"netfuse/{hint}_{self._counter}"

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, hint: str = "", **attrs) -> list[str]:
        """Append one node; returns its output names."""
        outs = [self.fresh(hint or op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.fresh(op), **attrs))
        return outs

    def one(self, op: str, inputs: Sequence[str], **attrs) -> str:
        return self.node(op, inputs, 1, **attrs)[0]

    def const(self, value, dtype=np.int64) -> str:
        """An inline initializer holding ``value`` (deduplicated by content)."""
        arr = np.asarray(value, dtype=dtype)
        key = hashlib.sha256(arr.dtype.str.encode() + str(arr.shape).encode() + arr.tobytes()).digest()
        if key not in self._consts:
            name = self.fresh("const")
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return self._consts[key]

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.one("Unsqueeze", [x, self.const(list(axes))])
        return self.one("Unsqueeze", [x], axes=list(axes))

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.one("Squeeze", [x, self.const(list(axes))])
        return self.one("Squeeze", [x], axes=list(axes))

    def shape_slice(self, x: str, start: int, end: int = INT64_MAX) -> str:
        """``Shape(x)[start:end]`` (int64 1-D)."""
        shape = self.one("Shape", [x])
        return self.one("Slice", [shape, self.const([start]), self.const([end])])

    # ------------------------------------------------------------ constants
    def member_inputs(self, v: Value) -> list[str]:
        """The N per-member names of a constant (an R constant repeats its one name)."""
        return list(v.per_member()) if v.layout == "K" else [v.merged()] * self.n

    def stacked(self, v: Value, rank: int) -> str:
        """A constant (R or K) as S, broadcast-ready against S tensors of original rank ``rank``:
        ``[N, 1, ..., 1, *dims]`` (foldable: ONNX Runtime folds it when the session loads)."""
        assert v.dims is not None, "a constant's dims are known"
        dims = list(v.dims)
        shape = self.const([1] * (1 + rank - len(dims)) + dims)
        parts = [self.one("Reshape", [m, shape]) for m in self.member_inputs(v)]
        return parts[0] if self.n == 1 else self.one("Concat", parts, axis=0)

    def concat_on(self, v: Value, axis: int) -> str:
        """A constant (R or K) with the members concatenated on ``axis`` (foldable)."""
        parts = self.member_inputs(v)
        return parts[0] if self.n == 1 else self.one("Concat", parts, axis=axis)

    # ---------------------------------------------------------- activations
    def to_s(self, v: Value, where: str) -> str:
        """``v`` in layout S (``[N, *dims]``)."""
        if v.layout == "S":
            return v.merged()
        if v.layout == "K" or (v.layout == "R" and v.const):
            return self.stacked(v, self._need_rank(v, where))
        key = (v.merged(), "S")
        if key not in self._converted:
            rank = self._need_rank(v, where)
            if v.layout == "R":
                x = self.unsqueeze(v.merged(), [0])
                out = self.one("Expand", [x, self.const([self.n] + [1] * rank)])
            else:
                out = self._c_to_s(v, where)
            self._converted[key] = out
        return self._converted[key]

    def to_c(self, v: Value, where: str) -> str:
        """``v`` in layout C (``[d0, N*d1, ...]``); needs rank >= 2 and a known channel dim."""
        if v.layout == "C":
            return v.merged()
        if self._need_rank(v, where) < 2:
            raise Declined(where, "a tensor of rank < 2 has no channel axis")
        if v.layout == "K" or (v.layout == "R" and v.const):
            return self.concat_on(v, 1)
        key = (v.merged(), "C")
        if key not in self._converted:
            if v.layout == "R":
                out = self.one("Concat", [v.merged()] * self.n, axis=1) if self.n > 1 else v.merged()
            else:
                out = self._s_to_c(v, where)
            self._converted[key] = out
        return self._converted[key]

    def _channels(self, v: Value, where: str) -> int:
        c = v.dims[1] if v.dims is not None and len(v.dims) > 1 else None
        if not isinstance(c, int):
            raise Declined(where, "the channel dimension is not known statically")
        return c

    def _s_to_c(self, v: Value, where: str) -> str:
        c = self._channels(v, where)
        perm = [1, 0] + list(range(2, self._need_rank(v, where) + 1))
        t = self.one("Transpose", [v.merged()], perm=perm)  # [d0, N, d1, ...]
        head = [0, self.n * c]
        return self.one("Reshape", [t, self._shape_with(t, head, v, 3)])

    def _c_to_s(self, v: Value, where: str) -> str:
        c = self._channels(v, where)
        t = self.one("Reshape", [v.merged(), self._shape_with(v.merged(), [0, self.n, c], v, 2)])  # [d0, N, d1, ...]
        perm = [1, 0] + list(range(2, self._need_rank(v, where) + 1))
        return self.one("Transpose", [t], perm=perm)

    def _shape_with(self, x: str, head: list[int], v: Value, tail_from: int) -> str:
        """A Reshape target: ``head`` then ``v``'s dims from index 2 on (static when known, else
        ``Shape(x)[tail_from:]``)."""
        tail = list(v.dims[2:]) if v.dims is not None else [None]
        if all(isinstance(d, int) for d in tail):
            return self.const(head + tail)
        return self.one("Concat", [self.const(head), self.shape_slice(x, tail_from)], axis=0)

    @staticmethod
    def _need_rank(v: Value, where: str) -> int:
        """``v``'s rank; Declined when it is unknown (or a K value's dims are)."""
        if v.rank is None or (v.layout in ("K",) and v.dims is None):
            raise Declined(where, "the rank of an input is unknown (shape inference could not tell)")
        return v.rank


def tensor_type(elem_type: int, dims: Sequence) -> "helper.TypeProto":
    """A tensor TypeProto with ``dims`` (int, str or None each)."""
    return helper.make_tensor_type_proto(elem_type, list(dims))


def elem_of(dtype: int) -> np.dtype:
    return helper.tensor_dtype_to_np_dtype(dtype)


__all__ += ["tensor_type", "elem_of"]
