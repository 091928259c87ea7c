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
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import onnx

from modelsql.catalog.entries import ModelVersion, PipelineVersion
from modelsql.catalog.traces import CostModelFit
from modelsql.costmodel.features import Config, model_features, row
from modelsql.costmodel.mantis import CostModel
from modelsql.engine.plan_cache import generation
from modelsql.engine.artifacts import merge_gain

if TYPE_CHECKING:
    from modelsql.engine.query.context import PlanningContext
    from modelsql.engine.query.bind_predict import PredictModel
    from modelsql.storage.blobstore import BlobStore

__all__ = ["Costs", "NO_COSTS", "static_at", "merged_static", "LEARNED_MIN_GAIN", "costs_for", "feature_row",
           "describe_fit", "COST_MODEL", "MIN_TRACES"]

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


# ---------------------------------------------------------------- the catalog's fit, loaded for the planner

COST_MODEL = "modelsql_cost"
"""The catalog model the cost model is stored as."""
MIN_TRACES = 8
"""Traces needed before a cost model is fitted (fewer leave most terms unidentified)."""

_CACHE: dict[tuple[str, int], Costs] = {}
_LOCK = threading.Lock()


def feature_row(features: dict[str, Any]) -> dict[str, Any]:
    """The cost model's input row (:func:`~modelsql.costmodel.features.row`) of a trace's ``features``."""
    static = {k: v for k, v in features.items()
              if k not in ("batch_size", "backend", "device", "threads", "merge_factor")}
    config = Config(batch_size=int(features["batch_size"]), backend=features["backend"],
                    threads=int(features["threads"]), merge_factor=int(features.get("merge_factor", 1)),
                    device=features.get("device", "cpu"))
    return row(static, config)


def describe_fit(fit: CostModelFit) -> str:
    """``cost model modelsql_cost version 3 (120 traces; 71% of held-out traces within 10%, median error 6%;
    noise ceiling 80%)``."""
    parts = [f"{fit.traces} traces"]
    if fit.within_10pct is not None:
        parts.append(f"{fit.within_10pct:.0%} of held-out traces within 10%, median error {fit.median_rel_error:.0%}")
    if fit.noise_ceiling is not None:
        parts.append(f"noise ceiling {fit.noise_ceiling:.0%}")
    return f"cost model {COST_MODEL} version {fit.version} ({'; '.join(parts)})"


def costs_for(ctx: PlanningContext) -> Costs:
    """The planner's :class:`~modelsql.engine.query.learned_costs.Costs` of the session's catalog: its latest fit, or
    :data:`~modelsql.engine.query.learned_costs.NO_COSTS` (no fit, or no catalog yet)."""
    if not ctx.catalog.present:
        return NO_COSTS
    key = (ctx.database_key, generation(ctx.database_key))
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    fit = ctx.catalog.traces.latest_fit()
    if fit is not None:
        costs = _costs(fit, ctx.store, ctx.catalog.traces.merged_before(fit.last_trace))
    else:
        n = ctx.catalog.traces.count()
        costs = NO_COSTS if not n else Costs(
            source=f"defaults: {n} trace{'s' if n != 1 else ''}, no cost model fitted (PROFILE fits one from "
                   f"{MIN_TRACES})")
    with _LOCK:
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = costs
    return costs


def _costs(fit: CostModelFit, store: BlobStore, merged: bool) -> Costs:
    model = CostModel.from_json(fit.spec)
    known = set(model.targets)

    def predict(features: list[dict[str, Any]]) -> list[float]:
        if any(f"{f['backend']}_{f.get('device', 'cpu')}" not in known for f in features):
            raise LookupError("no traces of that backend")
        return list(model.predict([feature_row(f) for f in features]))

    accuracy = describe_fit(fit)
    return Costs(predict=predict, store=store, source=accuracy, merge_traces=merged,
                 confidence=(f"{fit.within_10pct:.0%} of held-out traces within 10%"
                             if fit.within_10pct is not None else "not cross-validated (too few traces)"))
