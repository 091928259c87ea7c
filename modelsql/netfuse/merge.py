"""NetFuse: N models of one architecture with different weights merged into one ONNX graph.

NetFuse (Jeong, Kim, Cho and Lee, "NetFuse: Short-Circuiting Neural Networks by
Merging Model Instances", arXiv:2009.13044, 2020) replaces each operator of N
same-architecture networks by a more general counterpart that computes all N at
once: convolution becomes grouped convolution with the weights concatenated
(``group * N``), matrix multiplication becomes batched matrix multiplication with
the weights stacked, batch normalization and biases take concatenated
parameters, layer normalization becomes normalization without affine followed by
per-instance scale and bias, an embedding lookup becomes one Gather with
per-instance offsets, element-wise operators and pooling stay as they are, and
reshapes, transposes and axes gain the instance axis. The merged graph runs the
N members on N different inputs in one call.

:func:`merge_models` is that rewrite from ONNX to ONNX, so every backend runs the
result. It works on the graph only: the members' weights are referenced as
they are (their own initializers, combined by Concat/Reshape/Transpose nodes that
ONNX Runtime folds when the session loads), so a merged graph stored beside its
members shares their blobs. The layouts of the merged tensors are described in
:mod:`modelsql.netfuse.layout`; the per-operator rewrites live in
:mod:`modelsql.netfuse.ops`. An operator it cannot rewrite exactly makes it
decline (:class:`MergeDeclined` names the node and the reason): never a merged
graph that computes something else.

Interface of the merged model (``N`` members, each with input ``x: [B, ...]`` and
output ``y: [B, ...]``): input ``x: [N, B, ...]`` (instance ``i`` at index ``i``;
every member gets the same ``B`` rows, so callers pad) or, with
``shared_input=True``, ``x: [B, ...]`` fed to every member; output ``y: [N, B, ...]``.
"""

from __future__ import annotations

import hashlib
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from modelsql.errors import NotSupportedError
from modelsql.netfuse.layout import Declined, GraphBuilder, Value, tensor_type
from modelsql.onnxformat.inference import infer_shapes

__all__ = ["merge_models", "MergeDeclined", "MIN_OPSET", "DENSE_LOWERINGS"]

MIN_OPSET = 11
"""The oldest default-domain opset a member may use (Slice/Squeeze semantics the rewrite relies on)."""


class MergeDeclined(NotSupportedError):
    """The members cannot be merged exactly (code ``merge_declined``).

    Attributes:
        node: the node that declined (its name in the first member, or ``"#i OpType"``), or
            ``"graph"`` when the members themselves differ.
        reason: why, in words.
    """

    code = "merge_declined"

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"NetFuse merge declined at {node}: {reason}")
        self.node, self.reason = node, reason


DENSE_LOWERINGS = ("matmul", "conv")
"""How a per-instance 2-D product is written: a batched MatMul over ``[N, B, K]`` (best for many rows
per instance) or a grouped 1x1 Conv over ``[B, N*K, 1, 1]`` (best for one or a few rows)."""


def merge_models(models: Sequence[ModelProto], *, shared_input: bool = False,
                 reference: Optional[ModelProto] = None, dense: str = "matmul") -> ModelProto:
    """One ONNX model computing all of ``models`` (same architecture, different weights) at once.

    Args:
        models: N >= 1 members with one topology (equal node lists, attributes, input and
            output signatures; see :func:`modelsql.onnxformat.identity.architecture_fingerprint`).
            Their initializers may be full tensors or the store's stripped ones (the merge reads
            no weight data: equal weights are recognised by their stored digest or bytes).
        shared_input: every member reads the same input rows (``[B, ...]`` instead of
            ``[N, B, ...]``); the first layers then become one wide operator.
        reference: a full (not stripped) copy of the first member, for shape inference and the
            values of shape constants; defaults to ``models[0]``.
        dense: one of :data:`DENSE_LOWERINGS`, how per-instance 2-D Gemm/MatMul are written.

    Returns:
        The merged model (module docstring for its interface), opset and IR version of the members.

    Raises:
        MergeDeclined: a node has no exact merged counterpart, or the members differ.
    """
    if dense not in DENSE_LOWERINGS:
        raise ValueError(f"dense must be one of {DENSE_LOWERINGS}, not {dense!r}")
    models = list(models)
    if not models:
        raise MergeDeclined("graph", "no members")
    try:
        return _Merger(models, shared_input, reference or models[0], dense).run()
    except Declined as exc:
        raise MergeDeclined(exc.node, exc.reason) from None


def node_label(node, index: int) -> str:
    return f'node "{node.name}" ({node.op_type})' if node.name else f"node #{index} ({node.op_type})"


def _tensor_key(t: TensorProto, member: int) -> bytes:
    """Equality key of a constant: its stored digest when stripped by the store, else its data. A tensor
    whose data is in an external file not loaded is taken to differ from every other member's (its file
    name says nothing of its values): kept per member, which is exact, only not shared."""
    entries = {e.key: e.value for e in t.external_data}
    data = entries.get("digest")
    if t.data_location == TensorProto.EXTERNAL and data is None:
        data = f"unloaded external data of member {member}: " + repr(sorted(entries.items()))
    body = data.encode() if data else _data_bytes(t)
    return hashlib.sha256(str((t.data_type, tuple(t.dims))).encode() + body).digest()


def _check_external(tensors: Sequence[TensorProto], name: str) -> None:
    """Members' tensors in unloaded external files must name distinct places: two members' ``weights.data``
    from two folders would both read one file beside the merged graph.

    Raises:
        Declined: two members point at the same location and offset.
    """
    places = [tuple(sorted((e.key, e.value) for e in t.external_data if e.key in ("location", "offset")))
              for t in tensors if t.data_location == TensorProto.EXTERNAL
              and not any(e.key == "digest" for e in t.external_data)]
    if len(set(places)) < len(places):
        raise Declined("graph", f'initializer "{name}" of two members points at the same external data file '
                                f"({dict(places[0]).get('location')}): load the members with their data first")


def _data_bytes(t: TensorProto) -> bytes:
    c = TensorProto()
    c.CopyFrom(t)
    c.name = ""
    c.doc_string = ""
    return c.SerializeToString(deterministic=True)


def _constant_tensor(node) -> TensorProto:
    """The value of a Constant node as a TensorProto (any of its attribute forms)."""
    a = node.attribute[0]
    if a.HasField("t"):
        return a.t
    if a.HasField("sparse_tensor"):
        return a.sparse_tensor.values
    value = helper.get_attribute_value(a)
    if a.name in ("value_string", "value_strings"):
        items = [value] if a.name == "value_string" else list(value)
        dims = [] if a.name == "value_string" else [len(items)]
        return helper.make_tensor("", TensorProto.STRING, dims, items)
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32 if "float" in a.name else np.int64))


class _Merger:
    def __init__(self, models: list[ModelProto], shared_input: bool, reference: ModelProto, dense: str) -> None:
        if not models:
            raise Declined("graph", "no members")
        self.models, self.shared, self.dense = models, shared_input, dense
        self.n = len(models)
        self.opset = _default_opset(models[0])
        self._check_members()
        assert self.opset is not None  # _check_members declined a graph without one
        self.b = GraphBuilder(self.n, self.opset)
        self.info = _shape_info(reference)
        self.ref_values = _reference_values(reference)
        self.values: dict[str, Value] = {}
        self.outputs = {o.name for o in models[0].graph.output}
        self.corr = self._correspondence()
        self.inits = [{t.name: t for t in m.graph.initializer} for m in models]

    # ------------------------------------------------------------------ checks
    def _check_members(self) -> None:
        if self.opset is None or self.opset < MIN_OPSET:
            raise Declined("graph", f"members use opset {self.opset}; the merge needs opset >= {MIN_OPSET}")
        g0 = self.models[0].graph
        sig0 = _signature(self.models[0])
        for i, m in enumerate(self.models[1:], 1):
            if _signature(m) != sig0:
                raise Declined("graph", f"member {i + 1} differs from member 1 in opset, inputs or outputs")
            ops = [(n.op_type, n.domain, len(n.input), len(n.output)) for n in m.graph.node]
            if ops != [(n.op_type, n.domain, len(n.input), len(n.output)) for n in g0.node]:
                raise Declined("graph", f"member {i + 1} has another topology than member 1")
            for k, (a, b) in enumerate(zip(g0.node, m.graph.node)):
                if _attr_keys(a) != _attr_keys(b):
                    raise Declined(node_label(a, k), f"member {i + 1} has other attributes")

    def _correspondence(self) -> dict[str, list[str]]:
        """Member 0's value name -> the N members' names of the same value (by position)."""
        corr: dict[str, list[str]] = {}

        def link(names: list[str]) -> None:
            if not names[0]:
                return
            known = corr.setdefault(names[0], names)
            if known != names:
                raise Declined("graph", f'value "{names[0]}" is wired differently in another member')

        graphs = [m.graph for m in self.models]
        for vals in zip(*[g.input for g in graphs]):
            link([v.name for v in vals])
        for nodes in zip(*[g.node for g in graphs]):
            for k in range(len(nodes[0].input)):
                link([nd.input[k] for nd in nodes])
            for k in range(len(nodes[0].output)):
                link([nd.output[k] for nd in nodes])
        return corr

    # ----------------------------------------------------------------- values
    def merged_name(self, orig: str) -> str:
        return orig + "/merged" if orig in self.outputs else orig

    def shape_of(self, name: str) -> tuple[Optional[int], Optional[tuple]]:
        return self.info.get(name, (None, None, None))[:2]

    def elem_of(self, name: str) -> Optional[int]:
        return self.info.get(name, (None, None, None))[2]

    def value(self, name: str) -> Optional[Value]:
        if not name:
            return None
        if name not in self.values:
            self.values[name] = self._initializer(name)
        return self.values[name]

    def _initializer(self, name: str) -> Value:
        tensors = []
        for i, names in enumerate(self.corr.get(name, [name] * self.n)):
            t = self.inits[i].get(names)
            if t is None:
                raise Declined("graph", f'value "{name}" is used before it is computed')
            tensors.append(t)
        dims = tuple(tensors[0].dims)
        if any(tuple(t.dims) != dims or t.data_type != tensors[0].data_type for t in tensors):
            raise Declined("graph", f'initializer "{name}" has another shape or type in another member')
        _check_external(tensors, name)
        if len({_tensor_key(t, i) for i, t in enumerate(tensors)}) == 1:
            self.b.initializers.append(_renamed(tensors[0], name))
            return Value("R", name, rank=len(dims), dims=dims, const=True, elem=tensors[0].data_type)
        member_names = tuple(f"{name}@m{i}" for i in range(self.n))
        self.b.initializers.extend(_renamed(t, nm) for t, nm in zip(tensors, member_names))
        return Value("K", members=member_names, rank=len(dims), dims=dims, const=True, elem=tensors[0].data_type)

    def const_value(self, v: Optional[Value], what: str, where: str) -> Optional[np.ndarray]:
        """The value of an R constant known at merge time (a shape, axes); Declined otherwise."""
        if v is None:
            return None
        if v.layout != "R" or not v.const or v.name not in self.ref_values:
            raise Declined(where, f"{what} must be a constant equal in every member")
        return self.ref_values[v.name]

    def result(self, node, layout: str, index: int = 0, name: Optional[str] = None) -> Value:
        """Register output ``index`` of ``node`` as computed in ``layout`` under ``name``."""
        out = node.output[index]
        rank, dims = self.shape_of(out)
        v = Value(layout, name or self.merged_name(out), rank=rank, dims=dims, elem=self.elem_of(out))
        self.values[out] = v
        return v

    def emit(self, node, op: str, inputs: Sequence[str], layout: str, **attrs) -> None:
        """Write the merged counterpart of ``node`` (its outputs keep their merged names)."""
        outs = [self.merged_name(o) if o else "" for o in node.output]
        self.b.nodes.append(helper.make_node(op, list(inputs), outs, name=node.name or None, **attrs))
        for k, o in enumerate(node.output):
            if o:
                self.result(node, layout, k)

    # ------------------------------------------------------------------- run
    def run(self) -> ModelProto:
        from modelsql.netfuse.ops import OPS

        g0 = self.models[0].graph
        init_names = {t.name for t in g0.initializer}
        for inp in g0.input:
            if inp.name not in init_names:
                rank, dims = self.shape_of(inp.name)
                self.values[inp.name] = Value("R" if self.shared else "S", inp.name, rank=rank, dims=dims,
                                              elem=_elem(inp))
        for index, node in enumerate(g0.node):
            where = node_label(node, index)
            if node.op_type == "Constant":
                self._constant(index, node)
                continue
            vals = [self.value(x) for x in node.input]
            present = [v for v in vals if v is not None] + self._outer_values(node, where)
            if all(v.layout == "R" for v in present):
                self._copy(node, const=all(v.const for v in present))
            elif all(v.layout in ("R", "K") and v.const for v in present):
                self._replicate(index, node)
            elif node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
                raise Declined(where, f"operator {node.domain + '.' if node.domain else ''}{node.op_type} "
                                      "has no merged counterpart here")
            else:
                OPS[node.op_type](self, node, vals, where)
        return self._model()

    def _outer_values(self, node, where: str) -> list[Value]:
        """The outer-scope values a node's subgraphs read (If, Loop, Scan). A per-instance one makes the
        node decline: a subgraph is copied as it is, so it must see shared values only."""
        out = []
        for name in sorted(_outer_names_of(node)):
            if name in self.values or name in self.inits[0] or name in self.corr:
                v = self.value(name) if name not in self.values else self.values[name]
                if v is not None:
                    if v.layout != "R":
                        raise Declined(where, f'a subgraph reads "{name}", which differs between members')
                    out.append(v)
        return out

    def _copy(self, node, const: bool) -> None:
        n = onnx.NodeProto()
        n.CopyFrom(node)
        del n.input[:], n.output[:]
        n.input.extend(self.values[x].name if x else "" for x in node.input)
        n.output.extend(self.merged_name(o) if o else "" for o in node.output)
        self.b.nodes.append(n)
        for k, o in enumerate(node.output):
            if o:
                self.result(node, "R", k).const = const

    def _replicate(self, index: int, node) -> None:
        """A node over per-instance constants only: one copy per member (outputs K)."""
        outs = [[f"{o}@m{i}" for i in range(self.n)] for o in node.output]
        for i in range(self.n):
            n = onnx.NodeProto()
            n.CopyFrom(self.models[i].graph.node[index])
            del n.input[:], n.output[:]
            n.input.extend(self._member_input(x, i) for x in node.input)
            n.output.extend(o[i] for o in outs)
            n.name = f"{node.name}@m{i}"
            self.b.nodes.append(n)
        for k, o in enumerate(node.output):
            rank, dims = self.shape_of(o)
            self.values[o] = Value("K", members=tuple(outs[k]), rank=rank, dims=dims, const=True,
                                   elem=self.elem_of(o))

    def _member_input(self, x: str, i: int) -> str:
        if not x:
            return ""
        v = self.values[x]
        return v.per_member()[i] if v.layout == "K" else v.merged()

    def _constant(self, index: int, node) -> None:
        tensors = [_constant_tensor(m.graph.node[index]) for m in self.models]
        out = node.output[0]
        dims = tuple(tensors[0].dims)
        if len({_tensor_key(t, i) for i, t in enumerate(tensors)}) == 1:
            self._copy(node, const=True)
        else:
            self._replicate(index, node)
        v = self.values[out]
        v.dims, v.rank, v.elem = dims, len(dims), tensors[0].data_type

    def _model(self) -> ModelProto:
        g0 = self.models[0].graph
        b = self.b
        for o in g0.output:
            v = self.values[o.name]
            b.nodes.append(helper.make_node("Identity", [b.to_s(v, f'output "{o.name}"')], [o.name]))
        init_names = {t.name for t in g0.initializer}
        inputs = []
        for inp in g0.input:
            if inp.name in init_names:
                continue
            dims = _dims(inp)
            lead = [] if self.shared else [self.n]
            inputs.append(helper.make_value_info(inp.name, tensor_type(_elem(inp), lead + dims)))
        outputs = [helper.make_value_info(o.name, tensor_type(_elem(o), [self.n] + _dims(o))) for o in g0.output]
        nodes, inits = _live(b.nodes, b.initializers, [o.name for o in g0.output])
        graph = helper.make_graph(nodes, f"netfuse_{self.n}", inputs, outputs, inits)
        m0 = self.models[0]
        model = helper.make_model(graph, opset_imports=list(m0.opset_import), ir_version=m0.ir_version)
        model.producer_name = "modelsql.netfuse"
        return model


# ---------------------------------------------------------------------- helpers
def _live(nodes: list, initializers: list, outputs: list[str]) -> tuple[list, list]:
    """The nodes and initializers the outputs depend on (members' shape constants that the
    rewrite replaced are dropped)."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(x for x in node.input if x)
            needed.update(_outer_names_of(node))
    return kept[::-1], [t for t in initializers if t.name in needed]


def _outer_names_of(node) -> set[str]:
    """Names a node's subgraphs mention that they do not define themselves (outer-scope reads)."""
    names: set[str] = set()
    for a in node.attribute:
        if a.HasField("g") or len(a.graphs):
            for g in ([a.g] if a.HasField("g") else list(a.graphs)):
                defined = {i.name for i in g.input} | {t.name for t in g.initializer} | \
                    {o for n in g.node for o in n.output}
                used = {x for n in g.node for x in n.input if x} | {o.name for o in g.output}
                nested = set().union(*[_outer_names_of(n) for n in g.node]) if g.node else set()
                names |= (used | nested) - defined
    return names


def _default_opset(model: ModelProto) -> Optional[int]:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return None


def _signature(model: ModelProto):
    g = model.graph
    inits = {t.name for t in g.initializer}
    return (sorted((i.domain, i.version) for i in model.opset_import),
            [(v.name, v.type.SerializeToString()) for v in g.input if v.name not in inits],
            [(v.name, v.type.SerializeToString()) for v in g.output])


def _attr_keys(node) -> list[bytes]:
    """A node's attributes as compared between members: a Constant's value is data (compared where it is
    used), every other attribute is structure."""
    return [_attr_key(a) for a in node.attribute if not (node.op_type == "Constant" and a.name.startswith("value"))]


def _attr_key(a) -> bytes:
    c = onnx.AttributeProto()
    c.CopyFrom(a)
    if c.HasField("t"):
        c.t.name = ""
    return c.SerializeToString(deterministic=True)


def _renamed(t: TensorProto, name: str) -> TensorProto:
    c = TensorProto()
    c.CopyFrom(t)
    c.name = name
    return c


def _elem(v) -> int:
    return v.type.tensor_type.elem_type


def _dims(v) -> list:
    out = []
    for d in v.type.tensor_type.shape.dim:
        out.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return out


def _shape_info(model: ModelProto) -> dict[str, tuple]:
    """Original value name -> (rank, dims with None for symbolic or unknown, element type)."""
    try:
        inferred = infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a model shape inference rejects still merges where ranks are not needed
        inferred = model
    g = inferred.graph
    info = _declared_shapes(g)
    if any(o and o not in info for n in g.node for o in n.output):
        for name, rank_dims in _run_shapes(model).items():
            if name not in info or info[name][0] is None:
                info[name] = rank_dims
    return info


def _declared_shapes(g) -> dict[str, tuple]:
    info: dict[str, tuple] = {}
    for v in (*g.input, *g.output, *g.value_info):
        tt = v.type.tensor_type
        if v.type.HasField("tensor_type") and tt.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            info[v.name] = (len(dims), dims, tt.elem_type or None)
    for t in g.initializer:
        info[t.name] = (len(t.dims), tuple(t.dims), t.data_type)
    for node in g.node:
        if node.op_type == "Constant":
            t = _constant_tensor(node)
            info[node.output[0]] = (len(t.dims), tuple(t.dims), t.data_type)
    return info


def _run_shapes(model: ModelProto) -> dict[str, tuple]:
    """Ranks, dims and element types of every value from two runs of ``model`` in ONNX Runtime on
    made-up inputs whose symbolic dims are 2 and then 3: a dim equal in both runs is static, one that
    differs is None. Used where shape inference could not follow (Reshape targets computed by
    Shape/Gather/Concat chains, as torch's legacy exporter writes them)."""
    import onnxruntime as ort

    probe = ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for o in node.output:
            if o and o not in known:
                probe.graph.output.append(helper.make_empty_tensor_value_info(o))
                known.add(o)
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        runs = [_probe_run(sess, size) for size in (2, 3)]
    except Exception:  # noqa: BLE001 - no run, no extra shapes: nodes that need them decline
        return {}
    out = {}
    for name, (a, elem) in runs[0].items():
        b = runs[1].get(name, (None, None))[0]
        if b is None or len(a) != len(b):
            continue
        out[name] = (len(a), tuple(x if x == y else None for x, y in zip(a, b)), elem)
    return out


_ORT_ELEMS = {"tensor(float)": TensorProto.FLOAT, "tensor(int64)": TensorProto.INT64,
              "tensor(int32)": TensorProto.INT32, "tensor(bool)": TensorProto.BOOL,
              "tensor(double)": TensorProto.DOUBLE, "tensor(float16)": TensorProto.FLOAT16}


def _probe_run(sess, size: int) -> dict:
    feeds: dict[str, np.ndarray] = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else size for d in i.shape]
        dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int32)": np.int32,
                 "tensor(bool)": np.bool_, "tensor(float16)": np.float16}.get(i.type, np.int64)
        feeds[i.name] = (np.random.default_rng(size).standard_normal(shape).astype(dtype)
                         if np.issubdtype(dtype, np.floating) else np.zeros(shape, dtype))
    outs = sess.get_outputs()
    values = sess.run(None, feeds)
    return {o.name: (np.shape(v), _ORT_ELEMS.get(o.type)) for o, v in zip(outs, values)}


def _reference_values(model: ModelProto) -> dict[str, np.ndarray]:
    """Small integer constants of the reference (shapes, axes, indices) by name."""
    out = {}
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], _constant_tensor(n)) for n in model.graph.node if n.op_type == "Constant"]
    for name, t in tensors:
        if (t.data_location == TensorProto.EXTERNAL or t.data_type == TensorProto.STRING
                or np.prod(t.dims, dtype=np.int64) > 4096):
            continue
        try:
            out[name] = numpy_helper.to_array(t)
        except Exception:  # noqa: BLE001 - an unreadable constant is simply not known
            pass
    return out
