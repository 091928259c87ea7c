"""Rewrite rules over the whole logical plan of a query, applied in the listed order.

(A study's rounds have their own rewrite, :func:`modelsql.engine.tune.stage_tree.tune_stage_tree`.)

Each rule is a function ``plan -> plan`` in its own file, named for what it
matches and does; its docstring states the rewrite and cites its paper. A rule
that does not apply returns its input unchanged (it may add a line to
``plan.notes`` saying why it declined, which EXPLAIN prints).
"""

from __future__ import annotations

from typing import Callable, Sequence

from modelsql.engine.query.plan import QueryPlan
from modelsql.engine.query.rules.pipeline_share_steps import pipeline_share_steps
from modelsql.engine.query.rules.predict_merge_family import predict_merge_family
from modelsql.engine.query.rules.predict_prune_outputs import predict_prune_outputs
from modelsql.engine.query.rules.predict_share_input import predict_share_input

Rule = Callable[[QueryPlan], QueryPlan]
"""A rewrite of the whole plan (returns its input itself when it does not apply)."""

RULES: tuple[Rule, ...] = (predict_prune_outputs, predict_share_input, pipeline_share_steps, predict_merge_family)


def apply_rules(plan: QueryPlan, rules: Sequence[Rule] = RULES) -> QueryPlan:
    """``plan`` after every rule of ``rules``, in order."""
    for rule in rules:
        plan = rule(plan)
    return plan


__all__ = ["RULES", "apply_rules", "predict_prune_outputs", "predict_share_input", "pipeline_share_steps",
           "predict_merge_family"]
