"""modelsql.datasets.architectures: every architecture exports to ONNX and runs in ONNX Runtime
with torch's outputs (within 1e-4 of the output scale), at batch 2 and, through the symbolic batch
axis, at batches 1 and 3. ResNet-50 and ResNeXt-50 are built at width 16 to keep this fast."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from modelsql.datasets import architectures as A  # noqa: E402

RTOL = 1e-4


def _session(blob: bytes) -> "ort.InferenceSession":
    return ort.InferenceSession(blob, providers=["CPUExecutionProvider"])


def _check(name: str, exporter: str, seed: int = 5, **kwargs) -> None:
    module = A.randomize(A.ARCHITECTURES[name](**kwargs), seed)
    blob = A.export_onnx(module, A.example_input(name, 2, **kwargs), exporter=exporter)
    sess = _session(blob)
    assert [i.name for i in sess.get_inputs()] == ["input"]
    assert [o.name for o in sess.get_outputs()] == ["output"]
    for batch in (2, 1, 3):
        x = A.example_input(name, batch, seed=batch, **kwargs)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        got = sess.run(None, {"input": x})[0]
        assert got.shape == want.shape
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= RTOL, f"{name} ({exporter}) at batch {batch}: relative error {err:.2e}"


@pytest.mark.parametrize("name, kwargs", [
    ("mlp", {}),
    ("bert", {}),
    ("resnet18", {}),
    ("resnet50", {"width": 16}),
    ("resnext50", {"width": 16}),
])
def test_legacy_export_matches_torch(name: str, kwargs: dict) -> None:
    _check(name, "legacy", **kwargs)


@pytest.mark.parametrize("name, kwargs", [("mlp", {}), ("resnet18", {"width": 16})])
def test_dynamo_export_matches_torch(name: str, kwargs: dict) -> None:
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    _check(name, "dynamo", **kwargs)


def test_fixed_batch_export() -> None:
    blob = A.export_onnx(A.randomize(A.mlp(), 0), A.example_input("mlp", 2), dynamic_batch=False)
    assert _session(blob).get_inputs()[0].shape == [2, 32]


def test_family_members_differ_and_follow_randomize() -> None:
    blobs = A.family("mlp", 2, seed=7, sizes=(8, 16, 3))
    assert blobs[0] != blobs[1]
    x = A.example_input("mlp", 4, sizes=(8, 16, 3))
    for i, blob in enumerate(blobs):
        with torch.no_grad():
            want = A.randomize(A.mlp((8, 16, 3)), 7 + i)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(_session(blob).run(None, {"input": x})[0], want, rtol=RTOL, atol=1e-5)


def test_randomize_is_seeded_and_draws_batchnorm_statistics() -> None:
    net = A.resnet18(width=8).train()
    first = {k: v.clone() for k, v in A.randomize(net, 1).state_dict().items()}
    assert not net.training
    again = A.randomize(net, 1).state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)
    other = A.randomize(net, 2).state_dict()
    assert not torch.equal(first["bn1.running_mean"], other["bn1.running_mean"])
    assert all((v > 0).all() for k, v in other.items() if k.endswith("running_var"))


def test_example_inputs() -> None:
    ids = A.example_input("bert", 3, seq=8, vocab=50)
    assert ids.dtype == np.int64 and ids.shape == (3, 8) and 0 <= ids.min() and ids.max() < 50
    img = A.example_input("resnext50", 1, image_size=40)
    assert img.dtype == np.float32 and img.shape == (1, 3, 40, 40)
    with pytest.raises(ValueError, match="unknown architecture"):
        A.example_input("vgg")
