"""Small torch models as ONNX for the TVM tests (tests/profile/test_tvm_backend.py,
tests/profile/test_tvm_tune.py, tests/profile/test_compile.py, tests/client/test_progress.py;
benchmarks/gpu/tvm_cuda_probe.py builds the same two)."""

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


def cnn() -> bytes:
    """A seeded CNN on ``[N, 1, 8, 8]`` images: conv 3x3 (4 channels), batch norm with non-trivial statistics,
    ReLU, max-pool 2, linear to 3."""
    import torch

    torch.manual_seed(1)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    return export(net, torch.randn(2, 1, 8, 8))
