"""Standard neural-network architectures with random weights, for tests and benchmarks of model merging.

NetFuse-style merging combines many copies of one architecture that differ only in their weights
(fine-tuned copies of a shared model). The tests and benchmarks of that merging need such families
of real architectures exported to ONNX, without downloading any weights; this module builds them
from plain ``torch.nn`` layers (torchvision is not imported: its wheels need CUDA):

* :func:`resnet18`, :func:`resnet50`: ResNet (He et al., CVPR 2016), as torchvision defines it
  (7x7 stem, max pool, four stages of basic or bottleneck blocks, stride on the 3x3 conv,
  1x1 projection shortcuts, global average pool, linear head);
* :func:`resnext50_32x4d`: ResNeXt (Xie et al., CVPR 2017), torchvision's ResNet-50 with grouped
  3x3 convolutions (32 groups of width 4 at ``width=64``);
* :func:`bert_encoder`: a BERT encoder (Devlin et al., NAACL 2019) with a pooler and a classifier;
* :func:`mlp`: a Linear+ReLU stack.

``width`` scales the channel counts (torchvision's networks are ``width=64``). Weights are never
trained: :func:`randomize` re-draws every parameter and BatchNorm statistic from a seeded generator,
so the members of a :func:`family` differ as fine-tuned copies do, while keeping activations at a
sane scale through 50 layers. :func:`export_onnx` exports through torch's TorchScript-based
("legacy") or ``torch.export``-based ("dynamo", needs onnxscript) exporter.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import math
import warnings
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

__all__ = [
    "ARCHITECTURES",
    "bert_encoder",
    "example_input",
    "export_onnx",
    "family",
    "mlp",
    "randomize",
    "resnet18",
    "resnet50",
    "resnext50_32x4d",
]

# ---------------------------------------------------------------- ResNet / ResNeXt


class _BasicBlock(nn.Module):
    """Two 3x3 convs (ResNet-18/34); ``[B, cin, H, W] -> [B, planes, H/stride, W/stride]``.
    ``groups`` and ``inner`` are accepted for a common block signature and must stay 1 and 0."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, groups: int = 1, inner: int = 0) -> None:
        super().__init__()
        if groups != 1 or inner not in (0, planes):
            raise ValueError("a basic block has no grouped or widened convolution")
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(cin, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class _Bottleneck(nn.Module):
    """1x1 -> 3x3 (stride, ``groups``) -> 1x1 convs (ResNet-50, ResNeXt);
    ``[B, cin, H, W] -> [B, 4 * planes, H/stride, W/stride]``, ``inner`` channels inside."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, groups: int = 1, inner: int = 0) -> None:
        super().__init__()
        inner = inner or planes
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, inner, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(inner)
        self.conv2 = nn.Conv2d(inner, inner, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(inner)
        self.conv3 = nn.Conv2d(inner, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module | None:
    """torchvision's projection shortcut (1x1 conv + BN) where the shape changes, else None."""
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class _ResNet(nn.Module):
    """torchvision's ResNet: ``float32 [B, 3, H, W] -> float32 [B, num_classes]`` logits."""

    # the stages, set with setattr in __init__
    layer1: nn.Module
    layer2: nn.Module
    layer3: nn.Module
    layer4: nn.Module

    def __init__(self, block: type[_BasicBlock] | type[_Bottleneck], depths: tuple[int, ...], num_classes: int,
                 width: int, groups: Callable[[int], tuple[int, int]] | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = width
        for i, depth in enumerate(depths):
            planes = width * 2**i
            g, inner = groups(planes) if groups else (1, planes)
            blocks = []
            for j in range(depth):
                blocks.append(block(cin, planes, 2 if i and not j else 1, g, inner))
                cin = planes * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 10, width: int = 64) -> nn.Module:
    """ResNet-18 (basic blocks, depths 2-2-2-2); ``float32 [B, 3, H, W] -> float32 [B, num_classes]``.

    ``width`` is the stem's channel count (64 in torchvision); stage ``i`` has ``width * 2**i``.
    """
    return _ResNet(_BasicBlock, (2, 2, 2, 2), num_classes, width)


def resnet50(num_classes: int = 10, width: int = 64) -> nn.Module:
    """ResNet-50 (bottleneck blocks, depths 3-4-6-3, expansion 4);
    ``float32 [B, 3, H, W] -> float32 [B, num_classes]``. ``width``: as :func:`resnet18`."""
    return _ResNet(_Bottleneck, (3, 4, 6, 3), num_classes, width)


def _resnext_groups(planes: int) -> tuple[int, int]:
    """(groups, inner channels) of a ResNeXt-50 32x4d stage of ``planes`` planes.

    torchvision's inner width is ``int(planes * 4 / 64) * 32`` = ``2 * planes``. That is kept at
    every ``width`` (so ``width_per_group = 4 * width / 64`` at the first stage), and the group
    count is ``gcd(32, 2 * planes)``: 32 whenever the inner width divides by 32 (every ``width``
    that is a multiple of 16), fewer groups of the same width otherwise.
    """
    inner = 2 * planes
    return math.gcd(32, inner), inner


def resnext50_32x4d(num_classes: int = 10, width: int = 64) -> nn.Module:
    """ResNeXt-50 32x4d: ResNet-50 with grouped 3x3 convs; ``float32 [B, 3, H, W] -> float32 [B, num_classes]``.

    At ``width=64`` exactly torchvision's (32 groups of 4 channels in the first stage, 128 inner
    channels, doubling per stage). A smaller ``width`` scales ``width_per_group`` by ``width / 64``
    and keeps 32 groups while the inner width (``2 * planes``) divides by 32, i.e. for ``width``
    a multiple of 16 (``width=16``: 32 groups of 1 channel in the first stage); otherwise it
    uses ``gcd(32, 2 * planes)`` groups.
    """
    return _ResNet(_Bottleneck, (3, 4, 6, 3), num_classes, width, groups=_resnext_groups)


# ---------------------------------------------------------------- BERT


class _SelfAttention(nn.Module):
    """Multi-head self-attention: ``float32 [B, S, dim] -> [B, S, dim]``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.heads, self.head_dim = heads, dim // heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, S, dim] -> [B, heads, S, head_dim]``."""
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        ctx = scores.softmax(dim=-1) @ v  # [B, heads, S, head_dim]
        b, _, s, _ = ctx.shape
        return self.out(ctx.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class _EncoderLayer(nn.Module):
    """Post-LN transformer layer (BERT): attention and GELU feed-forward, each residual + LayerNorm."""

    def __init__(self, dim: int, heads: int, ff: int) -> None:
        super().__init__()
        self.attention = _SelfAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim, eps=1e-12)
        self.ff = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim))
        self.norm2 = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ff(x))


class _Bert(nn.Module):
    """BERT encoder + pooler + classifier: ``int64 [B, seq] -> float32 [B, num_classes]``."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, ff: int, seq: int, num_classes: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(seq, dim)
        self.register_buffer("position_ids", torch.arange(seq), persistent=False)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.Sequential(*(_EncoderLayer(dim, heads, ff) for _ in range(layers)))
        self.pooler = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.tokens(ids) + self.positions(self.position_ids))  # [B, seq, dim]
        x = self.layers(x)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def bert_encoder(vocab: int = 1000, dim: int = 64, layers: int = 2, heads: int = 4, ff: int = 128,
                 seq: int = 16, num_classes: int = 4) -> nn.Module:
    """A BERT encoder with a pooler and a classification head.

    Input: ``int64 [B, seq]`` token ids in ``[0, vocab)`` (exactly ``seq`` of them: the learned
    position embedding has ``seq`` rows, looked up through a buffer ``arange(seq)``). Token +
    position embedding, LayerNorm, ``layers`` post-LN layers (``heads``-head self-attention with
    ``nn.Linear`` q/k/v/out, ``softmax(q k^T / sqrt(dim / heads)) v``; GELU feed-forward of width
    ``ff``), then the first token -> Linear -> tanh -> Linear. Output: ``float32 [B, num_classes]``.
    """
    return _Bert(vocab, dim, layers, heads, ff, seq, num_classes)


# ---------------------------------------------------------------- MLP


def mlp(sizes: tuple[int, ...] = (32, 64, 64, 4)) -> nn.Module:
    """Linear layers ``sizes[i] -> sizes[i+1]`` with ReLU between them (none after the last);
    ``float32 [B, sizes[0]] -> float32 [B, sizes[-1]]``."""
    if len(sizes) < 2:
        raise ValueError(f"mlp needs at least two sizes, got {sizes}")
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- weights


_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_NORMS = _BATCH_NORMS + (nn.LayerNorm, nn.GroupNorm)


@torch.no_grad()
def randomize(module: nn.Module, seed: int) -> nn.Module:
    """Re-draw every parameter and BatchNorm running statistic of ``module`` (in place) from a
    ``torch.Generator`` seeded with ``seed``; returns ``module`` in eval mode.

    Weights of 2 or more dimensions (convs, linears, embeddings) are ``N(0, 2 / fan_in)``
    (He init, ``fan_in = weight[0].numel()``), other biases ``N(0, 0.1^2)``; norm scales are
    ``N(1, 0.1^2)`` and shifts ``N(0, 0.1^2)``; BatchNorm's ``running_mean`` is ``N(0, 0.1^2)`` and
    ``running_var`` uniform in ``[0.5, 1.5)`` (positive). The same seed gives the same weights.
    """
    g = torch.Generator().manual_seed(seed)
    for sub in module.modules():
        for name, p in sub.named_parameters(recurse=False):
            p.copy_(_draw(p, g, isinstance(sub, _NORMS) and name == "weight"))
        if isinstance(sub, _BATCH_NORMS) and sub.running_mean is not None and sub.running_var is not None:
            sub.running_mean.copy_(0.1 * _randn(sub.running_mean, g))
            sub.running_var.copy_(0.5 + torch.rand(sub.running_var.shape, generator=g))
    return module.eval()


def _randn(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    return torch.randn(t.shape, generator=g, dtype=t.dtype)


def _draw(p: torch.Tensor, g: torch.Generator, norm_scale: bool) -> torch.Tensor:
    """New values for parameter ``p`` (see :func:`randomize`)."""
    if norm_scale:
        return 1.0 + 0.1 * _randn(p, g)
    if p.dim() >= 2:
        return _randn(p, g) * math.sqrt(2.0 / p[0].numel())
    return 0.1 * _randn(p, g)


# ---------------------------------------------------------------- inputs and export


ARCHITECTURES: dict[str, Callable[..., nn.Module]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "resnext50": resnext50_32x4d,
    "bert": bert_encoder,
    "mlp": mlp,
}
"""Name -> builder. Every builder can be called with no arguments (the defaults above) or with
its keyword arguments (``width``, ``num_classes``, ``vocab``, ``sizes`` ...)."""


def _builder(name: str) -> Callable[..., nn.Module]:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; expected one of {sorted(ARCHITECTURES)}") from None


def example_input(name: str, batch: int = 2, *, image_size: int = 32, seq: int = 16, seed: int = 0,
                  **builder_kwargs: object) -> np.ndarray:
    """A random input for architecture ``name`` with ``batch`` rows, from ``np.random.default_rng(seed)``.

    CNNs: ``float32 [batch, 3, image_size, image_size]``, standard normal. ``"bert"``: ``int64
    [batch, seq]`` token ids in ``[0, vocab)``. ``"mlp"``: ``float32 [batch, sizes[0]]``. ``vocab``
    and ``sizes`` are the builder's defaults unless given in ``builder_kwargs`` (the keyword
    arguments the model was built with; they are checked against the builder's signature).
    """
    params = inspect.signature(_builder(name)).bind(**builder_kwargs)
    params.apply_defaults()
    args = params.arguments
    rng = np.random.default_rng(seed)
    if name == "bert":
        return rng.integers(0, args["vocab"], size=(batch, seq), dtype=np.int64)
    if name == "mlp":
        return rng.standard_normal((batch, args["sizes"][0]), dtype=np.float32)
    return rng.standard_normal((batch, 3, image_size, image_size), dtype=np.float32)


_EXPORT_LOGGERS = ("torch.onnx", "torch.export", "torch._export", "torch.fx", "onnxscript", "onnx_ir")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Swallow the exporters' warnings, their progress prints on stdout/stderr and their log
    records below ERROR (e.g. the dynamo exporter's "torchvision is not installed")."""
    loggers = [logging.getLogger(n) for n in _EXPORT_LOGGERS]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def export_onnx(module: nn.Module, example: np.ndarray, *, exporter: str = "legacy", dynamic_batch: bool = True,
                opset: int | None = None, input_name: str = "input", output_name: str = "output") -> bytes:
    """Export ``module`` (in eval mode; its mode is restored) to a serialized ONNX ModelProto.

    ``example`` (the batch on dimension 0) is traced with ``exporter``: ``"legacy"``, the
    TorchScript-based ``torch.onnx.export(dynamo=False)`` with constant folding, opset 17 by
    default; or ``"dynamo"``, the ``torch.export``-based exporter (needs onnxscript), with its
    optimizer, opset 18 by default. The model has one input ``input_name`` and one output
    ``output_name``; with ``dynamic_batch`` their dimension 0 is symbolic, otherwise fixed to
    ``example``'s batch. All weights are inline (no external data file). Exporter warnings and
    progress output are silenced.
    """
    if exporter not in ("legacy", "dynamo"):
        raise ValueError(f"exporter must be 'legacy' or 'dynamo', not {exporter!r}")
    args = (torch.from_numpy(np.ascontiguousarray(example)),)
    names = dict(input_names=[input_name], output_names=[output_name])
    was_training = module.training
    module.eval()
    try:
        with _quiet():
            if exporter == "legacy":
                return _export_legacy(module, args, dynamic_batch, 17 if opset is None else opset, names)
            return _export_dynamo(module, args, dynamic_batch, 18 if opset is None else opset, names)
    finally:
        module.train(was_training)


def _export_legacy(module: nn.Module, args: tuple, dynamic_batch: bool, opset: int, names: dict) -> bytes:
    axes = {n: {0: "batch"} for n in names["input_names"] + names["output_names"]} if dynamic_batch else None
    buf = io.BytesIO()
    # torch annotates f as a path, but the TorchScript exporter writes to a file-like object too
    torch.onnx.export(module, args, buf, dynamo=False, export_params=True,  # type: ignore[arg-type]
                      opset_version=opset, do_constant_folding=True, dynamic_axes=axes, **names)
    return buf.getvalue()


def _export_dynamo(module: nn.Module, args: tuple, dynamic_batch: bool, opset: int, names: dict) -> bytes:
    shapes = ({0: torch.export.Dim("batch")},) if dynamic_batch else None
    program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, dynamic_shapes=shapes,
                                external_data=False, optimize=True, report=False, verbose=False, **names)
    assert program is not None, "torch.onnx.export(dynamo=True) returns its ONNXProgram"
    return program.model_proto.SerializeToString()


def family(name: str, n: int, *, exporter: str = "legacy", dynamic_batch: bool = True, seed: int = 0,
           **kwargs: Any) -> list[bytes]:
    """``n`` ONNX exports of architecture ``name``, member ``i`` with weights ``randomize(module, seed + i)``.

    ``kwargs`` go to the builder (``width``, ``num_classes``, ``vocab``, ``seq``, ``sizes`` ...);
    ``image_size`` (CNNs, default 32) only shapes the traced example, and ``seq`` (BERT) both.
    The traced example is ``example_input(name, 2, seed=seed, ...)``.
    """
    image_size = int(kwargs.pop("image_size", 32))
    example = example_input(name, 2, image_size=image_size, seed=seed, **kwargs)
    module = _builder(name)(**kwargs)
    return [export_onnx(randomize(module, seed + i), example, exporter=exporter, dynamic_batch=dynamic_batch)
            for i in range(n)]
