"""Model artifacts: rebuilding a catalog version's ONNX bytes from the store, and its loaded sessions.

A model version is immutable, so everything derived from it is keyed by its
digests: the self-contained ONNX model is rebuilt from the graph blob and the
tensor blobs (each verified against its digest), and a loaded session comes
from :data:`modelsql.operators.backends.SESSIONS` under the key ``(artifact
digest, backend, device, options)``.
"""

from __future__ import annotations

import hashlib

from modelsql.catalog.entries import ModelVersion
from modelsql.errors import DataError, NotSupportedError
from modelsql.onnxformat.column_major import column_major_inputs
from modelsql.onnxformat.split import join_model
from modelsql.operators.backends import SESSIONS, SessionKey
from modelsql.operators.backends import onnxruntime as ort_backend
from modelsql.operators.backends import shared_weights
from modelsql.operators.backends.cuda import CudaModel
from modelsql.operators.backends.pipeline import PipelineModel, StepPlan
from modelsql.storage import BlobStore
from modelsql.engine.artifacts.python_programs import program_device, python_session


def artifact_digest(mv: ModelVersion, rewrite: str = "") -> str:
    """Digest naming what ``mv`` computes, after the named ``rewrite`` if any: its content digest
    (equal for identical steps of different pipelines, so they share one session), or, for a
    version imported before catalog schema 3, the exact bytes (graph and tensors)."""
    if mv.content_digest:
        return hashlib.sha256(f"{mv.content_digest}|{rewrite}".encode()).hexdigest()
    h = hashlib.sha256(mv.graph_digest.encode())
    for t in mv.tensors:
        h.update(t.digest.encode())
    h.update(rewrite.encode())
    return h.hexdigest()


def load_model_proto(store: BlobStore, mv: ModelVersion):
    """The self-contained ``onnx.ModelProto`` of ``mv``, rebuilt from the store (digests verified).

    Raises:
        DataError: a blob is corrupt or missing (code ``"blob_corrupt"`` / ``"blob_missing"``),
            naming the model and the tensor.
        NotSupportedError: ``no_onnx_graph`` for a co-executed Python program (kind ``"python"``).
    """
    if mv.kind == "python":
        raise NotSupportedError(
            f"{mv.label} is a Python program run as Python ({mv.source}: co-executed or eager): it has no ONNX graph "
            "to export, compile, profile or merge (DESCRIBE MODEL says why it is not a whole graph).",
            code="no_onnx_graph")

    def fetch(digest: str, what: str) -> bytes:
        try:
            return store.get(digest)
        except DataError as exc:
            raise DataError(
                f'Model "{mv.name}" version {mv.version}: {what} is unreadable from the store: {exc}',
                code=exc.code,
            ) from exc

    graph = fetch(mv.graph_digest, "the graph")
    payloads = {}
    for t in mv.tensors:
        if t.digest not in payloads:
            payloads[t.digest] = fetch(t.digest, f'tensor "{t.name}"')
    return join_model(graph, payloads)


def load_model_bytes(store: BlobStore, mv: ModelVersion) -> bytes:
    """Serialized :func:`load_model_proto`."""
    return load_model_proto(store, mv).SerializeToString()


def model_session(store: BlobStore, mv: ModelVersion, *, intra: int, column_major: tuple[str, ...] = (),
                  backend: str = "onnxruntime", device: str = "cpu"):
    """The cached session of ``mv`` on ``backend``/``device`` with ``intra`` threads per run.

    Its large tensors are memory-mapped from the store and shared with every other session over
    the same blob (:mod:`~modelsql.operators.backends.shared_weights`: PRETZEL's Object Store in
    memory); weight prepacking stays on, so answers are bit-identical to an ordinary session and
    MatMul/Gemm/Conv keep their packed copy (the server turns prepacking off to share those too).

    ``column_major`` names inputs fed transposed (see
    :func:`~modelsql.onnxformat.column_major.column_major_inputs`): a rewritten artifact with its own key.
    A pipeline version gets a :func:`pipeline_session` (``column_major`` must be empty); a co-executed Python
    program (kind ``"python"``) its :func:`~modelsql.engine.artifacts.python_programs.python_session`.
    """
    if mv.kind == "pipeline":
        return pipeline_session(store, mv, intra=intra, backend=backend, device=device)
    if mv.kind == "python":
        device = program_device(mv, device)
        key = SessionKey(artifact_digest(mv), "python", device, (("threads", intra),))
        return SESSIONS.get(key, lambda: python_session(store, mv, intra=intra, device=device))
    if backend != "onnxruntime":
        raise NotSupportedError(f"model_session serves ONNX Runtime; {backend} sessions come from "
                                "modelsql.engine.artifacts.compiled.tvm_session", code="backend_not_supported")
    if device != "cpu":
        return cuda_session(store, mv, device)
    rewrite = "column_major:" + ",".join(column_major) if column_major else ""
    key = SessionKey(artifact_digest(mv, rewrite), backend, device, ())
    label = f'model "{mv.name}" version {mv.version}'
    fetch = blob_fetcher(store, mv)
    transform = (lambda data: column_major_inputs(data, column_major)) if column_major else None
    return shared_weights.get_shared_model(key, lambda: fetch(mv.graph_digest), fetch, label, path_of=store.path,
                                           intra_op_threads=intra, transform=transform, prepack=True)


def cuda_session(store: BlobStore, mv: ModelVersion, device: str, *, capture: bool = True):
    """The cached :class:`~modelsql.operators.backends.cuda.CudaModel` of ``mv`` on ``device`` (``"cuda:N"``):
    IOBinding runs and CUDA graphs captured per batch bucket (``capture``). Its weights are copied to the
    device once per session, so the store's memory-mapped sharing does not apply.

    Raises:
        NotSupportedError: ``device_not_available``.
        DataError: a blob is unreadable, or ONNX Runtime's CUDA provider rejects the model (``invalid_onnx``).
    """
    key = SessionKey(artifact_digest(mv), "onnxruntime", device, (("capture", capture),))
    label = f'model "{mv.name}" version {mv.version}'
    return SESSIONS.get(key, lambda: CudaModel(load_model_bytes(store, mv), label, device, capture=capture))


def new_cuda_session(store: BlobStore, mv: ModelVersion, device: str):
    """A :class:`~modelsql.operators.backends.cuda.CudaModel` of ``mv`` on ``device`` of its own (not in
    ``SESSIONS``: the server keeps its resident sessions itself), capturing CUDA graphs per batch bucket.

    Raises:
        NotSupportedError: ``device_not_available``.
        DataError: a blob is unreadable, or ONNX Runtime's CUDA provider rejects the model (``invalid_onnx``).
    """
    return CudaModel(load_model_bytes(store, mv), f'model "{mv.name}" version {mv.version}', device)


def blob_fetcher(store: BlobStore, mv: ModelVersion):
    """``digest -> verified bytes``; a missing or corrupt blob is a DataError naming the model and the
    graph or tensor it holds (as :func:`load_model_proto` does)."""
    what = {t.digest: f'tensor "{t.name}"' for t in mv.tensors}
    what[mv.graph_digest] = "the graph"

    def fetch(digest: str) -> bytes:
        try:
            return store.get(digest)
        except DataError as exc:
            raise DataError(f'Model "{mv.name}" version {mv.version}: {what.get(digest, "blob " + digest)} is '
                            f"unreadable from the store: {exc}", code=exc.code) from exc

    return fetch


def step_key(mv: ModelVersion, feeds, keys: list) -> str:
    """Digest of a pipeline step's computation: what its model computes and, per input, its source
    (``(None, pipeline input)`` or ``(index into keys, output name)``): equal keys give equal values."""
    parts = [artifact_digest(mv)] + [
        f"{inp}<-{'in:' + name if node is None else keys[node] + ':' + name}" for inp, (node, name) in feeds
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def new_session(store: BlobStore, mv: ModelVersion, *, intra: int = 1):
    """A session of ``mv`` of its own (not in ``SESSIONS``), whose large weights are memory-mapped
    from the store and shared with every other session using the same blob (PRETZEL's Object Store
    in memory: :mod:`modelsql.operators.backends.shared_weights`, weight prepacking off). The server
    keeps its resident sessions itself, so serving hundreds of models neither evicts the queries'
    sessions nor is evicted by them.

    Raises:
        DataError: a blob is unreadable or corrupt, or ONNX Runtime rejects the model (``invalid_onnx``).
    """
    label = f'model "{mv.name}" version {mv.version}'
    fetch = blob_fetcher(store, mv)
    return shared_weights.shared_model(fetch(mv.graph_digest), fetch, label, path_of=store.path,
                                       intra_op_threads=intra)


def pipeline_session(store: BlobStore, pv, *, intra: int, backend: str = "onnxruntime",
                     device: str = "cpu", memo=None) -> PipelineModel:
    """A :class:`~modelsql.operators.backends.pipeline.PipelineModel` of pipeline version ``pv``: each
    step's cached session (keyed by its content digest, so a step several pipelines share is
    loaded once: PRETZEL's shared state), and for each step the outputs later steps read.

    ``memo``: a :class:`~modelsql.operators.backends.pipeline.StepMemo` shared with other pipelines
    run on the same chunks, so a step they share is computed once per chunk."""
    needed: dict[int, list[str]] = {}
    for step in pv.steps:
        for f in step.feeds:
            if f.from_step is not None and f.from_name not in needed.setdefault(f.from_step, []):
                needed[f.from_step].append(f.from_name)
    plans: list[StepPlan] = []
    keys: list[str] = []
    for step in pv.steps:
        model = model_session(store, step.model, intra=intra, backend=backend, device=device)
        order = [o.name for o in step.model.outputs if o.name in needed.get(step.position, ())]
        feeds = tuple((f.input, (f.from_step, f.from_name)) for f in step.feeds)
        keys.append(step_key(step.model, feeds, keys))
        plans.append(StepPlan(step.name, model, feeds, tuple(order), keys[-1]))
    shapes = {spec.name: list(spec.shape or ()) for spec in pv.inputs}
    return PipelineModel(plans, shapes, [o.name for o in pv.outputs], pv.label, memo=memo)


def default_threads() -> int:
    """CPU cores this process may use."""
    return ort_backend.default_threads()


def check_loads(data: bytes, label: str) -> None:
    """Load ``data`` once in ONNX Runtime (nothing cached): a model it cannot run never enters the catalog.

    Raises:
        DataError: code ``"invalid_onnx"``.
    """
    ort_backend.OrtModel(data, label)

