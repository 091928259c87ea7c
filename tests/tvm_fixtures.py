"""Small torch models as ONNX for the TVM tests (tests/test_tvm_backend.py, tests/test_tvm_tune.py)."""

from __future__ import annotations

import io
import warnings


def export(module, example) -> bytes:
    """``module`` as ONNX (legacy exporter, opset 17) with a dynamic batch ``N`` on input ``x`` and output ``y``."""
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), example, buf, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return buf.getvalue()


def mlp() -> bytes:
    """A seeded MLP 16-32-4."""
    import torch

    torch.manual_seed(0)
    return export(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)),
                  torch.randn(2, 16))
