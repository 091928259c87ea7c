"""The Child-Sum TreeLSTM (Tai, Socher and Manning, ACL 2015) as a cell of the level-batched executor.

For node j with children C(j), input x_j, child states (h_k, c_k):

    h~_j = sum_k h_k
    i_j, o_j, u_j = sigmoid(W_i x_j + U_i h~_j), sigmoid(W_o x_j + U_o h~_j), tanh(W_u x_j + U_u h~_j)
    f_jk = sigmoid(W_f x_j + U_f h_k)                 (one forget gate per child)
    c_j = i_j * u_j + sum_k f_jk * c_k,   h_j = o_j * tanh(c_j)

:class:`TreeLSTM` reads the root's h through a linear head. Its ``forward`` takes a
:class:`~modelsql.recursive.trees.Trees` (TUNE's minibatches) or PREDICT's two ragged inputs (``values``: one
float tensor per tree, (nodes,) or (nodes, F); ``parents``: one int64 tensor per tree), and runs
:func:`~modelsql.recursive.trees.level_batched` (``executor = "level"``) or the Python recursion it replaces
(``executor = "naive"``, for comparison): the same function, the same weights.
"""

from __future__ import annotations

import torch
from torch import nn

from modelsql.recursive.trees import Trees, level_batched, naive_recursion

__all__ = ["ChildSumTreeLSTMCell", "TreeLSTM", "tree_lstm"]


class ChildSumTreeLSTMCell(nn.Module):
    """The cell: ``(x (m, F), (h_k, c_k) (e, H) each, child_parent (e,), m) -> (h (m, H), c (m, H))``."""

    def __init__(self, in_features: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.w_iou = nn.Linear(in_features, 3 * hidden)
        self.u_iou = nn.Linear(hidden, 3 * hidden, bias=False)
        self.w_f = nn.Linear(in_features, hidden)
        self.u_f = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, child, child_parent, m: int):
        h_k, c_k = child
        zeros = x.new_zeros((m, self.hidden))
        h_sum = zeros.index_add(0, child_parent, h_k)
        i, o, u = (self.w_iou(x) + self.u_iou(h_sum)).chunk(3, dim=1)
        f = torch.sigmoid(self.w_f(x).index_select(0, child_parent) + self.u_f(h_k))
        c = torch.sigmoid(i) * torch.tanh(u) + zeros.index_add(0, child_parent, f * c_k)
        return torch.sigmoid(o) * torch.tanh(c), c


class TreeLSTM(nn.Module):
    """A Child-Sum TreeLSTM classifier or regressor over trees: logits (trees, n_outputs) from the root state.

    Args:
        in_features: values per node.
        n_outputs: classes (or 1 for regression).
        hidden: state width H.
        executor: ``"level"`` (level-batched) or ``"naive"`` (Python recursion, one node per call).
    """

    def __init__(self, in_features: int = 1, n_outputs: int = 2, hidden: int = 16, executor: str = "level") -> None:
        super().__init__()
        self.cell = ChildSumTreeLSTMCell(in_features, hidden)
        self.head = nn.Linear(hidden, n_outputs)
        self.executor = executor

    def forward(self, values, parents=None):
        trees = values if isinstance(values, Trees) else Trees(
            [v.detach().numpy() if hasattr(v, "detach") else v for v in values],
            [p.detach().numpy() if hasattr(p, "detach") else p for p in parents])
        shapes = [(self.cell.hidden,), (self.cell.hidden,)]
        run = level_batched if self.executor == "level" else naive_recursion
        h, _ = run(self.cell, trees, shapes)
        return self.head(h)


def tree_lstm(in_features: int = 1, n_outputs: int = 2, hidden: int = 16) -> TreeLSTM:
    """A trainable factory for TUNE (``CREATE MODEL m FROM PYTHON 'modelsql.recursive.treelstm:tree_lstm'``)."""
    return TreeLSTM(in_features, n_outputs, hidden)
