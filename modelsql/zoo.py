"""Trainable model factories shipped with modelsql, for ``TUNE`` studies.

Every factory is called as ``factory(in_features=F, n_outputs=K, **params)`` and returns a
``torch.nn.Module`` mapping a float32 tensor of shape (N, F) to a float32 tensor of shape
(N, K): logits for classification, K = 1 for regression. Building a model draws its initial
weights from torch's global RNG, which ``modelsql.tuning.training`` seeds with the study seed.

``cnn`` and ``resnet`` read each row as an 8x8 single-channel image (scikit-learn's digits),
so they need F = 64; ``cifar_resnet`` reads each row as a 3x32x32 image (F = 3072, channels first, as
CIFAR-10's); all of them export to ONNX with ``torch.onnx.export(..., dynamo=False)`` and a dynamic batch
axis, and train on a GPU under ``torch.use_deterministic_algorithms`` (every operator they use has a
deterministic CUDA kernel; ``AdaptiveAvgPool2d(1)`` is computed by torch as a mean).

This module imports torch (the ``torch`` extra); nothing else in modelsql imports it at
import time.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["mlp", "cnn", "resnet", "cifar_resnet"]


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _dropout(value: float) -> float:
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {value!r}")
    return float(value)


def _image_side(in_features: int, factory: str) -> None:
    if in_features != 64:
        raise ValueError(f"{factory} reads 8x8 images: in_features must be 64, got in_features={in_features!r}")


def mlp(in_features: int, n_outputs: int, hidden: int = 64, layers: int = 2, dropout: float = 0.0) -> nn.Module:
    """A multi-layer perceptron: ``layers`` times Linear-ReLU(-Dropout), then Linear.

    Args:
        in_features: F, the width of the float32 input (N, F).
        n_outputs: K, the width of the float32 output (N, K).
        hidden: width of every hidden layer.
        layers: number of hidden layers (0 gives a single Linear(F, K)).
        dropout: dropout probability after each hidden ReLU (0 adds no Dropout module).
    Raises:
        ValueError: a width or count that is not a positive integer, dropout outside [0, 1).
    """
    _positive("in_features", in_features)
    _positive("n_outputs", n_outputs)
    _positive("hidden", hidden)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
        raise ValueError(f"layers must be a non-negative integer, got {layers!r}")
    p = _dropout(dropout)
    modules: list[nn.Module] = []
    width = in_features
    for _ in range(layers):
        modules += [nn.Linear(width, hidden), nn.ReLU()]
        if p > 0:
            modules.append(nn.Dropout(p))
        width = hidden
    modules.append(nn.Linear(width, n_outputs))
    return nn.Sequential(*modules)


class _Image8x8(nn.Module):
    """Reshapes (N, 64) rows to (N, 1, 8, 8) images before ``body``."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.reshape(-1, 1, 8, 8))


def cnn(in_features: int, n_outputs: int, channels: int = 16, hidden: int = 64, dropout: float = 0.2) -> nn.Module:
    """A small CNN for 8x8 single-channel images given as (N, 64) float32 rows.

    Conv(1->channels, 3x3, pad 1)-ReLU-Conv(channels->2*channels, 3x3, pad 1)-ReLU-MaxPool(2)
    -Flatten-Linear(2*channels*16 -> hidden)-ReLU-Dropout-Linear(hidden -> n_outputs).

    Args:
        in_features: must be 64 (one 8x8 image per row).
        n_outputs: K, the width of the float32 output (N, K).
        channels: channels of the first convolution (the second has twice as many).
        hidden: width of the fully connected hidden layer.
        dropout: dropout probability before the last Linear.
    Raises:
        ValueError: in_features is not 64, or a bad width or dropout.
    """
    _image_side(in_features, "cnn")
    _positive("n_outputs", n_outputs)
    _positive("channels", channels)
    _positive("hidden", hidden)
    body = nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(2 * channels * 16, hidden), nn.ReLU(), nn.Dropout(_dropout(dropout)),
        nn.Linear(hidden, n_outputs),
    )
    return _Image8x8(body)


class _BasicBlock(nn.Module):
    """ResNet basic block at constant width: conv-BN-ReLU-conv-BN, plus the input, then ReLU."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + x)


def resnet(in_features: int, n_outputs: int, width: int = 16, blocks: int = 2) -> nn.Module:
    """A small residual CNN for 8x8 single-channel images given as (N, 64) float32 rows.

    Stem Conv(1->width, 3x3, pad 1)-BatchNorm-ReLU, ``blocks`` basic blocks (two 3x3
    convolutions with BatchNorm and an identity shortcut), global average pooling,
    Linear(width -> n_outputs). BatchNorm uses batch statistics in train mode and its running
    statistics in eval mode (and in the ONNX export).

    Args:
        in_features: must be 64 (one 8x8 image per row).
        n_outputs: K, the width of the float32 output (N, K).
        width: channels of every convolution.
        blocks: number of basic blocks (0 keeps only the stem).
    Raises:
        ValueError: in_features is not 64, or a bad width or block count.
    """
    _image_side(in_features, "resnet")
    _positive("n_outputs", n_outputs)
    _positive("width", width)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 0:
        raise ValueError(f"blocks must be a non-negative integer, got {blocks!r}")
    body = nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        *[_BasicBlock(width) for _ in range(blocks)],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(width, n_outputs),
    )
    return _Image8x8(body)


class _Image3x32x32(nn.Module):
    """Reshapes (N, 3072) rows to (N, 3, 32, 32) images before ``body``."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.reshape(-1, 3, 32, 32))


def _down(width_in: int, width_out: int) -> nn.Module:
    """Halve the side: Conv(3x3, stride 2, pad 1)-BatchNorm-ReLU."""
    return nn.Sequential(nn.Conv2d(width_in, width_out, 3, stride=2, padding=1, bias=False),
                         nn.BatchNorm2d(width_out), nn.ReLU())


def cifar_resnet(in_features: int, n_outputs: int, width: int = 16, blocks: int = 1, stages: int = 3) -> nn.Module:
    """A small residual CNN for 3x32x32 images given as (N, 3072) float32 rows (channels first).

    Stem Conv(3->width, 3x3, pad 1)-BatchNorm-ReLU; then ``stages`` stages, each ``blocks`` basic blocks at
    constant width, every stage after the first starting with a stride-2 convolution that halves the side and
    doubles the width (32x32, 16x16, 8x8 for 3 stages); global average pooling; Linear(-> n_outputs).

    Args:
        in_features: must be 3072 (one 3x32x32 image per row).
        n_outputs: K, the width of the float32 output (N, K).
        width: channels of the first stage.
        blocks: basic blocks per stage (0 keeps only the stem and the downsampling convolutions).
        stages: 1 to 4.
    Raises:
        ValueError: in_features is not 3072, or a bad width, block or stage count.
    """
    if in_features != 3 * 32 * 32:
        raise ValueError(f"cifar_resnet reads 3x32x32 images: in_features must be 3072, got {in_features!r}")
    _positive("n_outputs", n_outputs)
    _positive("width", width)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 0:
        raise ValueError(f"blocks must be a non-negative integer, got {blocks!r}")
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= 4:
        raise ValueError(f"stages must be an integer in [1, 4], got {stages!r}")
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    w = width
    for stage in range(stages):
        if stage:
            layers.append(_down(w, 2 * w))
            w *= 2
        layers += [_BasicBlock(w) for _ in range(blocks)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, n_outputs)]
    return _Image3x32x32(nn.Sequential(*layers))
