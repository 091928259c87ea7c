"""Rewrite rules over the whole logical plan, applied in the listed order.

Each rule is a function ``plan -> plan`` in its own file, named for what it
matches and does; its docstring states the rewrite and cites its paper. A rule
that does not apply returns its input unchanged (it may add a line to
``plan.notes`` saying why it declined, which EXPLAIN prints).
"""

from __future__ import annotations

from modelsql.planner.plan import QueryPlan
from modelsql.planner.rules.pipeline_share_steps import pipeline_share_steps
from modelsql.planner.rules.predict_merge_family import predict_merge_family
from modelsql.planner.rules.predict_prune_outputs import predict_prune_outputs
from modelsql.planner.rules.predict_share_input import predict_share_input
from modelsql.planner.rules.tune_stage_tree import tune_stage_tree

RULES = (predict_prune_outputs, predict_share_input, pipeline_share_steps, predict_merge_family)

TUNE_RULES = (tune_stage_tree,)
"""Rules over one round of a study (:class:`~modelsql.planner.plan.RoundPlan` -> ``RoundPlan``), applied by
:class:`~modelsql.planner.tune_run.StudyRun`."""


def apply_rules(plan: QueryPlan, rules=RULES) -> QueryPlan:
    """``plan`` after every rule of ``rules``, in order."""
    for rule in rules:
        plan = rule(plan)
    return plan


__all__ = ["RULES", "TUNE_RULES", "apply_rules", "tune_stage_tree", "predict_prune_outputs", "predict_share_input", "pipeline_share_steps",
           "predict_merge_family"]
