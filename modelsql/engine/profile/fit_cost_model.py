"""The learned cost model in the catalog: trained from ``modelsql.traces``, stored as the catalog model
``modelsql_cost``, loaded for the planner.

:func:`retrain` fits a :class:`~modelsql.costmodel.mantis.CostModel` (Mantis-style: an additive physical
model corrected by a Lasso-selected polynomial; Chun et al., 2010) on every CPU trace, scores it by
5-fold cross-validation (the share of held-out traces predicted within 10% of their measured median,
and the median relative error), measures the noise ceiling (the share of traces whose even and odd runs
have medians within 10% of each other: what no model can beat), exports it to ONNX and stores it as a
new version of the catalog model ``modelsql_cost``, so ``DESCRIBE MODEL``, its versions and PREDICT
apply to it like to any model, and records the fit in ``modelsql.cost_models``. PROFILE calls it after
recording traces; a newer trace than the fit's last makes it stale and the next PROFILE retrains.

:func:`costs_for` gives the planner the latest fit as a :class:`~modelsql.engine.query.learned_costs.Costs`
(cached per database generation: PROFILE bumps it).
"""

from __future__ import annotations

import json
import statistics
from typing import TYPE_CHECKING, Optional

import numpy as np
import onnx

from modelsql.catalog.traces import CostModelFit
from modelsql.costmodel.evaluate import median_relative_error, within
from modelsql.costmodel.features import FEATURES, model_features
from modelsql.costmodel.mantis import CostModel
from modelsql.catalog.lineage import Origin
from modelsql.errors import Error
from modelsql.engine.query.learned_costs import COST_MODEL, MIN_TRACES, feature_row, merged_static
from modelsql.engine.handlers import catalog_write

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["COST_MODEL", "MIN_TRACES", "retrain", "trace_features", "feature_row"]

FOLDS = 5
"""Cross-validation folds of the held-out score."""



def trace_features(proto: onnx.ModelProto, batch_size: int, *, backend: str, threads: int, device: str = "cpu",
                   merge_factor: int = 1) -> dict:
    """A trace's ``features``: the graph's static features at ``batch_size``
    (:func:`~modelsql.costmodel.features.model_features`; for a merge factor above 1, ``proto`` is one member
    and its work is scaled as :func:`~modelsql.engine.query.learned_costs.merged_static` does at planning time) and the
    configuration."""
    static = model_features(proto, batch_size)
    if merge_factor > 1:
        static = merged_static(static, merge_factor)
    return dict(static, batch_size=batch_size, backend=backend, device=device,
                threads=threads, merge_factor=merge_factor)


def _training_set(session: Session) -> tuple[list[dict], list[float], list[tuple], int]:
    """``(rows, median ms, seconds of each trace, last trace number)`` of every trace whose model is known
    (features missing from catalog schema 6 traces are computed now and stored)."""
    rows, medians, runs, last = [], [], [], -1
    graphs: dict = {}
    for trace, model, version, backend, threads, batch, seconds, median_s, features in (
            session.catalog.traces.training_rows()):
        last = max(last, trace)
        if features is None:
            features = _missing_features(session, graphs, model, version, batch, backend, threads)
            if features is None:
                continue
            session.catalog.traces.set_features(trace, features)
        else:
            features = json.loads(features)
        rows.append(feature_row(features))
        medians.append(median_s * 1e3)
        runs.append(tuple(seconds))
    return rows, medians, runs, last


def _missing_features(session: Session, graphs: dict, model: str, version: int, batch: int, backend: str,
                      threads: int) -> Optional[dict]:
    key = (model, version)
    if key not in graphs:
        try:
            mv = session.catalog.get(model, version)
            graphs[key] = onnx.load_from_string(session.store.get(mv.graph_digest))
        except Error:
            graphs[key] = None  # dropped since: its traces cannot be described
    proto = graphs[key]
    return None if proto is None else trace_features(proto, batch, backend=backend, threads=threads)


def noise_ceiling(runs: list[tuple]) -> Optional[float]:
    """Share of traces whose even-numbered and odd-numbered runs have medians within 10% of each other
    (two interleaved measurements of the same point); None with no trace of at least 4 runs."""
    pairs = [(statistics.median(r[0::2]), statistics.median(r[1::2])) for r in runs if len(r) >= 4]
    if not pairs:
        return None
    return float(np.mean([abs(a - b) <= 0.10 * max(min(a, b), 1e-12) for a, b in pairs]))


def cross_validated(rows: list[dict], medians: list[float]) -> tuple[Optional[float], Optional[float]]:
    """``(within 10%, median relative error)`` of :data:`FOLDS`-fold cross-validation (None with too few rows)."""
    n = len(rows)
    if n < 2 * FOLDS:
        return None, None
    order = np.random.default_rng(0).permutation(n)
    predicted = np.empty(n)
    y = np.asarray(medians)
    for k in range(FOLDS):
        test = order[k::FOLDS]
        train = np.setdiff1d(order, test)
        model = CostModel().fit([rows[i] for i in train], y[train].tolist())
        predicted[test] = model.predict([rows[i] for i in test])
    return within(predicted.tolist(), medians), median_relative_error(predicted.tolist(), medians)


def retrain(session: Session) -> Optional[CostModelFit]:
    """Fit the cost model on every trace and store it as a new version of :data:`COST_MODEL` (module
    docstring); None (nothing stored) with fewer than :data:`MIN_TRACES` usable traces. Runs outside any
    open transaction (it commits like an IMPORT MODEL)."""
    from modelsql.engine.models.statements import import_model  # ddl imports the planner's session machinery; import it when used

    with session.catalog.transaction(join=False):
        rows, medians, runs, last = _training_set(session)
    if len(rows) < MIN_TRACES:
        return None
    held_out, error = cross_validated(rows, medians)
    model = CostModel().fit(rows, medians)
    mv = import_model(session, COST_MODEL, model.to_onnx(), features=list(FEATURES),
                      replace=session.catalog.exists(COST_MODEL), provenance=("cost_model", "modelsql:mantis"),
                      origin=Origin("cost_model", "PROFILE: the learned cost model fitted on modelsql.traces"))
    fit = CostModelFit(mv.version, len(rows), last, model.to_json(), held_out, error, noise_ceiling(runs))
    with catalog_write(session) as catalog:
        catalog.traces.add_fit(fit)
    return fit
