"""NetFuse merging (:func:`modelsql.netfuse.merge_models`) checked with real ONNX Runtime
sessions, nothing mocked.

What is checked:

* correctness on real architectures built in code with random weights
  (:mod:`modelsql.datasets.architectures`: MLP, a BERT-style encoder, ResNet-18, ResNet-50,
  ResNeXt-50), exported with both of torch's ONNX exporters, merged at N in {2, 8, 32} with both
  dense lowerings and with a shared input: the merged model's output ``[N, B, ...]`` equals every
  member run on its own rows (batch 3) in its own session, ``max|diff| / max|ref| <= 1e-4``;
* members whose batch dimension is fixed;
* clean declines (:class:`MergeDeclined`, naming the node and the reason) for members that differ
  (input shapes, opsets, topology) and for nodes with no exact merged counterpart;
* exactness details on graphs built with ``onnx.helper``: embeddings (out-of-range indices fail,
  negative ones wrap per member), Gemm attributes, MatMul of two activations, LayerNormalization
  with per-member parameters, identical members, N = 1;
* :func:`~modelsql.onnxformat.identity.architecture_fingerprint`;
* the merged graph's initializers are the members' own tensors (no concatenated copies).

Selection. The default run is sized for CI (about 70 s on 2 cores, most of it exporting): CNNs at
``width=16`` with N in {2, 8} (ResNet-18 from the dynamo exporter at ``width=8``), ResNet-18 at
``width=8`` with N = 32, MLP and BERT with N in {2, 8, 32}. The full matrix (CNNs at torchvision's
``width=64``, N in {2, 8, 32} for every architecture, both exporters, both lowerings, separate and
shared inputs; more fixed-batch families; equal fingerprints for the 8 real exports of every family)
carries the marker ``netfuse_full`` (registered in pyproject.toml) and is skipped unless that marker
is selected on the command line::

    pytest tests/netfuse/test_netfuse.py -m netfuse_full

It takes about 20 minutes on 2 cores and up to ~12 GiB of memory: 32 full-width ResNet-50s hold
3 GB of weights, more than one protobuf message can serialize, so members whose weights pass 1 GB are
merged the way the store merges them (their stripped graphs, :func:`~modelsql.onnxformat.split_model`,
with the first member as the full ``reference``) and the merged graph runs with the members'
tensors re-attached through an external data file.

Members. Exporting takes most of the time (torch's dynamo exporter needs seconds per model), so a
family is exported once per test session (cached) and members beyond the exported ones are
derived from them: every floating-point initializer with more than one element multiplied
element-wise by a seeded ``1 + U(-0.1, 0.1)`` (a "fine-tuned copy": same graph, different weights;
signs, and with them BatchNorm variances, kept; scalar constants stay shared). The default run
exports 2 members per legacy family and for the dynamo MLP, 1 for the other dynamo families; the
full run exports 8 per family (so N = 2 and 8 are all real exports, N = 32 is 8 exports and 24
derived copies).

The tests under "bugs found" reproduce wrong answers and crashes a first version of the merge had
(members differing in a ConstantOfShape fill or in weight shapes, a lower-rank channel-concatenated
operand, subgraphs reading per-member values, tensors in unloaded external files, no members,
string constants): each must decline or merge exactly.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
import tempfile
from typing import Optional, Sequence

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument  # noqa: E402

from modelsql.datasets import architectures as A  # noqa: E402
from modelsql.errors import NotSupportedError  # noqa: E402
from modelsql.onnxformat import split_model  # noqa: E402
from modelsql.onnxformat.identity import architecture_fingerprint  # noqa: E402
from modelsql.netfuse import DENSE_LOWERINGS, MergeDeclined, merge_models  # noqa: E402

RTOL = 1e-4
BATCH = 3
EXPORTERS = ("legacy", "dynamo")
CNNS = ("resnet18", "resnet50", "resnext50")
FULL_REAL = 8  # real exports per family in the full run
_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def _needs_exporter(exporter: str) -> None:
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")


@pytest.fixture
def full_selected(request):
    """Skip unless the run selected the full matrix (``-m netfuse_full``)."""
    if "netfuse_full" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the full NetFuse matrix runs only with -m netfuse_full")


# ---------------------------------------------------------------- sessions


def _run(model, feeds: dict) -> list[np.ndarray]:
    """Run ``model`` (ModelProto or bytes) once in a fresh CPU session; a model over protobuf's 2 GB
    limit is saved with external data and loaded from the file."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if isinstance(model, bytes) or sum(t.ByteSize() for t in model.graph.initializer) < 1_500_000_000:
        blob = model if isinstance(model, bytes) else model.SerializeToString()
        return ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "merged.onnx")
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="merged.data", size_threshold=1024)
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)


_LARGE = 1_000_000_000  # float bytes of all members above which the merge goes through stripped graphs


def _store_digest(t) -> Optional[str]:
    for e in t.external_data:
        if e.key == "digest":
            return e.value
    return None


def _merge_and_run_stripped(members: list, feed: np.ndarray, **kw) -> np.ndarray:
    """Merge very large members the way the store does (their stripped graphs, the first member as the
    full reference), then run the merged graph with its tensors re-attached from the members through
    an external data file. ``members`` is emptied (freed) before the merged session is created."""
    stripped, tensors, attrs = [], {}, {}
    for m in members:
        s = onnx.load_from_string(split_model(m)[0])
        for full, bare in zip(m.graph.initializer, s.graph.initializer):
            tensors.setdefault(_store_digest(bare), full)
        for nf, nb in zip(m.graph.node, s.graph.node):
            for af, ab in zip(nf.attribute, nb.attribute):
                if ab.HasField("t") and _store_digest(ab.t):
                    attrs.setdefault(_store_digest(ab.t), af)
        stripped.append(s)
    merged = merge_models(stripped, reference=members[0], **kw)
    del stripped
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "merged.data"), "wb") as data:
            for t in merged.graph.initializer:
                digest = _store_digest(t)
                if digest is None:
                    continue
                src = tensors[digest]
                if int(np.prod(src.dims)) < 1024:
                    t.CopyFrom(_renamed_tensor(src, t.name))
                    continue
                raw = src.raw_data if src.HasField("raw_data") else numpy_helper.to_array(src).tobytes()
                offset = data.tell()
                data.write(raw)
                del t.external_data[:]
                for k, v in (("location", "merged.data"), ("offset", str(offset)), ("length", str(len(raw)))):
                    e = t.external_data.add()
                    e.key, e.value = k, v
        for node in merged.graph.node:
            for a in node.attribute:
                if a.HasField("t") and _store_digest(a.t):
                    a.CopyFrom(attrs[_store_digest(a.t)])
        members.clear()
        tensors.clear()
        attrs.clear()
        path = os.path.join(tmp, "merged.onnx")
        onnx.save_model(merged, path)
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        return sess.run(None, {"input": feed})[0]


def _renamed_tensor(t, name: str):
    c = TensorProto()
    c.CopyFrom(t)
    c.name = name
    return c


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.abs(want).max())
    return float(np.abs(got.astype(np.float64) - want).max()) / (scale if scale > 0 else 1.0)


# ---------------------------------------------------------------- families


@functools.lru_cache(maxsize=None)
def _exports_small(arch: str, exporter: str, count: int, width: Optional[int], dynamic_batch: bool,
                   image_size: int) -> tuple[bytes, ...]:
    kw = {"width": width} if width else {}
    if arch in CNNS:
        kw["image_size"] = image_size
    return tuple(A.family(arch, count, exporter=exporter, dynamic_batch=dynamic_batch, **kw))


@functools.lru_cache(maxsize=1)
def _exports_large(arch: str, exporter: str, count: int, width: Optional[int], dynamic_batch: bool,
                   image_size: int) -> tuple[bytes, ...]:
    return _exports_small.__wrapped__(arch, exporter, count, width, dynamic_batch, image_size)


def _exports(arch: str, exporter: str, count: int, width: Optional[int] = None, dynamic_batch: bool = True,
             image_size: int = 32) -> tuple[bytes, ...]:
    """``count`` real exports (seeds 0..count-1), cached for the session (full-width CNNs: the last
    family only, they are large)."""
    _needs_exporter(exporter)
    cache = _exports_large if (width or 0) >= 64 else _exports_small
    return cache(arch, exporter, count, width, dynamic_batch, image_size)


def _perturbed(model: "onnx.ModelProto", seed: int) -> "onnx.ModelProto":
    """A fine-tuned copy: every float initializer with more than one element times ``1 + U(-0.1, 0.1)``."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.data_type in _FLOATS and int(np.prod(t.dims)) > 1:
            arr = numpy_helper.to_array(t)
            new = (arr * (1 + 0.1 * rng.uniform(-1, 1, arr.shape))).astype(arr.dtype)
            t.CopyFrom(numpy_helper.from_array(new, t.name))
    return out


def _real_count(arch: str, exporter: str, full: bool) -> int:
    if full:
        return FULL_REAL
    return 1 if (exporter == "dynamo" and arch != "mlp") else 2


def _members(arch: str, exporter: str, n: int, width: Optional[int], full: bool = False,
             dynamic_batch: bool = True) -> list["onnx.ModelProto"]:
    """N members: the real exports first, then fine-tuned copies derived from them (deterministic)."""
    real = _exports(arch, exporter, _real_count(arch, exporter, full), width, dynamic_batch)
    models = [onnx.load_from_string(b) for b in real[:n]]
    for i in range(len(models), n):
        models.append(_perturbed(models[i % len(real)], seed=1000 + i))
    return models


def _builder_kwargs(arch: str, width: Optional[int]) -> dict:
    return {"width": width} if (arch in CNNS and width) else {}


def _member_input(arch: str, i: int, width: Optional[int], batch: int = BATCH) -> np.ndarray:
    """Member ``i``'s own rows (``i = -1``: the shared rows)."""
    return A.example_input(arch, batch, seed=100 + i, **_builder_kwargs(arch, width))


_REFERENCE: dict[tuple, np.ndarray] = {}


def _reference(key: tuple, i: int, member: "onnx.ModelProto", x: np.ndarray) -> np.ndarray:
    """Member ``i`` run alone on ``x`` (cached by the family key, member and input)."""
    k = key + (i, hashlib.sha256(x.tobytes()).hexdigest())
    if k not in _REFERENCE:
        _REFERENCE[k] = _run(member, {"input": x})[0]
    return _REFERENCE[k]


def _check_family(arch: str, exporter: str, n: int, width: Optional[int], dense: str, shared: bool,
                  full: bool = False, dynamic_batch: bool = True, batch: int = BATCH) -> None:
    members = _members(arch, exporter, n, width, full, dynamic_batch)
    key = (arch, exporter, width, full, dynamic_batch)
    if shared:
        x = _member_input(arch, -1, width, batch)
        xs = [x] * n
        feed = x
    else:
        xs = [_member_input(arch, i, width, batch) for i in range(n)]
        feed = np.stack(xs)
    want = np.stack([_reference(key, i, m, x) for i, (m, x) in enumerate(zip(members, xs))])
    if sum(t.ByteSize() for m in members for t in m.graph.initializer) > _LARGE:
        got = _merge_and_run_stripped(members, feed, shared_input=shared, dense=dense)
    else:
        got = _run(merge_models(members, shared_input=shared, dense=dense), {"input": feed})[0]
    assert got.shape == want.shape == (n, batch) + want.shape[2:]
    for i in range(n):
        err = _rel_err(got[i], want[i])
        assert err <= RTOL, (f"{arch} ({exporter}, width {width}, N={n}, dense={dense}, shared={shared}): "
                             f"member {i} relative error {err:.2e}")
    if shared and n > 1:  # the members really differ: reading member 1's weights everywhere would fail
        assert _rel_err(want[0], want[-1]) > 1e-3


# ---------------------------------------------------------------- 1. correctness matrix

_DEFAULT_FAMILIES = {  # exporter -> (arch, width, Ns)
    "legacy": [("mlp", None, (2, 8, 32)), ("bert", None, (2, 8, 32)), ("resnet18", 16, (2, 8)),
               ("resnet18", 8, (32,)), ("resnet50", 16, (2, 8)), ("resnext50", 16, (2, 8))],
    # the slower exporter: one ResNet-18 width; its ResNet-50 and ResNeXt-50 exports (10 s each on 2 cores) run in
    # the full matrix (-m netfuse_full), as every architecture at full width does
    "dynamo": [("mlp", None, (2, 8, 32)), ("bert", None, (2, 8, 32)), ("resnet18", 8, (2, 8, 32))],
}


def _default_cases() -> list:
    cases = []
    for exporter in EXPORTERS:
        for arch, width, ns in _DEFAULT_FAMILIES[exporter]:
            for n in ns:
                for dense in DENSE_LOWERINGS:
                    cases.append(pytest.param(arch, exporter, n, width, dense, False,
                                              id=f"{arch}{width or ''}-{exporter}-N{n}-{dense}"))
            n = 8 if 8 in ns else ns[0]
            denses = DENSE_LOWERINGS if arch in ("mlp", "bert") else ("matmul",)
            for dense in denses:
                cases.append(pytest.param(arch, exporter, n, width, dense, True,
                                          id=f"{arch}{width or ''}-{exporter}-N{n}-{dense}-shared"))
    return cases


@pytest.mark.parametrize("arch, exporter, n, width, dense, shared", _default_cases())
def test_merged_family_matches_members(arch, exporter, n, width, dense, shared):
    _check_family(arch, exporter, n, width, dense, shared)


def _full_cases() -> list:
    cases = []  # ordered by family: the full-width exports are cached one family at a time
    for arch in ("mlp", "bert") + CNNS:
        width = 64 if arch in CNNS else None
        for exporter in EXPORTERS:
            for n in (2, 8, 32):
                for shared in (False, True):
                    for dense in DENSE_LOWERINGS:
                        cases.append(pytest.param(arch, exporter, n, width, dense, shared,
                                                  id=f"{arch}-{exporter}-N{n}-{dense}{'-shared' if shared else ''}"))
    return cases


@pytest.mark.netfuse_full
@pytest.mark.parametrize("arch, exporter, n, width, dense, shared", _full_cases())
def test_full_matrix(full_selected, arch, exporter, n, width, dense, shared):
    _check_family(arch, exporter, n, width, dense, shared, full=True)
    if n == FULL_REAL and not shared and dense == DENSE_LOWERINGS[0]:
        # here rather than in a test of its own: the full-width exports are cached one family at a time
        real = [onnx.load_from_string(b) for b in _exports(arch, exporter, FULL_REAL, width)]
        assert len({_fp(m) for m in real}) == 1, f"{arch} ({exporter}): real exports differ in fingerprint"


# ---------------------------------------------------------------- 2. fixed batch


_FIXED_CASES = [("mlp", "legacy", None, "matmul"), ("mlp", "dynamo", None, "conv"), ("bert", "legacy", None, "conv"),
                ("resnet18", "legacy", 8, "conv")]
_FIXED_CASES_FULL = [("bert", "dynamo", None, "conv"), ("resnet18", "dynamo", 8, "matmul"),
                     ("resnet50", "legacy", 16, "conv"), ("resnext50", "dynamo", 16, "matmul")]


@pytest.mark.parametrize("arch, exporter, width, dense", _FIXED_CASES)
def test_fixed_batch_members(arch, exporter, width, dense):
    _check_fixed_batch(arch, exporter, width, dense)


@pytest.mark.netfuse_full
@pytest.mark.parametrize("arch, exporter, width, dense", _FIXED_CASES_FULL)
def test_fixed_batch_members_full(full_selected, arch, exporter, width, dense):
    _check_fixed_batch(arch, exporter, width, dense)


def _check_fixed_batch(arch, exporter, width, dense):
    members = _members(arch, exporter, 4, width, dynamic_batch=False)
    dims = members[0].graph.input[0].type.tensor_type.shape.dim
    assert dims[0].HasField("dim_value") and dims[0].dim_value == 2  # family traces batch 2
    _check_family(arch, exporter, 4, width, dense, False, dynamic_batch=False, batch=2)
    _check_family(arch, exporter, 4, width, dense, True, dynamic_batch=False, batch=2)
    merged = merge_models(members, dense=dense)
    shape = [d.dim_value for d in merged.graph.input[0].type.tensor_type.shape.dim[:2]]
    assert shape == [4, 2]


# ---------------------------------------------------------------- tiny graphs


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> "onnx.ModelProto":
    """A checked model: ``inputs``/``outputs`` as ``(name, elem, shape)``, ``inits`` as ``(name, array)``."""
    graph = helper.make_graph(
        list(nodes), "tiny",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


F = TensorProto.FLOAT


def _randn(seed: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _assert_merges_exactly(members, feeds_per_member: Sequence[dict], *, shared: bool = False,
                           dense: str = "matmul", tol: float = 1e-5) -> "onnx.ModelProto":
    """Merge ``members`` and compare the merged model with each member in its own session."""
    merged = merge_models(members, shared_input=shared, dense=dense)
    names = list(feeds_per_member[0])
    if shared:
        feeds = dict(feeds_per_member[0])
    else:
        feeds = {k: np.stack([f[k] for f in feeds_per_member]) for k in names}
    got = _run(merged, feeds)
    want = [_run(m, f if not shared else feeds_per_member[0]) for m, f in zip(members, feeds_per_member)]
    for k in range(len(got)):
        w = np.stack([w_[k] for w_ in want])
        assert got[k].shape == w.shape, (got[k].shape, w.shape)
        assert _rel_err(got[k], w) <= tol, f"output {k}: relative error {_rel_err(got[k], w):.2e}"
    return merged


def _merged_or_declined(members, feeds_per_member, **kw) -> None:
    """The contract for inputs the merge may refuse: a clean MergeDeclined, or an exact merge."""
    try:
        _assert_merges_exactly(members, feeds_per_member, **kw)
    except MergeDeclined:
        pass


# ---------------------------------------------------------------- 3. declines


def _declined(models, **kw) -> MergeDeclined:
    with pytest.raises(MergeDeclined) as info:
        merge_models(models, **kw)
    exc = info.value
    assert isinstance(exc, NotSupportedError) and exc.code == "merge_declined"
    assert exc.node and exc.reason
    assert exc.node in str(exc) and exc.reason in str(exc)
    return exc


def test_merge_declined_is_a_not_supported_error():
    exc = MergeDeclined('node "x" (LRN)', "why")
    assert isinstance(exc, NotSupportedError)
    assert exc.code == "merge_declined" and exc.node == 'node "x" (LRN)' and exc.reason == "why"
    with pytest.raises(ValueError, match="dense"):
        merge_models([_mlp_member(0)], dense="gemm")


def test_no_members_declines():
    assert _declined([]).reason == "no members"


def _mlp_member(seed: int, batch="B", sizes=(6, 5, 4)) -> "onnx.ModelProto":
    (a, b, c) = sizes
    return _model(
        [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1", transB=1),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], name="fc2", transB=1)],
        [("x", F, [batch, a])], [("y", F, [batch, c])],
        [("W1", _randn(seed, b, a)), ("b1", _randn(seed + 1, b)), ("W2", _randn(seed + 2, c, b)),
         ("b2", _randn(seed + 3, c))])


def test_declines_members_whose_input_shapes_differ():
    exc = _declined([_mlp_member(0), _mlp_member(1, sizes=(7, 5, 4))])
    assert exc.node == "graph" and "inputs" in exc.reason and "member 2" in exc.reason
    exc = _declined([_mlp_member(0, batch=2), _mlp_member(1, batch="B")])  # fixed vs symbolic batch
    assert exc.node == "graph" and "inputs" in exc.reason


def test_declines_exported_members_whose_input_shapes_differ():
    small = [onnx.load_from_string(b) for b in _exports("mlp", "legacy", 1, None)]
    wide = onnx.load_from_string(A.family("mlp", 1, sizes=(16, 64, 64, 4), seed=1)[0])
    exc = _declined(small + [wide])
    assert exc.node == "graph" and "inputs" in exc.reason
    fixed = onnx.load_from_string(_exports("mlp", "legacy", 1, None, dynamic_batch=False)[0])
    assert _declined(small + [fixed]).node == "graph"
    # a CNN traced at another (static) image size
    big = onnx.load_from_string(_exports("resnet18", "legacy", 1, 8, image_size=48)[0])
    r18 = onnx.load_from_string(_exports("resnet18", "legacy", 2, 8)[0])
    exc = _declined([r18, big])
    assert exc.node == "graph" and "inputs" in exc.reason


def test_declines_members_with_different_opsets():
    module = A.mlp()
    x = A.example_input("mlp", 2)
    m17 = onnx.load_from_string(A.export_onnx(A.randomize(module, 0), x, opset=17))
    m18 = onnx.load_from_string(A.export_onnx(A.randomize(module, 1), x, opset=18))
    exc = _declined([m17, m18])
    assert exc.node == "graph" and "opset" in exc.reason
    # the same members, each with its own opset, do merge
    _assert_merges_exactly([m17, m17], [{"input": x}, {"input": x + 1}])
    old = _mlp_member(0)
    old.opset_import[0].version = 10
    exc = _declined([old, old])
    assert "opset 10" in exc.reason


def test_declines_members_with_another_topology():
    other = _mlp_member(1)
    other.graph.node[1].op_type = "Sigmoid"
    exc = _declined([_mlp_member(0), other])
    assert exc.node == "graph" and "topology" in exc.reason
    attr = _mlp_member(1)
    attr.graph.node[0].attribute[0].i = 0  # fc1 without transB
    attr.graph.initializer[0].CopyFrom(numpy_helper.from_array(_randn(9, 6, 5), "W1"))
    exc = _declined([_mlp_member(0), attr])
    assert exc.node == 'node "fc1" (Gemm)' and "attributes" in exc.reason


def _xw(extra_nodes, out_shape, inits=(), x_shape=("B", 4, 5, 5), opset=17, inputs=()):
    return _model(extra_nodes, [("x", F, list(x_shape))] + list(inputs), [("y", F, out_shape)], inits, opset)


@pytest.mark.parametrize("case", ["lrn", "einsum", "lrn-unnamed", "conv-weight-input", "conv-weight-computed",
                                  "squeeze-no-axes", "reducesum-all", "reducemean-all", "reducesum-empty-axes",
                                  "gemm-transA", "gather-both", "layernorm-stats", "maxpool-indices"])
def test_declines_unsupported_nodes(case):
    if case in ("lrn", "lrn-unnamed"):
        name = "lrn_1" if case == "lrn" else ""
        make = lambda s: _xw([helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                              helper.make_node("LRN", ["c"], ["y"], name=name, size=3)],
                             ["B", 4, 5, 5], [("W", _randn(s, 4, 4, 3, 3))])
        exc = _declined([make(0), make(1)])
        assert exc.node == ('node "lrn_1" (LRN)' if name else "node #1 (LRN)")
        assert "LRN" in exc.reason and "no merged counterpart" in exc.reason
    elif case == "einsum":
        make = lambda s: _model([helper.make_node("Einsum", ["x", "W"], ["y"], name="ein", equation="bi,ij->bj")],
                                [("x", F, ["B", 4])], [("y", F, ["B", 3])], [("W", _randn(s, 4, 3))])
        exc = _declined([make(0), make(1)])
        assert exc.node == 'node "ein" (Einsum)' and "Einsum" in exc.reason
    elif case == "conv-weight-input":
        m = _xw([helper.make_node("Conv", ["x", "w"], ["y"], name="dyn_conv")], ["B", 4, 3, 3],
                inputs=[("w", F, [4, 4, 3, 3])])
        exc = _declined([m, m])
        assert exc.node == 'node "dyn_conv" (Conv)' and "computed at run time" in exc.reason
    elif case == "conv-weight-computed":
        make = lambda s: _xw([helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[0, 1, 2, 3]),
                              helper.make_node("Mul", ["W", "m"], ["wm"], name="scale"),
                              helper.make_node("Conv", ["x", "wm"], ["y"], name="conv_scaled")],
                             ["B", 4, 3, 3], [("W", _randn(s, 4, 4, 3, 3))])
        exc = _declined([make(0), make(1)])
        assert exc.node == 'node "conv_scaled" (Conv)' and "computed at run time" in exc.reason
    elif case == "squeeze-no-axes":
        m = _model([helper.make_node("Squeeze", ["x"], ["y"], name="sq")], [("x", F, ["B", 1, 4])],
                   [("y", F, ["B", 4])])
        exc = _declined([m, m])
        assert exc.node == 'node "sq" (Squeeze)' and "without axes" in exc.reason
    elif case in ("reducesum-all", "reducemean-all", "reducesum-empty-axes"):
        op = "ReduceMean" if case == "reducemean-all" else "ReduceSum"
        inputs, inits = ["x"], []
        if case == "reducesum-empty-axes":
            inputs, inits = ["x", "axes"], [("axes", np.zeros([0], np.int64))]
        m = _model([helper.make_node(op, inputs, ["y"], name="total", keepdims=0)], [("x", F, ["B", 4])],
                   [("y", F, [])], inits)
        exc = _declined([m, m])
        assert exc.node == f'node "total" ({op})' and "all axes" in exc.reason
    elif case == "gemm-transA":
        make = lambda s: _model([helper.make_node("Gemm", ["x", "W"], ["y"], name="ta", transA=1)],
                                [("x", F, [4, "B"])], [("y", F, ["B", 3])], [("W", _randn(s, 4, 3))])
        exc = _declined([make(0), make(1)])
        assert exc.node == 'node "ta" (Gemm)' and "transA" in exc.reason
    elif case == "gather-both":
        m = _model([helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1)],
                   [("x", F, ["B", 4]), ("i", TensorProto.INT64, ["B"])], [("y", F, ["B", "B"])])
        exc = _declined([m, m])
        assert exc.node == 'node "g" (Gather)' and "differ between members" in exc.reason
    elif case == "layernorm-stats":
        make = lambda s: _model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["n", "mean", "inv"],
                                                  name="ln", axis=-1),
                                 helper.make_node("Add", ["n", "mean"], ["y"])],
                                [("x", F, ["B", 4])], [("y", F, ["B", 4])],
                                [("s", _randn(s, 4)), ("b", _randn(s + 1, 4))])
        exc = _declined([make(0), make(1)])
        assert exc.node == 'node "ln" (LayerNormalization)' and "extra outputs" in exc.reason
    elif case == "maxpool-indices":
        make = lambda s: _xw([helper.make_node("Conv", ["x", "W"], ["c"], name="conv"),
                              helper.make_node("MaxPool", ["c"], ["p", "idx"], name="pool", kernel_shape=[3, 3]),
                              helper.make_node("Cast", ["idx"], ["y"], to=F)],
                             ["B", 4, 1, 1], [("W", _randn(s, 4, 4, 3, 3))])
        exc = _declined([make(0), make(1)])
        assert exc.node == 'node "pool" (MaxPool)' and "extra outputs" in exc.reason


def test_nodes_over_constants_only_are_not_declined():
    """An operator with no merged counterpart is fine where it only sees constants (replicated per
    member): the decline is about per-instance positions."""
    make = lambda s: _model([helper.make_node("Einsum", ["W", "V"], ["WV"], equation="ij,jk->ik"),
                             helper.make_node("MatMul", ["x", "WV"], ["y"])],
                            [("x", F, ["B", 4])], [("y", F, ["B", 2])],
                            [("W", _randn(s, 4, 3)), ("V", _randn(s + 7, 3, 2))])
    rows = [{"x": _randn(40 + i, 3, 4)} for i in range(3)]
    for dense in DENSE_LOWERINGS:
        _assert_merges_exactly([make(i) for i in range(3)], rows, dense=dense)


# ---------------------------------------------------------------- 4. exactness details


def _embedding(seed: int, vocab: int = 5, dim: int = 3, elem=TensorProto.INT64) -> "onnx.ModelProto":
    return _model([helper.make_node("Gather", ["T", "ids"], ["e"], name="embed", axis=0),
                   helper.make_node("Relu", ["e"], ["y"])],
                  [("ids", elem, ["B", 4])], [("y", F, ["B", 4, dim])], [("T", _randn(seed, vocab, dim))])


@pytest.mark.parametrize("elem", [TensorProto.INT64, TensorProto.INT32])
def test_embedding_negative_indices_wrap_per_member(elem):
    dtype = np.int64 if elem == TensorProto.INT64 else np.int32
    members = [_embedding(10 * i, elem=elem) for i in range(3)]
    rows = [{"ids": np.array([[-1, 0, 4, -5], [2, -2, -1, 1]], dtype)},
            {"ids": np.array([[-1, -1, 3, 0], [4, -5, 0, 0]], dtype)},
            {"ids": np.array([[0, 1, 2, 3], [-1, -2, -3, -4]], dtype)}]
    _assert_merges_exactly(members, rows, tol=0)
    _assert_merges_exactly(members, [rows[0]] * 3, shared=True, tol=0)


@pytest.mark.parametrize("bad", [5, 6, 100, -6])
@pytest.mark.parametrize("member", [0, 1, 2])
def test_embedding_out_of_range_index_fails_like_the_member(bad, member):
    """Index 5 of member 0 is row 0 of member 1 in the concatenated table: it must fail, not read it."""
    members = [_embedding(10 * i) for i in range(3)]
    ids = np.zeros((3, 2, 4), np.int64)
    ids[member, 1, 2] = bad
    with pytest.raises((Fail, InvalidArgument), match="out of data bounds"):
        _run(members[member], {"ids": ids[member]})
    merged = merge_models(members)
    with pytest.raises((Fail, InvalidArgument), match="out of data bounds"):
        _run(merged, {"ids": ids})
    ids[member, 1, 2] = 4  # the same feed in range runs
    assert _run(merged, {"ids": ids})[0].shape == (3, 2, 4, 3)


@pytest.mark.parametrize("bias_shape", [[3], [1, 3], [1], None])
@pytest.mark.parametrize("dense", DENSE_LOWERINGS)
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("n", [1, 3])
def test_gemm_transb_alpha_beta_bias(bias_shape, dense, shared, n):
    def make(s):
        inputs = ["x", "W"] + (["C"] if bias_shape else [])
        inits = [("W", _randn(s, 3, 5))] + ([("C", _randn(s + 1, *bias_shape))] if bias_shape else [])
        inits += [("W2", _randn(s + 2, 3, 2))]
        return _model([helper.make_node("Gemm", inputs, ["h"], name="gemm", transB=1, alpha=0.37, beta=-1.9),
                       helper.make_node("Tanh", ["h"], ["t"]),
                       helper.make_node("Gemm", ["t", "W2"], ["y"], name="gemm2", alpha=2.5)],
                      [("x", F, ["B", 5])], [("y", F, ["B", 2])], inits)
    rows = [{"x": _randn(50 + i, 4, 5)} for i in range(n)]
    _assert_merges_exactly([make(10 * i) for i in range(n)], rows, shared=shared, dense=dense)


@pytest.mark.parametrize("dense", DENSE_LOWERINGS)
@pytest.mark.parametrize("shared", [False, True])
def test_matmul_between_two_activations(dense, shared):
    """Attention-like q @ k^T (rank 3), a rank-3 activation times a rank-2 activation (a per-member
    batch statistic), and a rank-2 product of two activations."""
    def make(s):
        return _model(
            [helper.make_node("MatMul", ["x", "Wq"], ["q"]),
             helper.make_node("MatMul", ["x", "Wk"], ["k"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),                      # [B, S, S]
             helper.make_node("ReduceMean", ["x"], ["stat"], axes=[0], keepdims=0),    # [S, D] over the batch
             helper.make_node("Transpose", ["stat"], ["statT"], perm=[1, 0]),          # [D, S]
             helper.make_node("MatMul", ["q", "statT"], ["qs"]),                       # [B, S, S]
             helper.make_node("Add", ["scores", "qs"], ["y"]),
             helper.make_node("ReduceSum", ["x", "ax1"], ["flat"], keepdims=0),        # [B, D]
             helper.make_node("MatMul", ["flat", "Wv"], ["v"]),                        # [B, D]
             helper.make_node("Transpose", ["v"], ["vt"]),                             # [D, B]
             helper.make_node("MatMul", ["flat", "vt"], ["z"])],                       # [B, B]
            [("x", F, ["B", 3, 4])], [("y", F, ["B", 3, 3]), ("z", F, ["B", "B"])],
            [("Wq", _randn(s, 4, 4)), ("Wk", _randn(s + 1, 4, 4)), ("Wv", _randn(s + 2, 4, 4)),
             ("ax1", np.array([1], np.int64))])
    rows = [{"x": _randn(60 + i, 2, 3, 4)} for i in range(4)]
    _assert_merges_exactly([make(10 * i) for i in range(4)], rows, shared=shared, dense=dense)


@pytest.mark.parametrize("axis, pshape, with_bias", [(-1, [4], True), (-2, [3, 4], True), (2, [4], False),
                                                     (1, [3, 4], True)])
@pytest.mark.parametrize("shared_scale", [False, True])
def test_layer_norm_with_per_member_scale_and_bias(axis, pshape, with_bias, shared_scale):
    def make(s):
        ins = ["x", "scale"] + (["bias"] if with_bias else [])
        inits = [("scale", _randn(0 if shared_scale else s, *pshape) + 1)]
        inits += [("bias", _randn(s + 1, *pshape))] if with_bias else []
        inits += [("W", _randn(s + 2, 4, 4))]
        return _model([helper.make_node("MatMul", ["x", "W"], ["h"]),
                       helper.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=1e-5)],
                      [("x", F, ["B", 3, 4])], [("y", F, ["B", 3, 4])], inits)
    rows = [{"x": _randn(70 + i, 2, 3, 4) * 3} for i in range(3)]
    _assert_merges_exactly([make(10 * i) for i in range(3)], rows)
    _assert_merges_exactly([make(10 * i) for i in range(3)], [rows[0]] * 3, shared=True)


@pytest.mark.parametrize("arch, exporter, width", [("mlp", "legacy", None), ("bert", "legacy", None),
                                                   ("resnet18", "legacy", 8), ("bert", "dynamo", None)])
@pytest.mark.parametrize("shared", [False, True])
def test_identical_members_give_one_output_per_member(arch, exporter, width, shared):
    m = _members(arch, exporter, 1, width)[0]
    merged = merge_models([m, m, m, m], shared_input=shared)
    floats = lambda model: sum(1 for t in model.graph.initializer if t.data_type in _FLOATS and len(t.dims))
    assert floats(merged) <= floats(m)  # nothing per member: every weight stored once
    xs = [_member_input(arch, i, width) for i in range(4)]
    feed = xs[0] if shared else np.stack(xs)
    got = _run(merged, {"input": feed})[0]
    assert got.shape[:2] == (4, BATCH)
    for i in range(4):
        want = _run(m, {"input": xs[0] if shared else xs[i]})[0]
        assert _rel_err(got[i], want) <= RTOL


@pytest.mark.parametrize("arch, exporter, width", [("mlp", "legacy", None), ("bert", "legacy", None),
                                                   ("resnet18", "legacy", 8), ("resnext50", "legacy", 16)])
@pytest.mark.parametrize("dense", DENSE_LOWERINGS)
def test_single_member(arch, exporter, width, dense):
    for shared in (False, True):
        _check_family(arch, exporter, 1, width, dense, shared)


def test_frozen_backbone_members():
    """Fine-tuned copies that share most weights (only the head differs): shared weights stay one
    tensor and the result is still per member."""
    base = _members("resnet18", "legacy", 1, 16)[0]
    head = {t.name for t in base.graph.initializer if len(t.dims) == 2}  # the fc weight
    members = []
    for i in range(4):
        m = onnx.ModelProto()
        m.CopyFrom(base)
        for t in m.graph.initializer:
            if t.name in head:
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * (1 + i), t.name))
        members.append(m)
    xs = [_member_input("resnet18", i, 16) for i in range(4)]
    for dense in DENSE_LOWERINGS:
        merged = _assert_merges_exactly(members, [{"input": x} for x in xs], dense=dense, tol=RTOL)
        big = [t for t in merged.graph.initializer if t.data_type in _FLOATS and np.prod(t.dims) > 1000]
        assert len(big) == len([t for t in base.graph.initializer if np.prod(t.dims) > 1000]) + 3 * len(head)


def test_stripped_members_merge_like_full_ones():
    """The merge reads no weight data: the store's stripped graphs (with a full reference) give the
    same merged graph as the full members."""
    for arch in ("mlp", "bert"):
        members = _members(arch, "legacy", 3, None)
        stripped = [onnx.load_from_string(split_model(m)[0]) for m in members]
        a = merge_models(members)
        b = merge_models(stripped, reference=members[0])
        strip = lambda m: [(n.op_type, list(n.input), list(n.output)) for n in m.graph.node]
        assert strip(a) == strip(b)
        assert [t.name for t in a.graph.initializer] == [t.name for t in b.graph.initializer]


# ---------------------------------------------------------------- merges that must decline or be exact
# Each is a way for the members to differ that the fingerprint would reject, or a node the rewrite
# cannot see into; merge_models must decline (or still be exact), never compute something else.


def _constant_of_shape(fill: float) -> "onnx.ModelProto":
    return _model([helper.make_node("Shape", ["x"], ["s"]),
                   helper.make_node("ConstantOfShape", ["s"], ["c"],
                                    value=numpy_helper.from_array(np.array([fill], np.float32))),
                   helper.make_node("Add", ["x", "c"], ["y"])],
                  [("x", F, ["B", 3])], [("y", F, ["B", 3])])


def test_constant_of_shape_fill_differs():
    rows = [{"x": _randn(80 + i, 2, 3)} for i in range(2)]
    _merged_or_declined([_constant_of_shape(1.0), _constant_of_shape(5.0)], rows)


def _conv_then_channel_mean(channels: int, seed: int) -> "onnx.ModelProto":
    return _model([helper.make_node("Conv", ["x", "W"], ["c"], name="conv"),
                   helper.make_node("ReduceMean", ["c"], ["y"], axes=[1, 2, 3], keepdims=0)],
                  [("x", F, ["B", 3, 4, 4])], [("y", F, ["B"])], [("W", _randn(seed, channels, 3, 1, 1))])


def _matmul_then_row_sum(width: int, seed: int) -> "onnx.ModelProto":
    return _model([helper.make_node("MatMul", ["x", "W"], ["z"], name="mm"),
                   helper.make_node("ReduceSum", ["z", "ax"], ["y"], keepdims=1)],
                  [("x", F, ["B", 4])], [("y", F, ["B", 1])], [("W", _randn(seed, 4, width)), ("ax", np.array([1]))])


def test_weight_shapes_differ_conv():
    members = [_conv_then_channel_mean(c, s) for c, s in ((4, 0), (2, 1), (6, 2))]
    _merged_or_declined(members, [{"x": _randn(90 + i, 2, 3, 4, 4)} for i in range(3)])


@pytest.mark.parametrize("shared, dense", [(True, "matmul"), (False, "conv")])
def test_weight_shapes_differ_matmul(shared, dense):
    members = [_matmul_then_row_sum(w, s) for w, s in ((2, 0), (1, 1), (3, 2))]
    rows = [{"x": _randn(95 + i, 2, 4)} for i in range(3)]
    _merged_or_declined(members, rows if not shared else [rows[0]] * 3, shared=shared, dense=dense)


def _dense_plus_higher_rank(seed: int) -> "onnx.ModelProto":
    return _model([helper.make_node("MatMul", ["x", "W"], ["z"], name="dense"),
                   helper.make_node("Add", ["z", "c"], ["y"], name="lift")],
                  [("x", F, [5, 4])], [("y", F, [2, 5, 3])],
                  [("W", _randn(seed, 4, 3)), ("c", np.arange(2, dtype=np.float32).reshape(2, 1, 1))])


def test_dense_plus_higher_rank_constant_default_lowering():
    rows = [{"x": _randn(100 + i, 5, 4)} for i in range(2)]
    _assert_merges_exactly([_dense_plus_higher_rank(0), _dense_plus_higher_rank(1)], rows)


@pytest.mark.parametrize("shared, dense", [(False, "conv"), (True, "matmul")])
def test_dense_plus_higher_rank_constant_c_layout(shared, dense):
    rows = [{"x": _randn(100 + i, 5, 4)} for i in range(2)]
    _merged_or_declined([_dense_plus_higher_rank(0), _dense_plus_higher_rank(1)],
                        rows if not shared else [rows[0]] * 2, shared=shared, dense=dense)


def _if_over_outer_input(cond_from_input: bool) -> "onnx.ModelProto":
    def branch(name):
        return helper.make_graph(
            [helper.make_node("Constant", [], [name + "_ax"], value=numpy_helper.from_array(np.array([0]))),
             helper.make_node("ReduceSum", ["x", name + "_ax"], [name], keepdims=1)],  # reads the outer x
            name, [], [helper.make_tensor_value_info(name, F, [1, 3])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("t"), else_branch=branch("e"))]
    inits = [("cond", np.array(True))]
    if cond_from_input:
        nodes[:0] = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["s"], ["sz"]),
                     helper.make_node("Equal", ["sz", "two"], ["cond"])]
        inits = [("two", np.array(2, np.int64))]
    return _model(nodes, [("x", F, ["B", 3])], [("y", F, [1, 3])], inits)


def test_if_reading_per_instance_outer_value():
    rows = [{"x": _randn(110 + i, 2, 3)} for i in range(2)]
    _merged_or_declined([_if_over_outer_input(True)] * 2, rows)


def test_external_data_members_are_not_equal_by_file_name(tmp_path):
    loaded = []
    for i in range(2):
        d = tmp_path / f"member{i}"
        d.mkdir()
        m = _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [("x", F, ["B", 64])], [("y", F, ["B", 64])],
                   [("W", _randn(i, 64, 64))])
        onnx.save_model(m, str(d / "model.onnx"), save_as_external_data=True, location="weights.data",
                        size_threshold=0)
        loaded.append(onnx.load(str(d / "model.onnx"), load_external_data=False))
    reference = onnx.load(str(tmp_path / "member0" / "model.onnx"))
    try:
        merged = merge_models(loaded, reference=reference)
    except MergeDeclined:
        return
    weights = [t for t in merged.graph.initializer if t.data_type == TensorProto.FLOAT]
    assert len(weights) == 2, [t.name for t in merged.graph.initializer]


def _if_over_outer_initializer() -> "onnx.ModelProto":
    def branch(name):
        return helper.make_graph([helper.make_node("ReduceSum", ["x", "ax"], [name], keepdims=1)], name, [],
                                 [helper.make_tensor_value_info(name, F, [1, 3])])
    return _model([helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("t"),
                                    else_branch=branch("e"))],
                  [("x", F, ["B", 3])], [("y", F, [1, 3])], [("cond", np.array(True)), ("ax", np.array([0]))])


def test_if_reading_outer_initializer():
    rows = [{"x": _randn(120 + i, 2, 3)} for i in range(2)]
    _merged_or_declined([_if_over_outer_initializer()] * 2, rows)


def test_string_constant_does_not_crash_the_merge():
    m = _model([helper.make_node("Constant", [], ["labels"], value_strings=["cat", "dog"]),
                helper.make_node("Relu", ["x"], ["y"])],
               [("x", F, ["B", 2])], [("y", F, ["B", 2]), ("labels", TensorProto.STRING, [2])])
    try:
        merged = merge_models([m, m])
    except MergeDeclined:
        return
    got = _run(merged, {"x": np.stack([_randn(130, 2, 2), _randn(131, 2, 2)])})
    assert got[1].shape == (2, 2)


# ---------------------------------------------------------------- 5. fingerprint


def _fp(model: "onnx.ModelProto") -> str:
    return architecture_fingerprint(split_model(model)[0])


@pytest.mark.parametrize("arch, width, exporters", [("mlp", None, EXPORTERS), ("bert", None, EXPORTERS),
                                                    ("resnet18", 8, EXPORTERS), ("resnet50", 16, ("legacy",)),
                                                    ("resnext50", 16, ("legacy",))])
def test_fingerprint_equal_for_family_members(arch, width, exporters):
    """(The dynamo exports of the ResNet-50s are checked in the full matrix: -m netfuse_full.)"""
    for exporter in exporters:
        real = [onnx.load_from_string(b) for b in _exports(arch, exporter, _real_count(arch, exporter, False), width)]
        derived = _perturbed(real[0], 7)
        fps = {_fp(m) for m in real + [derived]}
        assert len(fps) == 1, f"{arch} ({exporter}): members have {len(fps)} fingerprints"
        assert split_model(real[0])[0] != split_model(derived)[0]  # the stripped graphs do differ (digests)


def test_fingerprint_differs_between_architectures_widths_and_input_shapes():
    by_arch = {
        "mlp": _members("mlp", "legacy", 1, None)[0],
        "bert": _members("bert", "legacy", 1, None)[0],
        "resnet18": _members("resnet18", "legacy", 1, 16)[0],
        "resnet50": _members("resnet50", "legacy", 1, 16)[0],
        "resnext50": _members("resnext50", "legacy", 1, 16)[0],
    }
    fps = {name: _fp(m) for name, m in by_arch.items()}
    assert len(set(fps.values())) == len(fps), fps
    # widths
    assert _fp(_members("resnet18", "legacy", 1, 8)[0]) != fps["resnet18"]
    wide_mlp = onnx.load_from_string(A.family("mlp", 1, sizes=(32, 96, 64, 4))[0])
    assert _fp(wide_mlp) != fps["mlp"]
    # exporters write other graphs
    assert _fp(_members("mlp", "dynamo", 1, None)[0]) != fps["mlp"]
    # an input shape: the image size (static in the export), and a fixed batch
    big = onnx.load_from_string(_exports("resnet18", "legacy", 1, 8, image_size=48)[0])
    assert _fp(big) != _fp(_members("resnet18", "legacy", 1, 8)[0])
    edited = onnx.ModelProto()
    edited.CopyFrom(by_arch["resnet18"])
    edited.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 64
    assert _fp(edited) != fps["resnet18"]
    fixed = onnx.load_from_string(_exports("mlp", "legacy", 1, None, dynamic_batch=False)[0])
    assert _fp(fixed) != fps["mlp"]


@pytest.mark.parametrize("arch, exporter, width", [("mlp", "legacy", None), ("bert", "dynamo", None),
                                                   ("resnet18", "legacy", 8)])
def test_fingerprint_ignores_node_names_and_doc_strings(arch, exporter, width):
    m = _members(arch, exporter, 1, width)[0]
    renamed = onnx.ModelProto()
    renamed.CopyFrom(m)
    for i, node in enumerate(renamed.graph.node):
        node.name = f"some_other_name_{len(renamed.graph.node) - i}"
        node.doc_string = f"exported from line {i}"
    renamed.doc_string = "a model"
    renamed.graph.doc_string = "a graph"
    renamed.producer_name, renamed.producer_version = "someone", "9.9"
    for v in renamed.graph.input:
        v.doc_string = "the input"
    assert _fp(renamed) == _fp(m)
    # an intermediate value renamed: intermediate names are canonical too
    wired = onnx.ModelProto()
    wired.CopyFrom(m)
    first = wired.graph.node[0].output[0]
    for node in wired.graph.node:
        node.input[:] = ["renamed_value" if x == first else x for x in node.input]
        node.output[:] = ["renamed_value" if x == first else x for x in node.output]
    for v in wired.graph.value_info:
        if v.name == first:
            v.name = "renamed_value"
    if first not in {o.name for o in m.graph.output}:
        assert _fp(wired) == _fp(m)


# ---------------------------------------------------------------- 6. merged graph size


def _float_tensors(model) -> list[tuple[str, int, int]]:
    """(digest, bytes, elements) of every float initializer."""
    out = []
    for t in model.graph.initializer:
        if t.data_type in _FLOATS:
            arr = numpy_helper.to_array(t)
            out.append((hashlib.sha256(arr.tobytes() + str(arr.shape).encode()).hexdigest(), arr.nbytes, arr.size))
    return out


@pytest.mark.parametrize("arch, exporter, width, n", [("resnet18", "legacy", 16, 8), ("bert", "legacy", None, 8),
                                                      ("bert", "dynamo", None, 8), ("mlp", "legacy", None, 32),
                                                      ("resnext50", "legacy", 16, 8)])
@pytest.mark.parametrize("dense", DENSE_LOWERINGS)
@pytest.mark.parametrize("shared", [False, True])
def test_merged_model_holds_the_members_own_tensors(arch, exporter, width, n, dense, shared):
    members = _members(arch, exporter, n, width)
    merged = merge_models(members, shared_input=shared, dense=dense)
    mine = [_float_tensors(m) for m in members]
    merged_t = _float_tensors(merged)
    # per initializer position: the distinct member tensors (equal ones are stored once)
    expected = collections.Counter()
    for pos in zip(*mine):
        for digest in {p[0] for p in pos}:
            expected[digest] += 1
    sizes = {d: b for ts in mine for d, b, _ in ts}
    got = collections.Counter(d for d, _, _ in merged_t if d in sizes)
    assert got == expected, "the merged model's float initializers are not the members' own tensors"
    member_bytes = sum(b for ts in mine for _, b, _ in ts)
    distinct_bytes = sum(sizes[d] * c for d, c in expected.items())
    new = [(b, e) for d, b, e in merged_t if d not in sizes]
    new_bytes = sum(b for b, _ in new)
    merged_bytes = sum(b for _, b, _ in merged_t)
    assert merged_bytes == distinct_bytes + new_bytes <= member_bytes + new_bytes
    assert new_bytes <= max(4096, 0.002 * member_bytes), f"{len(new)} new float constants, {new_bytes} bytes"
    biggest = max(e for ts in mine for _, _, e in ts)
    assert max(e for _, _, e in merged_t) <= biggest, "a concatenated weight was materialized"
    assert merged.ByteSize() < 1.05 * sum(m.ByteSize() for m in members) + 100_000
