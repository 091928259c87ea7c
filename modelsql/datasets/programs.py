"""Ten small imperative PyTorch programs: the coverage suite of ``CREATE MODEL m FROM PYTHON``.

They are the kinds of program JANUS (Jeong et al., NSDI 2019) and Terra (Kim et al., NeurIPS 2021)
were compared on, each using one Python feature that a graph exporter must either capture or refuse:

=================  ===============================================  =================================
name               the Python feature                               rows
=================  ===============================================  =================================
``while_loop``     a while loop on a tensor value                   independent (masked halving)
``tensor_if``      an ``if`` on a tensor value (the batch's mean)    batch-dependent
``collections``    Python lists and dicts of tensors                independent
``numpy_call``     a NumPy call inside ``forward``                  independent
``tokenizer``      a Python tokenizer before an embedding           independent (text input)
``early_return``   an early ``return`` on a tensor value             batch-dependent
``module_state``   state kept on the module across calls            independent (a call counter)
``generator``      a generator expression over layers               independent
``tree_recursion`` recursion over a tree given as parent indices    independent (per-row trees)
``shape_branch``   behaviour that changes with the batch size        batch-dependent
=================  ===============================================  =================================

Every class builds with no arguments and seeded weights (equal modules in every process), and has an
``example()`` static method giving an example batch (a tensor, a tuple of tensors, or a list of strings
for ``tokenizer``); :data:`PROGRAMS` maps each name to its class and :func:`new_inputs` draws inputs other
than the example, for differential tests against eager PyTorch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["PROGRAMS", "FEATURES", "new_inputs", "WhileLoop", "TensorIf", "Collections", "NumpyCall", "Tokenizer",
           "EarlyReturn", "ModuleState", "Generator", "TreeRecursion", "ShapeBranch"]

FEATURES = 4
"""Width of the float input of the tensor programs (``x``: float32, shape (batch, 4))."""

TREE_NODES = 7
"""Nodes per tree of :class:`TreeRecursion` (``parents``: int64, shape (batch, 7); -1 marks the root)."""


def _seeded(module: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module


def _x(batch: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, FEATURES, generator=torch.Generator().manual_seed(seed)) * 2


class WhileLoop(nn.Module):
    """Halve each row until its largest magnitude is at most 1 (a loop whose trip count is a tensor value),
    then a linear layer. x: float32 (batch, 4) -> (batch, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = _seeded(nn.Linear(FEATURES, 3), 1)

    def forward(self, x):
        while bool((x.abs().amax(dim=1) > 1).any()):
            big = (x.abs().amax(dim=1, keepdim=True) > 1)
            x = torch.where(big, x / 2, x)
        return self.head(x)

    @staticmethod
    def example():
        return _x()


class TensorIf(nn.Module):
    """One of two heads, chosen by an ``if`` on the batch's mean (so a row's output depends on its batch).
    x: float32 (batch, 4) -> (batch, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = _seeded(nn.Linear(FEATURES, 3), 2)
        self.down = _seeded(nn.Linear(FEATURES, 3), 3)

    def forward(self, x):
        if x.mean() > 0:
            return self.up(x)
        return self.down(x)

    @staticmethod
    def example():
        return _x()


class Collections(nn.Module):
    """Branch outputs kept in a dict and a list, then summed. x: float32 (batch, 4) -> (batch, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleList(_seeded(nn.Linear(FEATURES, FEATURES), 10 + i) for i in range(3))

    def forward(self, x):
        named = {}
        for i, layer in enumerate(self.branches):
            named[f"b{i}"] = torch.relu(layer(x))
        parts = [named[k] for k in sorted(named)]
        return parts[0] + parts[1] * parts[2]

    @staticmethod
    def example():
        return _x()


class NumpyCall(nn.Module):
    """A NumPy clip and tanh between two linear layers. x: float32 (batch, 4) -> (batch, 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = _seeded(nn.Linear(FEATURES, 6), 4)
        self.b = _seeded(nn.Linear(6, 2), 5)

    def forward(self, x):
        h = self.a(x)
        h = torch.from_numpy(np.tanh(np.clip(h.detach().numpy(), -1.5, 1.5)))
        return self.b(h)

    @staticmethod
    def example():
        return _x()


class Tokenizer(nn.Module):
    """A Python tokenizer (lower-case, split on spaces, a vocabulary dict, hashing unknown words into 8
    buckets) before a mean embedding and a linear layer. text: list of str (batch,) -> float32 (batch, 2)."""

    VOCAB = {w: i for i, w in enumerate("good bad great awful fine poor love hate the a".split())}

    def __init__(self) -> None:
        super().__init__()
        self.embed = _seeded(nn.Embedding(len(self.VOCAB) + 8, 5), 6)
        self.head = _seeded(nn.Linear(5, 2), 7)

    def ids(self, text: str) -> list:
        words = text.lower().split() or [""]
        return [self.VOCAB.get(w, len(self.VOCAB) + sum(map(ord, w)) % 8) for w in words]

    def forward(self, text):
        rows = [self.embed(torch.tensor(self.ids(t), dtype=torch.int64)).mean(dim=0) for t in text]
        return self.head(torch.stack(rows))

    @staticmethod
    def example():
        return ["good film", "awful plot but great cast", "the end"]


class EarlyReturn(nn.Module):
    """Returns zeros early when any value of the batch is extreme (so a row's output depends on its batch).
    x: float32 (batch, 4) -> (batch, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = _seeded(nn.Linear(FEATURES, 3), 8)

    def forward(self, x):
        if x.abs().max() > 5:
            return torch.zeros(x.shape[0], 3)
        return torch.sigmoid(self.head(x))

    @staticmethod
    def example():
        return _x()


class ModuleState(nn.Module):
    """Counts its calls on the module (a Python int) and builds a lookup table lazily on the first call;
    its outputs do not depend on the count. x: float32 (batch, 4) -> (batch, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = _seeded(nn.Linear(FEATURES, 3), 9)
        self.calls = 0
        self.scale = None

    def forward(self, x):
        self.calls += 1
        if self.scale is None:
            self.scale = torch.linspace(0.5, 1.5, 3)
        return self.head(x) * self.scale

    @staticmethod
    def example():
        return _x()


class Generator(nn.Module):
    """A generator expression over a stack of residual layers. x: float32 (batch, 4) -> (batch, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_seeded(nn.Linear(FEATURES, FEATURES), 20 + i) for i in range(4))

    def steps(self, x):
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
            yield x

    def forward(self, x):
        return sum(h * (i + 1) for i, h in enumerate(self.steps(x))) / 10

    @staticmethod
    def example():
        return _x()


class TreeRecursion(nn.Module):
    """A recursive network over each row's tree, given as node values and parent indices (-1: the root):
    h(node) = tanh(W [value, sum of h(children)]), read at the root. values: float32 (batch, 7), parents:
    int64 (batch, 7) -> float32 (batch, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = _seeded(nn.Linear(1 + 3, 3), 30)

    def node(self, values, children, i):
        below = [self.node(values, children, c) for c in children[i]]
        total = torch.stack(below).sum(dim=0) if below else torch.zeros(3)
        return torch.tanh(self.cell(torch.cat([values[i : i + 1], total])))

    def forward(self, values, parents):
        out = []
        for row in range(values.shape[0]):
            p = parents[row].tolist()
            children = {i: [c for c, q in enumerate(p) if q == i] for i in range(len(p))}
            out.append(self.node(values[row], children, p.index(-1)))
        return torch.stack(out)

    @staticmethod
    def example():
        return _trees(3, 0)


def _trees(batch: int, seed: int):
    rng = np.random.default_rng(seed)
    parents = np.empty((batch, TREE_NODES), np.int64)
    for row in range(batch):
        order = rng.permutation(TREE_NODES)
        parents[row, order[0]] = -1
        for k in range(1, TREE_NODES):
            parents[row, order[k]] = order[rng.integers(0, k)]
    values = rng.standard_normal((batch, TREE_NODES)).astype(np.float32)
    return torch.from_numpy(values), torch.from_numpy(parents)


class ShapeBranch(nn.Module):
    """Small batches take an exact GELU, batches of 8 or more the tanh approximation (a shape-dependent
    branch, so a row's output depends on its batch's size). x: float32 (batch, 4) -> (batch, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = _seeded(nn.Linear(FEATURES, 3), 11)

    def forward(self, x):
        if x.shape[0] < 8:
            return nn.functional.gelu(self.head(x) * 3)
        return nn.functional.gelu(self.head(x) * 3, approximate="tanh")

    @staticmethod
    def example():
        return _x()


PROGRAMS = {
    "while_loop": WhileLoop, "tensor_if": TensorIf, "collections": Collections, "numpy_call": NumpyCall,
    "tokenizer": Tokenizer, "early_return": EarlyReturn, "module_state": ModuleState, "generator": Generator,
    "tree_recursion": TreeRecursion, "shape_branch": ShapeBranch,
}
"""Program name -> its class (``modelsql.datasets.programs:<Class>`` is its FROM PYTHON reference)."""

_WORDS = "good bad great awful fine poor love hate the a plot cast film end but".split()


def new_inputs(name: str, batch: int, seed: int = 1):
    """Inputs of program ``name`` other than its example: ``batch`` rows drawn with ``seed`` (for
    ``tokenizer`` a list of ``batch`` strings; for ``tree_recursion`` a (values, parents) pair)."""
    if name == "tokenizer":
        rng = np.random.default_rng(seed)
        return [" ".join(rng.choice(_WORDS + ["unseen", "Words"], rng.integers(1, 6))) for _ in range(batch)]
    if name == "tree_recursion":
        return _trees(batch, seed)
    return _x(batch, seed + 100)
