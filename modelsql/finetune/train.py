"""Joint fine-tuning of a translated pipeline, the original kept as a candidate chosen on validation.

Protocol (the one measured when the issue was planned: 5 seeds, 60/20/20 splits): full-batch Adam over
every parameter of every step at once, tree ensembles soft at ``temperature``; every ``eval_every`` steps
the validation metric is recorded, and the best checkpoint wins, where *step 0 is the original pipeline*
(hard trees: exactly what was imported), which wins ties. So fine-tuning never returns a pipeline that
is worse on validation than the one it started from.

Classification minimises the cross-entropy of the pipeline's probabilities output (clamped at 1e-12) and
scores validation accuracy; regression minimises and scores the mean squared error.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from modelsql.errors import DataError

__all__ = ["FinetuneResult", "finetune", "evaluate"]


@dataclass
class FinetuneResult:
    """What fine-tuning chose.

    Attributes:
        state: the chosen ``state_dict`` (the original's when it won).
        temperature: the chosen candidate's tree temperature (0 for the original).
        chosen: ``"finetuned"`` or ``"original"``.
        best_step: the step of the chosen checkpoint (0: the original).
        val_before, val_after: the validation metric of the original and of the chosen candidate
            (accuracy, or mean squared error for regression).
        history: ``(step, train loss, validation metric)`` per evaluation.
    """

    state: dict
    temperature: float
    chosen: str
    best_step: int
    val_before: float
    val_after: float
    history: list = field(default_factory=list)


def _outputs(net, x, task: str):
    """(what the loss reads, the label or prediction output) of the pipeline network."""
    outs = net(x)
    if task == "classification":
        probs = next(o for o in outs if o.is_floating_point() and o.ndim == 2)
        label = next(o for o in outs if not o.is_floating_point())
        return probs, label
    pred = next(o for o in outs if o.is_floating_point())
    return pred.reshape(len(x), -1)[:, 0], None


def _loss(net, x, y, task: str):
    head, _ = _outputs(net, x, task)
    if task == "classification":
        return torch.nn.functional.nll_loss(torch.log(head.clamp_min(1e-12)), y)
    return torch.nn.functional.mse_loss(head, y)


def evaluate(net, x, y, task: str, labels=None) -> float:
    """Accuracy (``labels``: the true label values) or mean squared error of the network on (x, y)."""
    with torch.no_grad():
        head, label = _outputs(net, x, task)
        if task == "classification":
            return float((label.cpu().numpy() == np.asarray(labels)).mean())
        return float(torch.mean((head - y) ** 2))


def _better(a: float, b: float, task: str) -> bool:
    return a > b if task == "classification" else a < b


def finetune(net, x, y, x_val, y_val, *, task: str, labels_val=None, steps: int = 300, temperature: float = 0.1,
             lr: float = 3e-3, seed: int = 0, eval_every: int = 10,
             progress: Optional[Callable[[int, float], None]] = None) -> FinetuneResult:
    """Fine-tune ``net`` (a calibrated :class:`~modelsql.finetune.translate.PipelineNet`, hard) in place and
    return the chosen candidate (``net`` is left holding it).

    Args:
        x, x_val: float32 (N, F) / (M, F) tensors; y, y_val: class indices into the probabilities' columns
            (int64) or targets (float32); all on the device ``net`` is on (the CPU or a GPU).
        labels_val: the validation rows' label values (classification), compared with the label output.
        progress: called as ``progress(steps done, training loss)`` after each step, or None.

    Raises:
        DataError: ``training_diverged`` (a NaN or infinite loss, naming the step).
    """
    torch.manual_seed(seed)
    net.set_temperature(0.0)
    before = evaluate(net, x_val, y_val, task, labels_val)
    best = (before, 0, copy.deepcopy(net.state_dict()), 0.0)
    history = [(0, float(_loss(net, x, y, task).detach()), before)]
    net.set_temperature(temperature)
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        loss = _loss(net, x, y, task)
        value = loss.item()
        if not math.isfinite(value):
            raise DataError(f"FINETUNE: the loss became {value} at step {step}; lower lr", code="training_diverged")
        loss.backward()
        optimizer.step()
        if progress is not None:
            progress(step, value)
        if step % eval_every == 0 or step == steps:
            metric = evaluate(net, x_val, y_val, task, labels_val)
            history.append((step, float(loss.detach()), metric))
            if _better(metric, best[0], task):
                best = (metric, step, copy.deepcopy(net.state_dict()), temperature)
    net.load_state_dict(best[2])
    net.set_temperature(best[3])
    return FinetuneResult(best[2], best[3], "finetuned" if best[1] else "original", best[1], before, best[0], history)
