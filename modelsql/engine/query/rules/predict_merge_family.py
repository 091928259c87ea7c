"""Rule: a routed PREDICT over one model family runs as one NetFuse-merged graph, where it pays.

NetFuse (Jeong, Kim, Cho and Lee, "NetFuse: Short-Circuiting Neural Networks by Merging
Model Instances", 2020) merges N networks of one architecture with different weights into
one graph whose operators compute all N at once (grouped convolution, batched matrix
multiplication, concatenated normalization parameters ...): rows routed to N models then
take one runtime call instead of N. It removes per-call overhead, not work, so it pays only
for small models or few rows per model; like dLoRA, which decides per batch whether merging
LoRA adapters pays, the routed operator re-checks each batch.

Matches (1): a scan whose model is :class:`~modelsql.catalog.entries.RoutedModels`. Rewrite:
sets its :class:`~modelsql.engine.query.plan.RoutePlan` to merge when every member has one
architecture fingerprint and :func:`modelsql.engine.artifacts.merge_gain.estimate` (the measured rule
of ``benchmarks/netfuse.py``) expects a gain for the rows each member gets per call (DuckDB's
estimate of the input spread evenly over the members, at most one chunk); otherwise to run
the members separately, saying why. A merge the rewrite declines at build time (an operator
without a merged counterpart) falls back to separate runs and EXPLAIN names the node.

Matches (2): a :class:`~modelsql.engine.query.plan.ShareGroup` (rule ``predict_share_input``: PREDICTs
over one input, run on the same chunks) holding two or more models of one architecture fed the
same columns with the same options. Rewrite: a :class:`~modelsql.engine.query.plan.FamilyShare`, so
each chunk runs one merged graph whose members all read that chunk (NetFuse with a shared input:
the first layers become one wide operator), each PREDICT taking its own outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from modelsql.catalog.entries import ModelVersion, RoutedModels
from modelsql.engine.query import cost
from modelsql.engine.artifacts import merge_gain
from modelsql.engine.query.learned_costs import NO_COSTS, Costs
from modelsql.engine.query.plan import FamilyShare, PredictScan, QueryPlan, RoutePlan, ShareGroup

__all__ = ["predict_merge_family"]


def predict_merge_family(plan: QueryPlan) -> QueryPlan:
    """``plan`` with a :class:`RoutePlan` on each routed scan (module docstring)."""
    scans = tuple(replace(s, route=route_plan(s, s.model, plan.costs)) if isinstance(s.model, RoutedModels) else s
                  for s in plan.scans)
    if not all(a is b for a, b in zip(scans, plan.scans)):
        plan = replace(plan, scans=scans)
    shares = tuple(f for f in (family_share(plan, g) for g in plan.groups) if f is not None)
    return replace(plan, family_shares=shares) if shares else plan


def family_share(plan: QueryPlan, group: ShareGroup) -> Optional[FamilyShare]:
    """The :class:`FamilyShare` of one share group, or None when it holds no two models of one family
    fed alike (then there is nothing to say)."""
    by_fingerprint: dict[str, list[PredictScan]] = {}
    for scan in (plan.scan(m) for m in group.members):
        if isinstance(scan.model, ModelVersion) and scan.model.fingerprint is not None:
            by_fingerprint.setdefault(scan.model.fingerprint, []).append(scan)
    family: list[PredictScan] = max(by_fingerprint.values(), key=len, default=[])
    same = [s for s in family if s.binding.args == family[0].binding.args
            and s.binding.arg_sql == family[0].binding.arg_sql and s.options == family[0].options]
    if len(same) < 2 or len({s.model.name for s in same}) < len(same):
        return None
    first, n = same[0], len(same)
    assert isinstance(first.model, ModelVersion)  # (grouped by fingerprint: model versions alone)
    merge, dense, reason = _decide(first, first.model, n, float(_rows_per_call(first)),
                                   f"NetFuse merge of {n} models of one architecture on a shared input: ", "",
                                   plan.costs)
    return FamilyShare(group.id, tuple(s.id for s in same), merge, dense, reason)


def route_plan(scan: PredictScan, models: RoutedModels, costs: Costs = NO_COSTS) -> RoutePlan:
    """The decision for one routed scan (``models``: its model)."""
    n = len(models.members)
    if n < 2:
        return RoutePlan(False, reason="one model: nothing to merge")
    if not models.one_architecture:
        odd = next((m for m in models.members if m.fingerprint is None or m.fingerprint != models.first.fingerprint),
                   models.first)
        why = ("has no architecture fingerprint (imported before catalog schema 4)" if odd.fingerprint is None
               else f'has another architecture than model "{models.first.name}"')
        return RoutePlan(False, reason=f'not merged: model "{odd.name}" {why}')
    merge, dense, reason = _decide(scan, models.first, n, max(1.0, _rows_per_call(scan) / n),
                                   f"NetFuse merge of {n} models of one architecture: ", "; re-checked per batch",
                                   costs, cost.routed_device(scan, costs)[0])
    return RoutePlan(merge, "stacked", dense, reason)


def _rows_per_call(scan: PredictScan) -> int:
    """Rows one call of the scan's function sees: DuckDB's estimate of its input, at most one chunk."""
    rows = scan.estimated_rows if scan.estimated_rows is not None else cost.CHUNK_ROWS
    return min(rows, cost.CHUNK_ROWS)


def _decide(scan: PredictScan, member: ModelVersion, n: int, per_member: float, head: str, tail: str,
            costs: Costs = NO_COSTS, device: str = "cpu") -> tuple[bool, str, str]:
    """(merge, dense lowering, reason) for ``n`` members like ``member`` given ``per_member`` rows each: the
    learned cost model where it has seen merged runs, else the measured rule, on ``device`` (on a CUDA device
    the rule weighs members, members captured and merged, and the reason names the three), unless the scan's
    ``merge = 'always' | 'never'`` decides."""
    est = (costs.merge_estimate(member, n, [per_member] * n) if device == "cpu" else None) \
        or merge_gain.estimate(merge_gain.member_cost(member), n, [per_member] * n, device=device)
    forced = {"always": True, "never": False}.get(scan.options.merge)
    if forced is None:
        return est.merge, est.dense, head + est.reason + tail
    return forced, est.dense, head + f"merge = '{scan.options.merge}' given (the measured rule alone: {est.reason})"

