"""Rewrite rules over bound PREDICTs, applied in the listed order.

Each rule is a function in its own file, named for what it matches and does,
that returns its input unchanged when it does not apply.
"""

from .predict_prune_outputs import predict_prune_outputs, referenced_names

RULES = (predict_prune_outputs,)

__all__ = ["RULES", "predict_prune_outputs", "referenced_names"]
