"""Tuning with MetaSchedule (modelsql/operators/backends/tvm_tune.py): the tuned library is right,
and a second call with the same work folder resumes from its JSON database instead of re-measuring.

One small case runs in CI (a 16-32-4 MLP at batch 8, 8 trials: ~20 s on 2 cores, most of it
MetaSchedule's search and the runner worker). The others carry the marker ``tvm_full`` (registered
in pyproject.toml) and are skipped unless selected::

    pytest tests/profile/test_tvm_tune.py -m tvm_full
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from modelsql.operators.backends import tvm as tvm_backend
from modelsql.operators.backends import tvm_tune

_REASON = tvm_tune.unavailable_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"TVM tuning is unavailable: {_REASON}")

torch = pytest.importorskip("torch")

from modelsql.operators.backends.tvm_check import check_against_onnxruntime  # noqa: E402


from tvm_fixtures import export as _export, mlp as _mlp  # noqa: E402


@pytest.fixture
def full_selected(request):
    """Skip unless the run selected the longer tuning tests (``-m tvm_full``)."""
    if "tvm_full" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the longer TVM tuning tests run only with -m tvm_full")


def _tune(model: bytes, work_dir, trials: int, batch_size: int = 8):
    """(library bytes, progress calls, seconds)."""
    calls = []
    start = time.perf_counter()
    library = tvm_tune.tune(model, target=tvm_backend.cpu_target(2), batch_size=batch_size, trials=trials,
                            work_dir=str(work_dir), progress=lambda done, total: calls.append((done, total)), seed=0)
    return library, calls, time.perf_counter() - start


def _checked(model: bytes, library: bytes, batch_size: int):
    tvm_model = tvm_backend.load_library(library, tvm_backend.Signature.from_onnx(model, batch_size), "tuned model")
    assert tvm_model.fixed_batch == batch_size
    result = check_against_onnxruntime(model, tvm_model)
    assert result.ok, result.reason
    assert result.batches == (batch_size,)
    return tvm_model


def test_tune_gives_a_correct_library_and_resumes(tmp_path) -> None:
    model = _mlp()
    library, calls, first = _tune(model, tmp_path, trials=8)
    _checked(model, library, 8)
    records = tvm_tune.records_in(str(tmp_path))
    assert records >= 2  # two tasks (the two fused MatMul+Add[+ReLU]), each measured
    assert calls[0] == (0, 8) and calls[-1] == (8, 8) and len(calls) >= 3  # start, one per measured batch

    again, calls, second = _tune(model, tmp_path, trials=8)
    assert tvm_tune.records_in(str(tmp_path)) == records  # nothing re-measured
    assert calls == [(8, 8)]
    assert second < first  # (resuming only builds: well under half the time on a machine of its own)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_array_equal(_checked(model, again, 8).run({"x": x})[0], _checked(model, library, 8).run({"x": x})[0])


@pytest.mark.tvm_full
def test_more_trials_measure_only_the_missing_ones(tmp_path, full_selected) -> None:
    model = _mlp()
    _tune(model, tmp_path, trials=8)
    before = tvm_tune.records_in(str(tmp_path))
    library, calls, _ = _tune(model, tmp_path, trials=16)
    assert calls[0] == (8, 16) and calls[-1] == (16, 16)
    assert before < tvm_tune.records_in(str(tmp_path)) <= before + 8
    _checked(model, library, 8)


@pytest.mark.tvm_full
def test_a_tuned_cnn_is_correct(tmp_path, full_selected) -> None:
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    model = _export(net, torch.randn(2, 1, 8, 8))
    library, calls, _ = _tune(model, tmp_path, trials=16, batch_size=4)
    assert calls[-1][0] == calls[-1][1]
    _checked(model, library, 4)
