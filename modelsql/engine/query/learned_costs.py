"""What the cost function asks of the learned cost model: one model version's run time in one configuration.

:class:`Costs` is the planner's view of the catalog's latest cost-model fit (the catalog model
``modelsql_cost``, trained by :mod:`modelsql.engine.profile.fit_cost_model` from ``modelsql.traces``): given a
model version, a batch size, a thread count, a backend and a merge factor, the predicted milliseconds
of one run, from the version's static features at that batch
(:func:`~modelsql.costmodel.features.model_features`) and the configuration. With no fit (no traces
yet) :data:`NO_COSTS` answers None and the cost function uses its documented defaults
(:mod:`modelsql.engine.query.cost`), and EXPLAIN says which it used.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import onnx

from modelsql.catalog.entries import ModelVersion, PipelineVersion
from modelsql.costmodel.features import model_features
from modelsql.engine.artifacts import merge_gain

if TYPE_CHECKING:
    from modelsql.engine.query.bind_predict import PredictModel
    from modelsql.storage.blobstore import BlobStore

__all__ = ["Costs", "NO_COSTS", "static_at", "merged_static", "LEARNED_MIN_GAIN"]

LEARNED_MIN_GAIN = 1.25
"""The estimated speedup the learned cost model must see before it moves a PREDICT off its default operator
(streaming) or merges a family: its median error on held-out traces is about 20% here
(``benchmarks/results/cost_model.json``), so smaller estimated gains are within its error."""

FeatureRow = dict[str, object]
"""One configuration as the cost model reads it: a version's static features at a batch size, the batch size,
backend, device, threads and merge factor (the JSON objects of ``modelsql.traces.features``)."""

_STATIC: "OrderedDict[tuple[str, int], dict[str, float]]" = OrderedDict()
_STATIC_LOCK = threading.Lock()
_STATIC_SIZE = 512


def static_at(store: BlobStore, mv: PredictModel, batch: int) -> Optional[dict[str, float]]:
    """The cost features of ``mv``'s graph at ``batch`` rows (cached by graph digest), or None for a version
    that is not one ONNX graph (a pipeline, a set of models)."""
    if not isinstance(mv, ModelVersion) or not mv.graph_digest:
        return None
    key = (mv.graph_digest, int(batch))
    with _STATIC_LOCK:
        if key in _STATIC:
            _STATIC.move_to_end(key)
            return _STATIC[key]
    graph = onnx.load_from_string(store.get(mv.graph_digest))  # only shapes and initializer dims are read
    features = model_features(graph, int(batch))
    with _STATIC_LOCK:
        _STATIC[key] = features
        while len(_STATIC) > _STATIC_SIZE:
            _STATIC.popitem(last=False)
    return features


def merged_static(static: dict[str, float], n: int) -> dict[str, float]:
    """The features of a NetFuse merge of ``n`` copies of a graph with features ``static`` on a shared input:
    the work (FLOPs, bytes, parameters) of ``n`` members in the node count of one (one merged operator per
    node), the input read once."""
    out = dict(static)
    for k, v in static.items():
        if k != "input_bytes" and (k.endswith("_flops") or k.endswith("_bytes") or k in ("params", "param_bytes")):
            out[k] = v * n
    return out


@dataclass(frozen=True)
class Costs:
    """The learned cost model as the planner reads it.

    Attributes:
        predict: trace feature rows (the JSON objects of ``modelsql.traces.features``) -> milliseconds per
            run, or None when there is no fit.
        store: the blob store the model versions' graphs are read from.
        source: what the figures come from, for EXPLAIN (the fit's version and accuracy, or the defaults).
        confidence: the fit's accuracy in words (``"62% of held-out traces within 10%"``), or "".
        merge_traces: whether the fit saw runs of merged graphs (merge factor > 1): only then does it
            decide merges.
    """

    predict: Optional[Callable[[list[FeatureRow]], Sequence[float]]] = None
    store: Optional[BlobStore] = None
    source: str = "defaults, no profile traces yet"
    confidence: str = ""
    merge_traces: bool = False
    memo: dict[tuple[object, ...], Optional[float]] = field(default_factory=dict, compare=False, repr=False)
    """Predictions already made, by configuration (a routed PREDICT asks again for every batch)."""

    @property
    def learned(self) -> bool:
        """Whether a fitted cost model answers."""
        return self.predict is not None

    def run_ms(self, mv: PredictModel, batch: int, *, threads: int, backend: str = "onnxruntime",
               merge_factor: int = 1, device: str = "cpu") -> Optional[float]:
        """Predicted milliseconds of one run of ``mv`` on ``batch`` rows on ``device`` (``"cpu"`` or
        ``"cuda:N"``, a feature of the cost model: PROFILE traces each device present) (a pipeline: the sum
        of its steps'), or None (no fit, no traces of that device, or a version the model cannot describe)."""
        if self.predict is None:
            return None
        ident: object = (("pipeline", mv.name, mv.version) if isinstance(mv, PipelineVersion)
                         else mv.graph_digest if isinstance(mv, ModelVersion) else None)
        if ident is None:
            return None
        key = (ident, int(batch), int(threads), backend, int(merge_factor), device)
        if key not in self.memo:
            if len(self.memo) > 4096:
                self.memo.clear()
            self.memo[key] = self._run_ms(mv, batch, threads=threads, backend=backend, merge_factor=merge_factor,
                                          device=device)
        return self.memo[key]

    def _run_ms(self, mv: PredictModel, batch: int, *, threads: int, backend: str, merge_factor: int,
                device: str) -> Optional[float]:
        if isinstance(mv, PipelineVersion) and merge_factor == 1:  # its steps run one after another
            steps = [self.run_ms(step.model, batch, threads=threads, backend=backend, device=device)
                     for step in mv.steps]
            known = [t for t in steps if t is not None]
            return None if len(known) < len(steps) else sum(known)
        predict, store = self.predict, self.store
        static = static_at(store, mv, batch) if predict is not None and store is not None else None
        if predict is None or static is None:
            return None
        if merge_factor > 1:
            static = merged_static(static, merge_factor)
        row: FeatureRow = {**static, "batch_size": int(batch), "backend": backend, "device": device.split(":")[0],
                           "threads": int(threads), "merge_factor": int(merge_factor)}
        try:
            return float(predict([row])[0])
        except LookupError:  # the fit has no traces of that backend
            return None


    def device_runs(self, mv: PredictModel, device: str) -> Optional[Callable[[float, int], Optional[float]]]:
        """``(rows, merge factor) -> ms`` of one one-thread run of ``mv`` on the CUDA ``device`` by the learned
        cost model (None where it has no traces of that device), or None without a fit or on the CPU: what
        :func:`~modelsql.engine.artifacts.merge_gain.estimate` takes as ``learned``."""
        if not self.learned or device == "cpu":
            return None

        def runs(rows: float, factor: int) -> Optional[float]:
            return self.run_ms(mv, max(1, int(round(rows))), threads=1, merge_factor=factor, device=device)
        return runs

    def merge_estimate(self, member: ModelVersion, n: int, rows: Sequence[float]
                       ) -> Optional["merge_gain.MergeEstimate"]:
        """Whether an ``n``-way NetFuse merge pays for a run giving member ``i`` ``rows[i]`` rows, by the learned
        cost model (the present members' separate one-thread runs against one run of the merge, every
        member padded to the most rows), or None when it has seen no merged runs or cannot describe the model."""
        present = [max(1, int(round(r))) for r in rows if r > 0]
        if not self.merge_traces or n < 2 or not present:
            return None
        widest = max(present)
        ones = [self.run_ms(member, r, threads=1) for r in sorted(set(present))]
        merged = self.run_ms(member, widest, threads=1, merge_factor=n)
        known = [o for o in ones if o is not None]
        if merged is None or len(known) < len(ones):
            return None
        by_rows = dict(zip(sorted(set(present)), known))
        separate = sum(by_rows[r] for r in present)
        gain = separate / merged if merged > 0 else 0.0
        verdict = gain >= LEARNED_MIN_GAIN
        dense = "conv" if widest <= merge_gain.CONV_MAX_ROWS else "matmul"
        reason = (f"estimated {separate:.3f} ms for {len(present)} separate runs against {merged:.3f} ms merged "
                  f"({n} instances x {widest} rows, {self.source}): "
                  + (f"merge ({gain:.2f}x)" if verdict else
                     f"run separately (merging would give {gain:.2f}x, under {LEARNED_MIN_GAIN}x)"))
        return merge_gain.MergeEstimate(verdict, dense, separate, merged, reason)


NO_COSTS = Costs()
"""No fitted cost model: every :meth:`Costs.run_ms` is None."""
