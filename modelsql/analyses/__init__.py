"""Analyses of a model's graph or program: whether each output row depends on its input row alone
(batch_axis.py), per-node FLOPs and bytes from shape inference (static_features.py) and the cost model's
per-operator-class features built on them (cost_features.py), and the checks of a Python program's
determinism and row independence (program_checks.py)."""

from __future__ import annotations

from modelsql.analyses.batch_axis import batch_dependence

__all__ = ["batch_dependence"]
