"""ONNX-ML tree ensembles as GEMM trees: exact when hard, differentiable when soft.

A fitted forest or boosted ensemble (``ai.onnx.ml`` ``TreeEnsembleClassifier`` / ``TreeEnsembleRegressor``,
as skl2onnx writes them) becomes three matrix products, the GEMM strategy of Nakandala et al. (OSDI 2020,
Hummingbird): internal node ``i`` tests feature ``f_i`` against threshold ``t_i``; leaf ``l`` is reached when
every test on its path goes the path's way; its values (one per class or target) are summed over trees.

* **hard** (``temperature == 0``): ``go_i = x_{f_i} <= t_i`` (``<`` for ``BRANCH_LT``) and a leaf's
  membership is 1 when all its path's tests agree: the ensemble's own function, to float rounding;
* **soft** (``temperature = T > 0``, neural translation of trees): ``go_i = sigmoid((t_i - x_{f_i}) /
  (T * sigma_f))`` and a leaf's membership is the product of ``go_i`` or ``1 - go_i`` along its path, so the
  thresholds and leaf values get gradients (hard trees give thresholds none). ``sigma_f`` is feature f's
  spread on the training rows (:meth:`GemmTrees.calibrate`), so ``T`` does not depend on feature scale.

Thresholds, leaf values and base values are ``nn.Parameter``; the feature of each test is fixed.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
from onnx import helper
from torch import nn

from modelsql.errors import NotSupportedError

__all__ = ["GemmTrees", "tree_ensemble"]

_BRANCHES = {"BRANCH_LEQ", "BRANCH_LT"}


def _log_sigmoid(z):
    """log(sigmoid(z)), finite for every z also once exported to ONNX (log(sigmoid) underflows to -inf, and
    -inf times a 0 of the path matrix is NaN)."""
    return torch.clamp(z, max=0) - torch.log1p(torch.exp(-torch.abs(z)))


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _strings(values) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


class GemmTrees(nn.Module):
    """A tree ensemble over float32 (N, F) features -> raw scores float32 (N, K) (before ``post_transform``).

    Args:
        features: per internal node its feature index (I,).
        thresholds: per internal node its threshold (I,).
        strict: per internal node True for ``x < t`` (``BRANCH_LT``), False for ``x <= t``.
        go_true, go_false: (I, L) 0/1 matrices: node i on leaf l's path, taken the true / false way.
        leaf_values: (L, K) values each leaf adds.
        base: (K,) base values.
        n_features: F.
        scale: multiplies the summed leaf values (1 / trees for an ``AVERAGE`` aggregate).
    """

    # the registered buffers (nn.Module's attribute lookup types them as Tensor | Module)
    features: torch.Tensor
    strict: torch.Tensor
    go_true: torch.Tensor
    go_false: torch.Tensor
    path_length: torch.Tensor
    sigma: torch.Tensor

    def __init__(self, features, thresholds, strict, go_true, go_false, leaf_values, base, n_features: int,
                 scale: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("features", torch.as_tensor(features, dtype=torch.int64))
        self.thresholds = nn.Parameter(torch.as_tensor(thresholds, dtype=torch.float32))
        self.register_buffer("strict", torch.as_tensor(strict, dtype=torch.bool))
        self.register_buffer("go_true", torch.as_tensor(go_true, dtype=torch.float32))
        self.register_buffer("go_false", torch.as_tensor(go_false, dtype=torch.float32))
        self.register_buffer("path_length", self.go_true.sum(0) + self.go_false.sum(0))
        self.leaf_values = nn.Parameter(torch.as_tensor(leaf_values, dtype=torch.float32))
        self.base = nn.Parameter(torch.as_tensor(base, dtype=torch.float32))
        self.register_buffer("sigma", torch.ones(max(n_features, int(self.features.max()) + 1 if len(features) else 1)))
        self.temperature = 0.0
        self.scale = scale

    def calibrate(self, x: torch.Tensor) -> None:
        """Set each feature's spread from training rows ``x`` (N, F): its standard deviation (1 when constant)."""
        with torch.no_grad():
            std = x.float().std(dim=0) if len(x) > 1 else torch.ones(x.shape[1])
            self.sigma = torch.where(std > 1e-6, std, torch.ones_like(std))  # a registered buffer: replaced

    def forward(self, x):
        picked = x.index_select(1, self.features)
        if self.temperature <= 0:
            go = torch.where(self.strict, picked < self.thresholds, picked <= self.thresholds).float()
            agree = go @ self.go_true + (1 - go) @ self.go_false
            member = (agree == self.path_length).float()
        else:
            z = (self.thresholds - picked) / (self.temperature * self.sigma.index_select(0, self.features))
            member = torch.exp(_log_sigmoid(z) @ self.go_true + _log_sigmoid(-z) @ self.go_false)
        return (member @ self.leaf_values) * self.scale + self.base


def tree_ensemble(node, n_features: int) -> tuple[GemmTrees, dict]:
    """(the :class:`GemmTrees` of an ONNX-ML tree ensemble node, its other attributes: ``post_transform``,
    ``classlabels`` (a list, classifier only), ``n_outputs``, ``classifier``, ``n_trees``).

    Raises:
        NotSupportedError: ``not_supported`` for branch modes other than ``BRANCH_LEQ`` / ``BRANCH_LT`` and for
            missing-value tracking.
    """
    a = _attrs(node)
    classifier = node.op_type == "TreeEnsembleClassifier"
    prefix = "class" if classifier else "target"
    modes = _strings(a["nodes_modes"])
    bad = sorted({m for m in modes if m != "LEAF" and m not in _BRANCHES})
    if bad:
        raise NotSupportedError(f"{node.op_type}: branch mode {bad[0]} is not translated (only BRANCH_LEQ, BRANCH_LT)",
                                code="not_supported")
    if any(a.get("nodes_missing_value_tracks_true", [])):
        raise NotSupportedError(f"{node.op_type}: missing-value tracking is not translated", code="not_supported")
    thresholds = a.get("nodes_values") or list(np.asarray(helper.get_attribute_value(
        next(x for x in node.attribute if x.name == "nodes_values_as_tensor")).float_data))
    weights = a.get(f"{prefix}_weights") or list(helper.get_attribute_value(
        next(x for x in node.attribute if x.name == f"{prefix}_weights_as_tensor")).float_data)
    key = list(zip(a["nodes_treeids"], a["nodes_nodeids"]))
    index = {k: i for i, k in enumerate(key)}
    internal = [i for i, m in enumerate(modes) if m != "LEAF"]
    leaves = [i for i, m in enumerate(modes) if m == "LEAF"]
    pos_internal = {i: k for k, i in enumerate(internal)}
    pos_leaf = {i: k for k, i in enumerate(leaves)}
    go_true = np.zeros((len(internal), len(leaves)), np.float32)
    go_false = np.zeros_like(go_true)
    for i in internal:  # walk down from each internal node's children, marking every leaf below
        tree = a["nodes_treeids"][i]
        for child, table in ((a["nodes_truenodeids"][i], go_true), (a["nodes_falsenodeids"][i], go_false)):
            stack = [index[(tree, child)]]
            while stack:
                j = stack.pop()
                if modes[j] == "LEAF":
                    table[pos_internal[i], pos_leaf[j]] = 1
                else:
                    stack += [index[(tree, a["nodes_truenodeids"][j])], index[(tree, a["nodes_falsenodeids"][j])]]
    labels = a.get("classlabels_int64s") or _strings(a.get("classlabels_strings", []))
    n_out = len(labels) if classifier else int(a.get("n_targets", 1))
    ids = a[f"{prefix}_ids"]
    columns = (max(ids) + 1) if ids else n_out
    if not (classifier and n_out == 2 and columns == 1):  # one column of a binary classifier: the positive class
        columns = max(columns, n_out)
    leaf_values = np.zeros((len(leaves), columns), np.float32)
    sums: defaultdict[tuple[int, int], float] = defaultdict(float)
    for t, n, k, w in zip(a[f"{prefix}_treeids"], a[f"{prefix}_nodeids"], ids, weights):
        sums[(pos_leaf[index[(t, n)]], k)] += w
    for (leaf, k), w in sums.items():
        leaf_values[leaf, k] = w
    base = np.asarray(a.get("base_values") or [0.0] * columns, np.float32)
    n_trees = len(set(a["nodes_treeids"]))
    average = (a.get("aggregate_function") or b"SUM") in (b"AVERAGE", "AVERAGE")
    trees = GemmTrees([a["nodes_featureids"][i] for i in internal], [thresholds[i] for i in internal],
                      [modes[i] == "BRANCH_LT" for i in internal], go_true, go_false, leaf_values, base, n_features,
                      scale=1.0 / n_trees if average else 1.0)
    extra = {"post_transform": (a.get("post_transform") or b"NONE"), "classlabels": list(labels),
             "n_outputs": n_out, "classifier": classifier, "n_trees": n_trees}
    extra = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in extra.items()}
    return trees, extra
