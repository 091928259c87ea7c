"""The cost model's model zoo: varied ONNX models built in code (random or quickly fitted weights, nothing
downloaded), to profile and to train and test the learned cost model on (Mantis, Chun et al. 2010:
run time predicted from program features, learned over many programs).

Families (the ``family`` label, used to hold whole kinds of model out of training):

* ``mlp``: Linear+ReLU stacks of several widths and depths
  (:func:`modelsql.datasets.architectures.mlp`);
* ``cnn``: small CNNs on 8x8 digits (:func:`modelsql.zoo.cnn`, :func:`modelsql.zoo.resnet`) and on
  3x32x32 images (plain, strided, depthwise-separable);
* ``resnet``: ResNet-18 (plain torch, :func:`modelsql.datasets.architectures.resnet18`) at 64 and
  224 pixels, and a narrow ResNeXt-50 (grouped convolutions);
* ``transformer``: BERT encoders (:func:`modelsql.datasets.architectures.bert_encoder`) and
  ``torch.nn.TransformerEncoder``;
* ``sklearn``: scikit-learn pipelines fitted on its shipped data sets (digits, breast cancer,
  diabetes) and converted by :func:`modelsql.converters.sklearn.from_sklearn`: linear models, a
  decision tree, a random forest, gradient boosting, an MLP classifier;
* ``merged``: NetFuse merges (:func:`modelsql.netfuse.merge_models`, ``shared_input=True``,
  so the merged graph keeps one ``[B, ...]`` input) of N = 2 and 8 copies of an MLP and a CNN.

Every model has a dynamic batch (its first input dimension) and the batch sizes it is profiled at
(fewer and smaller for the heavy ones, so one profile of the whole zoo at threads {1, 2} and 15
repeats takes a few minutes on two cores). This module imports torch, scikit-learn and skl2onnx (the
``torch`` and ``sklearn`` extras).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

__all__ = ["ZooModel", "FAMILIES", "build_zoo", "tiny_zoo"]

FAMILIES = ("mlp", "cnn", "resnet", "transformer", "sklearn", "merged")
"""The ``family`` labels of :class:`ZooModel`."""

LIGHT = (1, 2, 4, 8, 16, 32, 64, 128)
MEDIUM = (1, 2, 4, 8, 16, 32)
HEAVY = (1, 2, 4, 8)


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo.

    Attributes:
        name: unique, e.g. ``"mlp_256x2"``.
        onnx_bytes: the serialized ONNX model (dynamic first input dimension = the batch).
        family: one of :data:`FAMILIES`.
        kind: what it is, in words (e.g. ``"RandomForestClassifier(50 trees, depth 10)"``).
        batch_sizes: the batch sizes (rows per run) the benchmark profiles it at.
        merge_factor: members computed by one run (N of a NetFuse merge; 1 otherwise).
    """

    name: str
    onnx_bytes: bytes
    family: str
    kind: str
    batch_sizes: tuple[int, ...]
    merge_factor: int = 1

    @property
    def model(self) -> onnx.ModelProto:
        """The parsed ONNX model."""
        return onnx.load_from_string(self.onnx_bytes)


def _torch(module, example: np.ndarray, seed: int) -> bytes:
    from modelsql.datasets.architectures import export_onnx, randomize

    return export_onnx(randomize(module, seed), example)


def _rows(width: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, width), dtype=np.float32)


def _images(channels: int, side: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, channels, side, side), dtype=np.float32)


def _mlp(sizes: tuple[int, ...], seed: int = 0) -> bytes:
    from modelsql.datasets.architectures import mlp

    return _torch(mlp(sizes), _rows(sizes[0]), seed)


def _conv32(channels: tuple[int, ...], depthwise: bool = False):
    """Conv(3x3, stride 2)-BN-ReLU stages over 3x32x32 images, global average pool, Linear(-> 10);
    ``depthwise``: each stage a depthwise 3x3 then a pointwise 1x1 (MobileNet's separable block)."""
    from torch import nn

    layers, cin = [], 3
    for i, c in enumerate(channels):
        stride = 1 if i == 0 else 2
        if depthwise and i:
            layers += [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU(),
                       nn.Conv2d(cin, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
        else:
            layers += [nn.Conv2d(cin, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
        cin = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))


def _torch_encoder(dim: int, layers: int, heads: int, ff: int):
    """``torch.nn.TransformerEncoder`` over float32 ``[B, 16, dim]``, mean-pooled, Linear(dim -> 4)."""
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(dim, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x).mean(dim=1))

    return Encoder()


def _sequences(dim: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 16, dim), dtype=np.float32)


def _bert(seed: int = 0, **kwargs) -> bytes:
    from modelsql.datasets.architectures import bert_encoder, example_input

    return _torch(bert_encoder(**kwargs), example_input("bert", 2, **kwargs), seed)


def _sklearn(make: Callable, data: str) -> bytes:
    from sklearn import datasets

    from modelsql.converters.sklearn import from_sklearn

    x, y = getattr(datasets, f"load_{data}")(return_X_y=True)
    model, _ = from_sklearn(make().fit(x.astype(np.float32), y))
    return model.SerializeToString()


def _merged(member: Callable[[int], bytes], n: int) -> bytes:
    from modelsql.netfuse import merge_models

    members = [onnx.load_from_string(member(seed)) for seed in range(n)]
    return merge_models(members, shared_input=True).SerializeToString()


def _entries() -> list[tuple[str, str, str, tuple[int, ...], int, Callable[[], bytes]]]:
    """(name, family, kind, batch sizes, merge factor, builder) of every zoo model, in a fixed order."""
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier

    from modelsql import zoo
    from modelsql.datasets.architectures import resnet18, resnet50, resnext50_32x4d

    digits = np.random.default_rng(0).standard_normal((2, 64), dtype=np.float32)
    mlp_small = (64, 64, 64, 10)
    cnn_small = (16, 32, 64)
    return [
        ("mlp_16x1", "mlp", "MLP 16-32-2", LIGHT, 1, lambda: _mlp((16, 32, 2))),
        ("mlp_64x2", "mlp", "MLP 64-64-64-10", LIGHT, 1, lambda: _mlp(mlp_small)),
        ("mlp_256x2", "mlp", "MLP 128-256-256-10", LIGHT, 1, lambda: _mlp((128, 256, 256, 10))),
        ("mlp_512x4", "mlp", "MLP 256-512x4-10", LIGHT, 1, lambda: _mlp((256, 512, 512, 512, 512, 10))),
        ("mlp_wide", "mlp", "MLP 784-2048-10", LIGHT, 1, lambda: _mlp((784, 2048, 10))),
        ("mlp_deep", "mlp", "MLP 32-64x10-4", LIGHT, 1, lambda: _mlp((32, *(64,) * 10, 4))),
        ("mlp_1024x3", "mlp", "MLP 512-1024x3-16", MEDIUM, 1, lambda: _mlp((512, 1024, 1024, 1024, 16))),
        ("mlp_2048x2", "mlp", "MLP 1024-2048-2048-10", MEDIUM, 1, lambda: _mlp((1024, 2048, 2048, 10))),
        ("cnn_digits", "cnn", "modelsql.zoo.cnn(channels=16)", LIGHT, 1,
         lambda: _torch(zoo.cnn(64, 10, channels=16), digits, 0)),
        ("cnn_digits_wide", "cnn", "modelsql.zoo.cnn(channels=64, hidden=256)", MEDIUM, 1,
         lambda: _torch(zoo.cnn(64, 10, channels=64, hidden=256), digits, 0)),
        ("resnet_digits", "cnn", "modelsql.zoo.resnet(width=16, blocks=2)", LIGHT, 1,
         lambda: _torch(zoo.resnet(64, 10, width=16, blocks=2), digits, 0)),
        ("cnn32", "cnn", "CNN 3x32x32, 16-32-64 channels", MEDIUM, 1,
         lambda: _torch(_conv32(cnn_small), _images(3, 32), 0)),
        ("cnn32_wide", "cnn", "CNN 3x32x32, 64-128-256 channels", HEAVY, 1,
         lambda: _torch(_conv32((64, 128, 256)), _images(3, 32), 0)),
        ("mobile32", "cnn", "separable CNN 3x32x32, 32-64-128-256", MEDIUM, 1,
         lambda: _torch(_conv32((32, 64, 128, 256), depthwise=True), _images(3, 32), 0)),
        ("resnet18_64px", "resnet", "ResNet-18 at 3x64x64", MEDIUM, 1,
         lambda: _torch(resnet18(), _images(3, 64), 0)),
        ("resnet18_224px", "resnet", "ResNet-18 at 3x224x224", (1, 2), 1,
         lambda: _torch(resnet18(), _images(3, 224), 0)),
        ("resnet50_w16", "resnet", "ResNet-50, width 16, 3x64x64", HEAVY, 1,
         lambda: _torch(resnet50(width=16), _images(3, 64), 0)),
        ("resnext50_w16", "resnet", "ResNeXt-50 32x4d, width 16, 3x64x64", HEAVY, 1,
         lambda: _torch(resnext50_32x4d(width=16), _images(3, 64), 0)),
        ("bert_small", "transformer", "BERT dim 64, 2 layers, seq 16", LIGHT, 1, lambda: _bert()),
        ("bert_base4", "transformer", "BERT dim 128, 4 layers, ff 512, seq 32", MEDIUM, 1,
         lambda: _bert(dim=128, layers=4, heads=4, ff=512, seq=32)),
        ("bert_seq64", "transformer", "BERT dim 64, 2 layers, seq 64", MEDIUM, 1, lambda: _bert(seq=64)),
        ("torch_encoder", "transformer", "nn.TransformerEncoder dim 64, 2 layers, seq 16", LIGHT, 1,
         lambda: _torch(_torch_encoder(64, 2, 4, 256), _sequences(64), 0)),
        ("sk_logreg", "sklearn", "StandardScaler + LogisticRegression (digits)", LIGHT, 1,
         lambda: _sklearn(lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)), "digits")),
        ("sk_pca_logreg", "sklearn", "StandardScaler + PCA(20) + LogisticRegression (digits)", LIGHT, 1,
         lambda: _sklearn(lambda: make_pipeline(StandardScaler(), PCA(20), LogisticRegression(max_iter=300)),
                          "digits")),
        ("sk_ridge", "sklearn", "StandardScaler + Ridge (diabetes)", LIGHT, 1,
         lambda: _sklearn(lambda: make_pipeline(StandardScaler(), Ridge()), "diabetes")),
        ("sk_tree", "sklearn", "DecisionTreeClassifier(depth 12) (digits)", LIGHT, 1,
         lambda: _sklearn(lambda: DecisionTreeClassifier(max_depth=12, random_state=0), "digits")),
        ("sk_forest", "sklearn", "RandomForestClassifier(50 trees, depth 10) (digits)", LIGHT, 1,
         lambda: _sklearn(lambda: RandomForestClassifier(50, max_depth=10, random_state=0), "digits")),
        ("sk_forest_big", "sklearn", "RandomForestClassifier(200 trees, depth 14) (digits)", LIGHT, 1,
         lambda: _sklearn(lambda: RandomForestClassifier(200, max_depth=14, random_state=0), "digits")),
        ("sk_gboost_digits", "sklearn", "GradientBoostingClassifier(30 x 10 trees, depth 3) (digits)", LIGHT, 1,
         lambda: _sklearn(lambda: GradientBoostingClassifier(n_estimators=30, random_state=0), "digits")),
        ("sk_gboost", "sklearn", "GradientBoostingClassifier(100 trees, depth 3) (breast cancer)", LIGHT, 1,
         lambda: _sklearn(lambda: GradientBoostingClassifier(random_state=0), "breast_cancer")),
        ("sk_mlp", "sklearn", "StandardScaler + MLPClassifier(100) (digits)", LIGHT, 1,
         lambda: _sklearn(lambda: make_pipeline(StandardScaler(), MLPClassifier((100,), max_iter=50,
                                                                                 random_state=0)), "digits")),
        ("merged_mlp_n2", "merged", "NetFuse merge of 2 MLPs 64-64-64-10", LIGHT, 2,
         lambda: _merged(lambda s: _mlp(mlp_small, s), 2)),
        ("merged_mlp_n4", "merged", "NetFuse merge of 4 MLPs 128-256-256-10", LIGHT, 4,
         lambda: _merged(lambda s: _mlp((128, 256, 256, 10), s), 4)),
        ("merged_mlp_n8", "merged", "NetFuse merge of 8 MLPs 64-64-64-10", LIGHT, 8,
         lambda: _merged(lambda s: _mlp(mlp_small, s), 8)),
        ("merged_cnn_n2", "merged", "NetFuse merge of 2 CNNs 3x32x32, 16-32-64", MEDIUM, 2,
         lambda: _merged(lambda s: _torch(_conv32(cnn_small), _images(3, 32), s), 2)),
        ("merged_cnn_n8", "merged", "NetFuse merge of 8 CNNs 3x32x32, 16-32-64", HEAVY, 8,
         lambda: _merged(lambda s: _torch(_conv32(cnn_small), _images(3, 32), s), 8)),
    ]


def build_zoo(names: tuple[str, ...] | None = None) -> list[ZooModel]:
    """The zoo's models (all, or those named, in the zoo's order), built now (about half a minute for all:
    torch exports and scikit-learn fits).

    Raises:
        ValueError: a name that is not in the zoo.
    """
    entries = _entries()
    known = [e[0] for e in entries]
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise ValueError(f"no zoo models named {unknown}; the zoo has {known}")
    return [ZooModel(name, build(), family, kind, batches, n)
            for name, family, kind, batches, n, build in entries if names is None or name in names]


def tiny_zoo() -> list[ZooModel]:
    """A handful of the zoo's cheapest models (MLPs, a digits CNN, two scikit-learn pipelines, a merge),
    for tests: each runs in well under a millisecond at batch 16."""
    return build_zoo(("mlp_16x1", "mlp_64x2", "mlp_256x2", "mlp_deep", "cnn_digits", "sk_logreg", "sk_tree",
                      "merged_mlp_n2"))
