"""Cost-model features of real ONNX graphs (built with onnx.helper, and the onnx package's own backend test
models): per-class FLOPs and bytes at a batch size, parameters and input bytes."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import onnx.backend.test
import pytest

from modelsql.analyses.cost_features import cost_features, feature_names
from modelsql.analyses.static_features import graph_flops

from conftest import linear_model


def test_a_dense_layer_counts_its_product_bytes_and_parameters():
    f, k = 8, 3
    model = linear_model(np.ones((f, k), np.float32), np.zeros(k, np.float32))
    for batch in (1, 16):
        x = cost_features(model, batch)
        assert list(x) == feature_names()
        assert x["batch_size"] == batch and x["params"] == f * k + k and x["param_bytes"] == 4 * (f * k + k)
        assert x["input_bytes"] == 4 * batch * f
        products = x["gemm_flops"] + x["matmul_flops"]
        assert products == 2 * batch * f * k
        assert x["unknown_nodes"] == 0
    assert cost_features(model, 1)["gemm_bytes"] + cost_features(model, 1)["matmul_bytes"] > 0


MODELS = sorted(glob.glob(os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "*", "*", "model.onnx")))


@pytest.mark.skipif(not MODELS, reason="the onnx package ships no backend test models here")
def test_onnx_backend_models_at_batch_one_agree_with_graph_flops():
    checked = 0
    for path in MODELS:
        model = onnx.load(path)
        x = cost_features(model, 1)
        total = sum(x[f"{c}_flops"] for c in ("conv", "gemm", "matmul", "elementwise", "normalization",
                                                "reduction", "data", "other"))
        assert total == pytest.approx(graph_flops(model)), path
        assert x["nodes"] == len(model.graph.node) and all(v >= 0 for v in x.values())
        checked += 1
    assert checked >= 100
