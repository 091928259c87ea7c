"""NetFuse (Jeong et al., 2020): N models of one architecture with different weights merged into one ONNX
graph. merge.py is the rewrite and its interface, layout.py the layouts R, K, S and C of the merged tensors,
ops.py one rewrite per ONNX operator."""

from __future__ import annotations

from modelsql.netfuse.merge import DENSE_LOWERINGS, MIN_OPSET, MergeDeclined, merge_models

__all__ = ["merge_models", "MergeDeclined", "MIN_OPSET", "DENSE_LOWERINGS"]
