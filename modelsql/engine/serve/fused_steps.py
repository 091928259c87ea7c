"""Fusing steps into units for the server: the distinct steps that the same pipelines need run as one session.

PRETZEL (Lee et al., OSDI 2018, section 4.1) compiles a pipeline's operators
into *stages*: chains of operators executed as one unit, so a request does not
pay a hand-off per operator. Here, in the graph of distinct steps of a batching
group (:func:`~modelsql.engine.query.rules.pipeline_share_steps.share_steps`), the
steps needed by exactly the same set of served pipelines form one unit (a
featurizer's word, char and concatenation steps that every pipeline shares; a
pipeline's own chain of head steps). Such a set is always closed under the
paths between its steps (a step's pipelines include those of every step it
feeds), so a unit is a sub-graph whose inputs come from earlier units only.

A unit of several steps is one ONNX model merged from its steps
(:func:`modelsql.onnxformat.merge_steps`) and one session, weights inline. A
unit of one step runs on the session of its *structure*: its graph with the
floating-point weights turned into inputs (:func:`modelsql.onnxformat.lift_weights`),
one session for every served model of that structure, each model's weights fed
from their memory-mapped blobs (:class:`LiftedStep`); a step without such
weights has its own shared-weight session.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

from modelsql.onnxformat.compose import merge_steps
from modelsql.onnxformat.identity import lift_weights
from modelsql.operators.backends import shared_weights
from modelsql.operators.backends.cuda import CudaModel
from modelsql.operators.backends.onnxruntime import OrtModel
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.query.rules.pipeline_share_steps import SharedNode, SharedSteps

if TYPE_CHECKING:
    from modelsql.engine.serve.resident_steps import ResidentStep, ResidentSteps

__all__ = ["FusedUnit", "fuse_units", "unit_model", "LiftedStep"]

Source = tuple[Optional[int], str]


@dataclass(frozen=True)
class FusedUnit:
    """Steps run as one session.

    Attributes:
        key: digest of its steps' keys (equal units load once).
        name: its steps' names joined by ``+``.
        nodes: its steps (node indexes into the shared graph, and the nodes), in an order where each
            comes after the steps feeding it.
        feeds: ``(unit input name, source)``; a source is ``(unit index, value name)`` or
            ``(None, pipeline input name)``.
        outputs: ``(node index, step output name, exposed name)`` read by later units or members.
        members: the pipelines that need it.
    """

    key: str
    name: str
    nodes: tuple[tuple[int, SharedNode], ...]
    feeds: tuple[tuple[str, Source], ...]
    outputs: tuple[tuple[int, str, str], ...]
    members: frozenset

    @property
    def fused(self) -> bool:
        return len(self.nodes) > 1

    def local_feeds(self, position: int) -> list[tuple[str, Optional[int], str]]:
        """The feeds of its ``position``-th step as :func:`~modelsql.onnxformat.merge_steps` takes them."""
        index = {n: k for k, (n, _) in enumerate(self.nodes)}
        out: list[tuple[str, Optional[int], str]] = []
        for inp, (src, name) in self.nodes[position][1].feeds:
            out.append((inp, index[src], name) if src in index else (inp, None, _external(src, name)))
        return out


def _external(node: Optional[int], name: str) -> str:
    """A fused unit's input name for the value ``name`` of node ``node`` (or of the pipeline input)."""
    return name if node is None else f"v{node}.{name}"


def _order(classes: list[list[int]], unit_of: dict, shared: SharedSteps) -> list[int]:
    """Unit indexes in an order where every unit comes after the units feeding it (Kahn's algorithm)."""
    deps = {c: {unit_of[src] for n in nodes for _, (src, _) in shared.nodes[n].feeds
                if src is not None and unit_of[src] != c} for c, nodes in enumerate(classes)}
    users: dict[int, list[int]] = {c: [] for c in deps}
    for c, ds in deps.items():
        for d in ds:
            users[d].append(c)
    waiting = {c: len(ds) for c, ds in deps.items()}
    ready = sorted(c for c, k in waiting.items() if k == 0)
    done: list[int] = []
    while ready:
        c = ready.pop(0)
        done.append(c)
        for u in users[c]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return done


def fuse_units(shared: SharedSteps) -> tuple[list[FusedUnit], dict]:
    """The units of ``shared`` and, per member, ``(output name, (unit index, exposed name))`` pairs."""
    by_members: dict[frozenset, list[int]] = {}
    for i, node in enumerate(shared.nodes):
        by_members.setdefault(node.members, []).append(i)
    classes = list(by_members.values())
    unit_of = {n: c for c, nodes in enumerate(classes) for n in nodes}
    order = _order(classes, unit_of, shared)
    position = {c: k for k, c in enumerate(order)}
    single = {c for c, nodes in enumerate(classes) if len(nodes) == 1}

    def exposed(n: int, name: str) -> str:
        return name if unit_of[n] in single else f"v{n}.{name}"

    wanted: dict[int, set] = {}  # node -> its outputs read outside its unit
    for i, node in enumerate(shared.nodes):
        for _, (src, name) in node.feeds:
            if src is not None and unit_of[src] != unit_of[i]:
                wanted.setdefault(src, set()).add(name)
    for pairs in shared.member_outputs.values():
        for name, (src, _) in pairs:
            wanted.setdefault(src, set()).add(name)
    units = []
    for c in order:
        nodes = tuple((n, shared.nodes[n]) for n in classes[c])
        feeds: dict[str, Source] = {}
        for n, node in nodes:
            for inp, (src, name) in node.feeds:
                if src is not None and unit_of[src] == c:
                    continue
                key = inp if c in single else _external(src, name)
                feeds[key] = (None, name) if src is None else (position[unit_of[src]], exposed(src, name))
        outputs = tuple((n, o, exposed(n, o)) for n, node in nodes for o in node.outputs if o in wanted.get(n, ()))
        digest = hashlib.sha256("|".join(node.key for _, node in nodes).encode()).hexdigest()
        units.append(FusedUnit(digest, "+".join(node.name for _, node in nodes), nodes, tuple(feeds.items()), outputs,
                            nodes[0][1].members))
    member_outputs = {m: tuple((name, (position[unit_of[src]], exposed(src, name))) for name, (src, _) in pairs)
                      for m, pairs in shared.member_outputs.items()}
    return units, member_outputs


_LIFTED: dict = {}  # graph digest -> lift_weights result (a version's graph never changes)
_LIFTED_LOCK = threading.Lock()


def _lifted(store, mv):
    with _LIFTED_LOCK:
        if mv.graph_digest not in _LIFTED:
            _LIFTED[mv.graph_digest] = lift_weights(store.get(mv.graph_digest))
        return _LIFTED[mv.graph_digest]


def _merged_unit(store, unit: FusedUnit):
    """The one ONNX model of a fused unit: its steps' graphs merged (:func:`modelsql.onnxformat.merge_steps`)."""
    parts = [(f"n{n}", artifacts.load_model_proto(store, node.model), unit.local_feeds(k))
             for k, (n, node) in enumerate(unit.nodes)]
    local = {n: k for k, (n, _) in enumerate(unit.nodes)}
    return merge_steps(parts, [(local[n], o, e) for n, o, e in unit.outputs], "unit")


def _cuda_unit(store, steps: ResidentSteps, unit: FusedUnit, device: str) -> tuple[ResidentStep, str]:
    """A unit's CUDA session (see :func:`unit_model`) and its key."""
    if not unit.fused:
        mv = unit.nodes[0][1].model
        return steps.proxy(unit.key, unit.name, lambda: artifacts.new_cuda_session(store, mv, device),
                           mv.graph_bytes), unit.key

    def load():
        return CudaModel(_merged_unit(store, unit).SerializeToString(), f"unit {unit.name}", device)

    return steps.proxy(unit.key, unit.name, load, sum(node.model.graph_bytes for _, node in unit.nodes)), unit.key


class LiftedStep:
    """A step run on the session of its *structure* (its graph with the floating-point weights as
    inputs), shared by every served model of that structure: its own weights are fed from their
    memory-mapped blobs on each run (PRETZEL's physical units: one implementation, many parameter
    sets). 250 logistic-regression heads of one shape are one session, not 250."""

    fixed_batch = None
    intra_op_threads = 1

    def __init__(self, session: ResidentStep, weights: dict, path_of) -> None:
        self.session = session
        self._weights = weights  # input name -> (digest, dtype, dims)
        self._path_of = path_of
        self._arrays: Optional[dict] = None

    def load(self) -> None:
        self.session.load()

    def run(self, feeds, outputs=None):
        if self._arrays is None:
            self._arrays = {n: shared_weights.mapped_array(d, t, dims, self._path_of)
                            for n, (d, t, dims) in self._weights.items()}
        return self.session.run({**feeds, **self._arrays}, outputs)


def unit_model(store, steps: ResidentSteps, unit: FusedUnit, *, share_structures: bool = False,
                device: str = "cpu") -> tuple[Union[ResidentStep, LiftedStep], str]:
    """The backend model a unit runs as, registered with ``steps``
    (:class:`~modelsql.engine.serve.resident_steps.ResidentSteps`), and the key of the session it runs on:

    * several steps: one session of the merged model (its key: the unit's);
    * one step whose graph has floating-point weights, with ``share_structures``: a :class:`LiftedStep`
      on the session of its structure (key ``structure:<fingerprint>``, shared by every model of that
      structure: less memory, some throughput (about 7% in ``benchmarks/pretzel.py``), so it is
      off unless asked for);
    * one step otherwise: its own shared-weight session.

    On a CUDA ``device`` each unit is a :class:`~modelsql.operators.backends.cuda.CudaModel` of its own
    (weights on the device; CUDA graphs captured per batch bucket, requests padded to the next bucket);
    ``share_structures`` does not apply there.
    """
    if device != "cpu":
        return _cuda_unit(store, steps, unit, device)
    if unit.fused:
        def load():
            merged = _merged_unit(store, unit)
            # Loaded from a file, not from bytes: onnxruntime's Python session keeps the bytes it was
            # given for its whole life (a copy of the unit's vocabularies), but not a path.
            with tempfile.TemporaryDirectory(prefix="modelsql-unit-") as tmp:
                path = os.path.join(tmp, "unit.onnx")
                with open(path, "wb") as f:
                    f.write(merged.SerializeToString())
                del merged
                return OrtModel(path, f"unit {unit.name}", intra_op_threads=1, shared_allocator=True)

        floor = sum(node.model.graph_bytes for _, node in unit.nodes)
        return steps.proxy(unit.key, unit.name, load, floor), unit.key
    mv = unit.nodes[0][1].model
    fixed_batch = any(s.shape and isinstance(s.shape[0], int) for s in mv.inputs)
    # (a fixed batch is run in slices: weights must not be)
    lifted = _lifted(store, mv) if share_structures and not fixed_batch else None
    if lifted is None:
        return steps.proxy(unit.key, unit.name, lambda: artifacts.new_session(store, mv, intra=1),
                           mv.graph_bytes), unit.key
    fingerprint, graph, tensors = lifted
    key = f"structure:{fingerprint}"
    fetch = artifacts.blob_fetcher(store, mv)
    label = f'the structure of model "{mv.name}" version {mv.version}'
    lifted_names = {t.name for t in tensors}

    def load_shared():
        model = shared_weights.shared_model(graph, fetch, label, path_of=store.path, intra_op_threads=1)
        # the weight inputs have no batch axis: only the model's own inputs say whether its batch is fixed
        fixed = {shape[0] for name, shape in model.input_shapes.items()
                 if name not in lifted_names and shape and isinstance(shape[0], int) and shape[0] > 0}
        model.fixed_batch = min(fixed) if fixed else None
        return model

    session = steps.proxy(key, f"structure of {unit.name}", load_shared, len(graph))
    return LiftedStep(session, {t.name: (t.digest, t.dtype, t.dims) for t in tensors}, store.path), key
