"""Rule ``predict_prune_outputs``: compute only the model outputs the query reads.

Rewrite: a PREDICT scan whose statement never names one of its output
columns (and has no ``*`` that could pass it on,
:func:`~modelsql.engine.query.references.referenced_names`) drops that output, so
ONNX Runtime is asked only for the outputs kept and no unused tensor is
converted back to Arrow or carried through the statement. (ONNX Runtime still
runs its whole graph: a row that fails only in an unread output fails either way.) At least one output is kept in the
plan; when the query reads none at all (``SELECT count(*) FROM PREDICT(...)``)
DuckDB's own optimizer drops the call, so the model does not run and a NULL
input is not reported: the answer never depends on the predictions.

This is projection pushdown through a model, one of the cross-optimizations
of SQL and ML inference in Raven (Karanasos et al., "Extending Relational
Query Processing with ML Inference", CIDR 2020); PRETZEL (OSDI 2018) prunes
pipeline stages whose results no consumer reads in the same spirit.
"""

from __future__ import annotations

from dataclasses import replace

from modelsql.engine.query.plan import PredictScan, QueryPlan


def predict_prune_outputs(plan: QueryPlan) -> QueryPlan:
    """Each scan keeps only the outputs its statement may read (all when that is unknown);
    returns ``plan`` itself when nothing is pruned."""
    scans = tuple(_pruned(s) for s in plan.scans)
    if all(a is b for a, b in zip(scans, plan.scans)):
        return plan
    return replace(plan, scans=scans)


def _pruned(scan: PredictScan) -> PredictScan:
    if scan.used is None:
        return scan
    outputs = scan.binding.outputs
    kept = tuple(o for o in outputs if o.column.lower() in scan.used) or outputs[:1]
    if len(kept) == len(outputs):
        return scan
    return replace(scan, binding=replace(scan.binding, outputs=kept))
