"""A network TUNE trained, wrapped for PREDICT and rebuilt from JSON arguments (a Python program's reference).

Studies over fixed-width features export their trained network to ONNX (``CREATE MODEL m FROM STUDY s``,
through :func:`modelsql.tuning.training.for_inference`). A network over trees (a recursive model, run by
the level-batched executor) has no single ONNX graph, so it is stored as a Python program instead: the
reference ``modelsql.tuning.inference:TrainedNetwork`` and the arguments below rebuild the same module in
any process, and the trial's weights are loaded into it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from modelsql.tuning.factories import resolve_factory

__all__ = ["TrainedNetwork"]


class TrainedNetwork(torch.nn.Module):
    """``factory(in_features=F, n_outputs=K, **params)`` with PREDICT's outputs.

    Classification returns ``label`` (int64 (N,): the integer class label) and ``probabilities`` (float32
    (N, K), softmax); regression returns ``prediction`` (float32 (N,)). ``forward`` passes its inputs to the
    network unchanged (for a recursive model: the ``values`` and ``parents`` lists of each tree).

    Args:
        factory: the trainable's ``"package.module:function"``.
        params: the factory's keyword arguments (JSON values).
        in_features, n_outputs: as TUNE called the factory.
        task: ``"classification"`` or ``"regression"``.
        labels: the integer class labels, in index order (classification).
    """

    def __init__(self, factory: str, params: dict, in_features: int, n_outputs: int, task: str,
                 labels: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        self.inner = resolve_factory(factory)(in_features=in_features, n_outputs=n_outputs, **params)
        self.task = task
        values = list(labels) if labels is not None else list(range(n_outputs))
        self.register_buffer("values", torch.tensor(values, dtype=torch.int64))

    def forward(self, *inputs):
        out = self.inner(*inputs)
        if self.task == "regression":
            return out[:, 0]
        return self.values[torch.argmax(out, dim=1)], torch.softmax(out, dim=1)
