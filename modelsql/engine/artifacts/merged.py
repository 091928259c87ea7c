"""Merged graphs of model families: built from the store, checked, cached, loaded.

A family's members (one architecture fingerprint) are merged by NetFuse's rewrite
(:func:`modelsql.netfuse.merge_models`, Jeong et al., 2020) on their *stored*
graphs: the merged graph refers to the members' own tensor blobs, so a merged graph
costs one small graph blob in the store and no second copy of any weight. It is
checked once against the members run separately (on made-up rows) and cached in the
store under :func:`merge_key` (the ordered members, their content digests, the input
layout and the dense lowering), recorded in ``modelsql.merged_graphs``.

On a CUDA device (the scan's device, ``"cuda:N"``) the checked graph is loaded whole (its weights joined
from the store) as a :class:`~modelsql.operators.backends.cuda.CudaModel` whose runs replay captured CUDA
graphs (Nimble, Kwon et al., NeurIPS 2020), its instance axis made symbolic so the capture is per rows per
member; the members run as their own captured CudaModels, and each batch takes the policy
:func:`merge_gain.estimate` picks on that device. The check itself runs on the CPU.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Optional, Sequence, cast

import numpy as np
import onnx

from modelsql.catalog.entries import ModelVersion, RoutedModels
from modelsql.catalog.families import MergedGraph
from modelsql.errors import DataError, Error
from modelsql import netfuse
from modelsql.onnxformat.split import join_model, stored_tensors
from modelsql.operators.backends import SESSIONS, SessionKey
from modelsql.operators.backends.cuda import BUCKETS, CudaModel
from modelsql.storage import BlobStore
from modelsql.operators.backends import shared_weights
from modelsql.operators.backends.pipeline import StepMemo
from modelsql.operators.backends.routed import FamilyMember, MergedRunner, RoutedModel, SharedFamily
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.artifacts import merge_gain

if TYPE_CHECKING:
    from modelsql.engine.artifacts.context import ArtifactContext

__all__ = ["merge_key", "merged_graph", "build_merged", "merged_runner", "runner_of", "routed_session",
           "shared_family", "cuda_merged", "symbolic_instances", "CHECK_REL_TOL"]

CHECK_REL_TOL = 1e-4
"""Largest relative difference (max |merged - separate| / max |separate|) a merged graph may show on its
check rows; above it the merge is declined."""
CHECK_ROWS = 2
"""Rows per member the check runs."""
_VERSION = "netfuse-1"


def merge_key(members: Sequence[ModelVersion], layout: str, dense: str) -> str:
    """SHA-256 naming one merged graph: the ordered members, their content digests, the layout and lowering."""
    parts = [f"{m.name}:{m.version}:{m.content_digest or m.graph_digest}" for m in members]
    return hashlib.sha256("|".join(parts + [layout, dense, _VERSION]).encode()).hexdigest()


def merged_graph(session: ArtifactContext, members: Sequence[ModelVersion], layout: str = "stacked",
                 dense: str = "matmul") -> tuple[bytes, MergedGraph]:
    """The merged graph of ``members`` (stripped: its weights are the members' blobs) and its record.

    Raises:
        MergeDeclined: the rewrite or its check declined (code ``merge_declined``, naming the node).
        DataError: a member's blob is unreadable.
    """
    key = merge_key(members, layout, dense)
    cached = session.catalog.families.merged(key)
    if cached is not None and session.store.has(cached.graph_digest):
        return session.store.get(cached.graph_digest), cached
    data, record = build_merged(session.store, members, layout, dense)
    _remember(session, record)
    return data, record


def build_merged(store, members: Sequence[ModelVersion], layout: str = "stacked",
                 dense: str = "matmul") -> tuple[bytes, MergedGraph]:
    """Merge ``members`` from their stored graphs, check the result and put it in ``store`` (no catalog:
    :func:`merged_graph` records it). Raises as :func:`merged_graph`."""
    start = time.perf_counter()
    stripped = [onnx.ModelProto.FromString(store.get(m.graph_digest)) for m in members]
    reference = artifacts.load_model_proto(store, members[0])
    merged = netfuse.merge_models(stripped, shared_input=(layout == "shared"), reference=reference, dense=dense)
    data = merged.SerializeToString()
    key = merge_key(members, layout, dense)
    diff = _check(store, members, data, layout, _session(store, data, BlobStore.digest_of(data), key, members, 1))
    record = MergedGraph(key, tuple(f"{m.name}:{m.version}" for m in members), layout,
                         store.put(data), len(data), diff, time.perf_counter() - start)
    return data, record


def _remember(session: ArtifactContext, record: MergedGraph) -> None:
    """Record the merged graph in the catalog when it can be written (a read-only catalog just rebuilds it)."""
    if session.catalog.read_only or not session.catalog.present:
        return
    try:
        with session.catalog.transaction():
            session.catalog.families.add_merged(record)
    except Error:  # e.g. a conflicting writer: the graph is rebuilt next time
        pass


def _session(store, data: bytes, digest: str, key: str, members: Sequence[ModelVersion], intra: int):
    """The cached session of a merged graph (its weights memory-mapped from the members' blobs), keyed by the
    graph's digest: the check's session (one thread) is the one a one-thread runner then uses.

    Raises:
        MergeDeclined: ONNX Runtime rejects the merged graph.
    """
    label = f"the merged graph of {', '.join(m.name for m in members)}"
    try:
        return shared_weights.get_shared_model(SessionKey(digest, "onnxruntime", "cpu", (("merged", key),)),
                                               lambda: data, store.get, label, path_of=store.path,
                                               intra_op_threads=intra, prepack=True)
    except DataError as exc:
        raise netfuse.MergeDeclined("graph", f"ONNX Runtime rejects the merged graph: {exc}") from None


def _check(store, members: Sequence[ModelVersion], data: bytes, layout: str, merged) -> float:
    """Run the merged graph (its loaded session ``merged``) and each member on made-up rows; the largest
    relative difference.

    Raises:
        MergeDeclined: the difference exceeds :data:`CHECK_REL_TOL`.
    """
    sessions = [artifacts.model_session(store, m, intra=1) for m in members]
    parts = [_rows(sessions[0], seed=i) for i in range(len(members))]
    if layout == "shared":
        parts = [parts[0]] * len(members)
        got = merged.run(parts[0], None)
    else:
        got = merged.run({k: np.stack([p[k] for p in parts]) for k in parts[0]}, None)
    worst = 0.0
    for i, (s, p) in enumerate(zip(sessions, parts)):
        for g, want in zip(got, s.run(p, None)):
            want = np.asarray(want)
            if want.dtype.kind not in "fc":
                if not np.array_equal(np.asarray(g[i]), want):
                    raise netfuse.MergeDeclined("check", f"member {i + 1}'s non-float outputs differ")
                continue
            scale = float(np.max(np.abs(want))) or 1.0
            worst = max(worst, float(np.max(np.abs(np.asarray(g[i]) - want))) / scale)
    if not worst <= CHECK_REL_TOL:
        raise netfuse.MergeDeclined("check", f"the merged graph differs from the members by {worst:.2e} "
                                             f"(relative), above {CHECK_REL_TOL:g}")
    return worst


def _rows(model, seed: int) -> dict[str, np.ndarray]:
    """Made-up feeds of :data:`CHECK_ROWS` rows for ``model``: normal floats, zero integers (valid indices)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in model.input_names:
        declared = list(model.input_shapes.get(name) or [None])
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in declared[1:]]
        dtype = model.input_dtypes.get(name, np.float32)
        lead = declared[0] if isinstance(declared[0], int) and declared[0] > 0 else CHECK_ROWS
        shape = [lead] + dims
        feeds[name] = (rng.standard_normal(shape).astype(dtype) if np.dtype(dtype).kind == "f"
                       else np.zeros(shape, dtype=dtype))
    return feeds


def merged_runner(session: ArtifactContext, members: Sequence[ModelVersion], layout: str, dense: str, intra: int,
                  device: str = "cpu") -> MergedRunner:
    """A :class:`~modelsql.operators.backends.routed.MergedRunner` over the cached session of the merged graph
    on ``device`` (on ``cuda:N``: a captured :class:`CudaModel`, rows per member padded to a bucket).

    Raises:
        MergeDeclined: the merge, its check, or the device's session (a graph over 2 GB, a refused capture).
    """
    data, record = merged_graph(session, members, layout, dense)
    if device == "cpu":
        return runner_of(session.store, data, record, members, intra)
    return MergedRunner(cuda_merged(session.store, data, record, members, device), len(members), BUCKETS)


def cuda_merged(store, data: bytes, record: MergedGraph, members: Sequence[ModelVersion], device: str) -> CudaModel:
    """The cached :class:`CudaModel` of a built merged graph on ``device``: the stripped graph ``data`` joined
    with its weights from ``store``; a stacked graph's instance axis (static ``N``) made symbolic so that
    CudaModel captures per rows per member (one bucket: ``N``).

    Raises:
        MergeDeclined: the joined graph exceeds protobuf's 2 GB, or ONNX Runtime's CUDA provider refuses it.
    """
    stacked = record.layout != "shared"
    key = SessionKey(record.graph_digest, "onnxruntime", device, (("merged", record.merge_key), ("capture", True)))
    label = f"the merged graph of {', '.join(m.name for m in members)}"

    def build() -> CudaModel:
        proto = join_model(data, {t.digest: store.get(t.digest) for t in stored_tensors(data)})
        if stacked:
            symbolic_instances(proto)
        try:
            whole = proto.SerializeToString()
        except ValueError as exc:  # protobuf's 2 GB limit
            raise netfuse.MergeDeclined("graph", f"the merged graph is too large to load on {device}: {exc}") from None
        return CudaModel(whole, label, device, buckets=(len(members),) if stacked else BUCKETS)

    try:
        return cast(CudaModel, SESSIONS.get(key, build))  # a ("capture", True) key is only ever built by build()
    except DataError as exc:
        raise netfuse.MergeDeclined("graph", f"ONNX Runtime on {device} rejects the merged graph: {exc}") from None


def symbolic_instances(proto: onnx.ModelProto) -> None:
    """Name the first axis of the graph's inputs and outputs (the N instances) symbolically, in place."""
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].dim_param = "instances"


def runner_of(store, data: bytes, record: MergedGraph, members: Sequence[ModelVersion], intra: int) -> MergedRunner:
    """The :class:`~modelsql.operators.backends.routed.MergedRunner` of a built merged graph (session cached
    by the graph's digest)."""
    return MergedRunner(_session(store, data, record.graph_digest, record.merge_key, members, intra), len(members))


def routed_session(session: ArtifactContext, models: RoutedModels, route_input: str, *, intra: int,
                   merge: Optional[tuple[str, str]] = None, always: bool = False,
                   costs=None, device: str = "cpu") -> tuple[RoutedModel, Optional[str]]:
    """The :class:`~modelsql.operators.backends.routed.RoutedModel` of a routed PREDICT on ``device``.

    ``merge``: ``(layout, dense)`` when the plan merges the family; each batch then runs merged when
    the learned cost model (``costs``, where it has seen merged runs) or else :func:`merge_gain.estimate`
    (for ``device``) expects a gain for its routing, or every batch with ``always``. On ``cuda:N`` the members
    and the merged graph are captured :class:`CudaModel` sessions.
    Returns the model and, when the merge was planned but declined, why (the members then run separately).

    Raises:
        NotSupportedError: ``device_not_available``; DataError: a member's blob is unreadable.
    """
    members = [artifacts.model_session(session.store, m, intra=intra, device=device) for m in models.members]
    runner, declined = None, None
    if merge is not None:
        try:
            runner = merged_runner(session, models.members, merge[0], merge[1], intra, device)
        except netfuse.MergeDeclined as exc:
            declined = f"{exc.node}: {exc.reason}"
    choose = _chooser(models.first, costs, device, always)
    routed = RoutedModel(models.names, members, route_input, models.label, merged=runner, choose=choose)
    setattr(routed, "device", device)  # RoutedModel does not declare the device the other backend models carry
    return routed, declined


def _chooser(first: ModelVersion, costs, device: str, always: bool):
    """``rows per member -> merge?`` for one batch on ``device``: the learned cost model where it answers
    (its merged runs on the CPU; its traces of a CUDA device), else :func:`merge_gain.estimate`."""
    cost = merge_gain.member_cost(first)
    learned = costs.device_runs(first, device) if costs is not None else None

    def choose(rows: list[int]) -> bool:
        if always:
            return True
        want = [float(r) for r in rows]
        if device != "cpu":
            return merge_gain.estimate(cost, len(rows), want, device=device, learned=learned).merge
        by_traces = costs.merge_estimate(first, len(rows), want) if costs else None
        return (by_traces or merge_gain.estimate(cost, len(rows), want)).merge

    return choose


def shared_family(session: ArtifactContext, members: Sequence[ModelVersion], dense: str, intra: int,
                  device: str = "cpu"):
    """One :class:`~modelsql.operators.backends.routed.FamilyMember` per member, over one merged graph
    with a shared input run once per chunk (rule ``predict_merge_family``'s FamilyShare), on ``device``
    (on ``cuda:N``: a captured :class:`CudaModel`, each chunk's rows padded to a bucket of at least N).

    Returns ``(members, None)``, or ``(None, why)`` when the merge declined (the PREDICTs then run their
    own sessions)."""
    try:
        runner = merged_runner(session, members, "shared", dense, intra, device)
    except netfuse.MergeDeclined as exc:
        return None, f"{exc.node}: {exc.reason}"
    family = SharedFamily(runner.model, merge_key(members, "shared", dense), StepMemo(),
                          instances=None if device == "cpu" else len(members))
    own = [artifacts.model_session(session.store, m, intra=intra, device=device) for m in members]
    return [FamilyMember(family, i, o, m.label) for i, (o, m) in enumerate(zip(own, members))], None
