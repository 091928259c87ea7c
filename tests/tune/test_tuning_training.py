"""One TUNE stage (modelsql.tuning.training) on real training: scikit-learn's digits, small
torch models from modelsql.zoo. A trial reached through shared stages (checkpoint, restore in a
fresh process, continue, possibly with another schedule) must be bit for bit the trial trained
from scratch in one stage (Hippo's stage trees rely on it)."""

from __future__ import annotations

import importlib
import io
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from modelsql.errors import OperationalError, ProgrammingError  # noqa: E402
from modelsql.tuning.training import (  # noqa: E402
    StageSpec,
    TrainData,
    TrainingDiverged,
    load_trained,
    train_stage,
)
from modelsql.tuning.factories import factory_digest, resolve_factory  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MLP = "modelsql.zoo:mlp"
MLP_PARAMS = (("dropout", 0.1), ("hidden", 32))


@pytest.fixture(scope="module")
def digits() -> TrainData:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    return TrainData(x[:600], y[:600], x[600:800], y[600:800], "classification", 10)


def spec(epochs, first_epoch=0, factory=MLP, params=MLP_PARAMS, threads=1) -> StageSpec:
    return StageSpec(factory, params, tuple(tuple(sorted(e.items())) for e in epochs), first_epoch, 7, threads)


def hexed(metrics) -> list[dict[str, str]]:
    return [{k: float(v).hex() for k, v in m.items()} for m in metrics]


def weights(checkpoint: bytes) -> dict:
    return torch.load(io.BytesIO(checkpoint), weights_only=True)["model"]


def assert_same_weights(a: bytes, b: bytes) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


# ------------------------------------------------------------------ exactness


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from modelsql.tuning.training import StageSpec, TrainData, train_stage
    folder = sys.argv[1]
    arrays = np.load(folder + "/data.npz")
    data = TrainData(arrays["x"], arrays["y"], arrays["x_val"], arrays["y_val"], "classification", 10)
    job = json.load(open(folder + "/spec.json"))
    spec = StageSpec(job["factory"], tuple(map(tuple, job["params"])),
                     tuple(tuple(map(tuple, e)) for e in job["epochs"]), job["first_epoch"], job["seed"], job["threads"])
    result = train_stage(spec, data, open(folder + "/parent.pt", "rb").read())
    open(folder + "/child.pt", "wb").write(result.checkpoint)
    json.dump([{k: float(v).hex() for k, v in m.items()} for m in result.metrics], open(folder + "/metrics.json", "w"))
""")


def test_resume_in_a_fresh_process_is_bit_exact(digits, tmp_path) -> None:
    epochs = [{"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4}] * 6
    whole = train_stage(spec(epochs), digits, None)
    first = train_stage(spec(epochs[:3]), digits, None)
    second = spec(epochs[3:], first_epoch=3)
    np.savez(tmp_path / "data.npz", x=digits.x, y=digits.y, x_val=digits.x_val, y_val=digits.y_val)
    (tmp_path / "parent.pt").write_bytes(first.checkpoint)
    (tmp_path / "spec.json").write_text(json.dumps({
        "factory": second.factory, "params": second.factory_params, "epochs": second.epochs,
        "first_epoch": second.first_epoch, "seed": second.seed, "threads": second.threads}))
    subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], check=True, cwd=ROOT, timeout=120)
    child_metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert hexed(first.metrics) + child_metrics == hexed(whole.metrics)
    assert_same_weights((tmp_path / "child.pt").read_bytes(), whole.checkpoint)
    # and the model did learn something
    assert whole.metrics[-1]["val_accuracy"] > 0.8


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_resume_is_bit_exact_for_every_optimizer(digits, optimizer) -> None:
    epochs = [{"lr": 0.01 if optimizer == "sgd" else 0.002, "optimizer": optimizer, "weight_decay": 1e-3}] * 4
    whole = train_stage(spec(epochs), digits, None)
    first = train_stage(spec(epochs[:2]), digits, None)
    second = train_stage(spec(epochs[2:], first_epoch=2), digits, first.checkpoint)
    assert hexed(first.metrics + second.metrics) == hexed(whole.metrics)
    assert_same_weights(second.checkpoint, whole.checkpoint)
    assert torch.load(io.BytesIO(whole.checkpoint), weights_only=True)["epoch"] == 4


def test_a_branch_with_another_lr_is_the_spliced_schedule_from_scratch(digits) -> None:
    a = [{"lr": 0.1}] * 3
    parent = train_stage(spec(a), digits, None)
    branch = train_stage(spec([{"lr": 0.01}] * 2, first_epoch=3), digits, parent.checkpoint)
    scratch = train_stage(spec([{"lr": 0.1}] * 3 + [{"lr": 0.01}] * 2), digits, None)
    assert hexed(parent.metrics + branch.metrics) == hexed(scratch.metrics)
    assert_same_weights(branch.checkpoint, scratch.checkpoint)
    # the branch really trained with lr 0.01: continuing at 0.1 gives other floats
    same_lr = train_stage(spec([{"lr": 0.1}] * 2, first_epoch=3), digits, parent.checkpoint)
    assert hexed(same_lr.metrics) != hexed(branch.metrics)


def test_a_branch_with_another_batch_size_is_the_spliced_schedule_from_scratch(digits) -> None:
    parent = train_stage(spec([{"lr": 0.05, "batch_size": 32}] * 2), digits, None)
    branch = train_stage(spec([{"lr": 0.05, "batch_size": 100, "momentum": 0.5}] * 2, first_epoch=2),
                         digits, parent.checkpoint)
    scratch = train_stage(spec([{"lr": 0.05, "batch_size": 32}] * 2
                               + [{"lr": 0.05, "batch_size": 100, "momentum": 0.5}] * 2), digits, None)
    assert hexed(parent.metrics + branch.metrics) == hexed(scratch.metrics)
    assert_same_weights(branch.checkpoint, scratch.checkpoint)


def test_a_stage_leaves_the_callers_rng_and_threads_alone(digits) -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    threads = torch.get_num_threads()
    expected = (random.random(), np.random.random(), torch.rand(1).item())
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    train_stage(spec([{"lr": 0.1}], threads=max(1, threads - 1) if threads > 1 else 2), digits, None)
    assert (random.random(), np.random.random(), torch.rand(1).item()) == expected
    assert torch.get_num_threads() == threads


def test_regression_reports_no_accuracy(digits) -> None:
    data = TrainData(digits.x, digits.y.astype(np.float32), digits.x_val, digits.y_val.astype(np.float32),
                     "regression", 1)
    result = train_stage(spec([{"lr": 0.01}] * 2), data, None)
    assert [sorted(m) for m in result.metrics] == [["train_loss", "val_loss"]] * 2
    assert result.metrics[1]["val_loss"] < result.metrics[0]["val_loss"] < 30


def test_load_trained_gives_the_checkpoints_model_in_eval_mode(digits) -> None:
    result = train_stage(spec([{"lr": 0.1}] * 3), digits, None)
    model = load_trained(MLP, dict(MLP_PARAMS), result.checkpoint, (64, 10))
    assert not model.training
    with torch.no_grad():
        predicted = model(torch.from_numpy(digits.x_val)).argmax(dim=1).numpy()
    assert (predicted == digits.y_val).mean() == result.metrics[-1]["val_accuracy"]


# ------------------------------------------------------------------ zoo


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the TorchScript exporter (dynamo=False)
@pytest.mark.parametrize("factory, params", [("modelsql.zoo:cnn", (("channels", 8),)),
                                             ("modelsql.zoo:resnet", (("blocks", 1), ("width", 8)))])
def test_image_factories_train_and_export_to_onnx(digits, tmp_path, factory, params) -> None:
    ort = pytest.importorskip("onnxruntime")
    result = train_stage(spec([{"lr": 0.05}], factory=factory, params=params), digits, None)
    assert result.metrics[0]["val_accuracy"] > 0.1
    model = load_trained(factory, params, result.checkpoint, (64, 10))
    path = tmp_path / "m.onnx"
    torch.onnx.export(model, (torch.zeros(2, 64),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    x = digits.x_val[:37]
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == (37, 10)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_image_factories_need_64_features() -> None:
    zoo = importlib.import_module("modelsql.zoo")
    for fn in (zoo.cnn, zoo.resnet):
        with pytest.raises(ValueError, match="in_features"):
            fn(in_features=10, n_outputs=3)


# ------------------------------------------------------------------ errors


def test_unknown_hyperparameter(digits) -> None:
    with pytest.raises(ProgrammingError, match="lr_decay") as e:
        train_stage(spec([{"lr": 0.1, "lr_decay": 0.5}]), digits, None)
    assert e.value.code == "unknown_hyperparameter"


@pytest.mark.parametrize("ref", ["nope", "modelsql.zoo:missing", "no.such.module:f", "modelsql.zoo:__doc__"])
def test_bad_factory_refs(ref) -> None:
    with pytest.raises(ProgrammingError, match=ref.replace(".", r"\.")) as e:
        resolve_factory(ref)
    assert e.value.code == "factory_not_found"


def test_a_nan_loss_names_the_epoch(digits) -> None:
    parent = train_stage(spec([{"lr": 0.1}] * 2), digits, None)
    with pytest.raises(TrainingDiverged, match="epoch 2") as e:
        train_stage(spec([{"lr": 1e30}], first_epoch=2), digits, parent.checkpoint)
    assert e.value.code == "training_diverged" and e.value.epoch == 2


def test_checkpoint_epoch_mismatch(digits) -> None:
    parent = train_stage(spec([{"lr": 0.1}] * 2), digits, None)
    for first_epoch in (1, 3):
        with pytest.raises(ProgrammingError, match="epoch 2") as e:
            train_stage(spec([{"lr": 0.1}], first_epoch=first_epoch), digits, parent.checkpoint)
        assert e.value.code == "checkpoint_mismatch"
    with pytest.raises(ProgrammingError) as e:
        train_stage(spec([{"lr": 0.1}], first_epoch=2), digits, None)
    assert e.value.code == "checkpoint_mismatch"


def test_threads_mismatch(digits) -> None:
    parent = train_stage(spec([{"lr": 0.1}], threads=1), digits, None)
    with pytest.raises(OperationalError, match="threads") as e:
        train_stage(spec([{"lr": 0.1}], first_epoch=1, threads=2), digits, parent.checkpoint)
    assert e.value.code == "threads_mismatch"


def test_the_optimizer_is_not_schedulable(digits) -> None:
    parent = train_stage(spec([{"lr": 0.1}]), digits, None)
    with pytest.raises(ProgrammingError, match="adam") as e:
        train_stage(spec([{"lr": 0.1, "optimizer": "adam"}], first_epoch=1), digits, parent.checkpoint)
    assert e.value.code == "hyperparameter_not_schedulable"
    with pytest.raises(ProgrammingError) as e:
        train_stage(spec([{"optimizer": "sgd"}, {"optimizer": "adamw"}]), digits, None)
    assert e.value.code == "hyperparameter_not_schedulable"


def test_bad_factory_params(digits) -> None:
    with pytest.raises(ProgrammingError) as e:
        train_stage(spec([{"lr": 0.1}], params=(("hiddn", 3),)), digits, None)
    assert e.value.code == "invalid_factory_params"


# ------------------------------------------------------------------ digests


def test_factory_digest_follows_the_source(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    source = tmp_path / "tuning_digest_factory.py"
    source.write_text("def build(in_features, n_outputs):\n    return None\n")
    before = factory_digest("tuning_digest_factory:build")
    assert before == factory_digest("tuning_digest_factory:build")
    source.write_text("def build(in_features, n_outputs):\n    return 1\n")
    importlib.reload(importlib.import_module("tuning_digest_factory"))
    after = factory_digest("tuning_digest_factory:build")
    assert len(after) == 64 and after != before
    assert factory_digest(MLP) != after
    monkeypatch.delitem(sys.modules, "tuning_digest_factory")
