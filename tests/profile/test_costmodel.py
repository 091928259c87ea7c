"""The learned cost model (modelsql.costmodel): features of real zoo models, a fit on a small profiled set,
exact JSON and ONNX round trips, monotonicity in batch, the evaluation functions on known arrays, and bad
input. Fast: a handful of tiny models, five timed runs per configuration."""

from __future__ import annotations

import ast
import json
import math
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from modelsql.costmodel import (FEATURE_DOCS, FEATURES, Config, CostModel, group_folds, matrix, median_relative_error,
                                model_features, noise_ceiling, random_splits, row, within)
from modelsql.costmodel.mantis import lasso, nnls
from modelsql.errors import DataError, ProgrammingError
from modelsql.operators.backends.profiling import profile_latency

BATCHES = (1, 4, 16, 64)


@pytest.fixture(scope="module")
def zoo():
    from modelsql.costmodel.zoo import tiny_zoo

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {z.name: z for z in tiny_zoo()}


@pytest.fixture(scope="module")
def profiled(zoo):
    """(rows, median latencies in ms, model names) of every tiny model at BATCHES x threads {1, 2}."""
    rows, ms, names = [], [], []
    for z in zoo.values():
        static = {b: model_features(z.model, b) for b in BATCHES}
        for trace in profile_latency(z.onnx_bytes, batch_sizes=list(BATCHES), threads=[1, 2], repeat=5, warmup=1):
            config = Config(batch_size=trace.batch_size, threads=trace.threads, merge_factor=z.merge_factor)
            rows.append(row(static[trace.batch_size], config))
            ms.append(trace.median * 1e3)
            names.append(z.name)
    return rows, np.array(ms), names


@pytest.fixture(scope="module")
def fitted(profiled):
    rows, ms, _ = profiled
    return CostModel().fit(rows, ms)


def _rows_for(z, batches, threads=1):
    return [row(model_features(z.model, b), Config(batch_size=b, threads=threads, merge_factor=z.merge_factor))
            for b in batches]


# ---------------------------------------------------------------- features


def test_features_are_documented_physical_quantities_in_a_fixed_order():
    assert tuple(FEATURE_DOCS) == FEATURES and len(set(FEATURES)) == len(FEATURES)
    assert FEATURES[:3] == ("batch_size", "threads", "merge_factor")


def test_model_features_see_trees_linear_models_and_folded_merge_weights(zoo):
    tree = model_features(zoo["sk_tree"].model, 8)
    assert tree["tree_visits"] > 8 and tree["tree_outputs"] > 0  # 8 rows, at least one comparison each
    assert model_features(zoo["sk_tree"].model, 16)["tree_visits"] == pytest.approx(2 * tree["tree_visits"])
    assert model_features(zoo["sk_logreg"].model, 4)["ml_flops"] > 0
    merged = model_features(zoo["merged_mlp_n2"].model, 4)
    assert merged["constant_nodes"] > 0  # the weight concatenations ONNX Runtime folds at load
    assert merged["nodes"] > sum(merged[f"{c}_kernels"] for c in ("conv", "dense", "elementwise", "normalization",
                                                                    "reduction", "data", "other"))
    one, two = model_features(zoo["mlp_64x2"].model, 1), model_features(zoo["mlp_64x2"].model, 2)
    assert one["gemv_bytes"] == one["gemm_bytes"] > 0 and two["gemv_bytes"] == 0


def test_row_checks_its_inputs(zoo):
    static = model_features(zoo["mlp_16x1"].model, 4)
    r = row(static, Config(batch_size=4, threads=2))
    assert list(r) == list(FEATURES) and r["threads"] == 2 and r["on_onnxruntime_cpu"] == 1 and r["on_tvm_cpu"] == 0
    with pytest.raises(ProgrammingError, match="batch size 4"):
        row(static, Config(batch_size=8))
    with pytest.raises(DataError, match="nodes"):
        row({**static, "nodes": -1.0}, Config(batch_size=4))
    with pytest.raises(DataError, match="finite"):
        row({**static, "gemm_flops": math.nan}, Config(batch_size=4))


@pytest.mark.parametrize("kwargs, word", [({"backend": "tensorrt"}, "backend"), ({"device": "tpu"}, "device"),
                                          ({"threads": 0}, "threads"), ({"batch_size": 0}, "batch_size"),
                                          ({"merge_factor": 1.5}, "merge_factor")])
def test_config_rejects_unknown_backends_and_bad_counts(kwargs, word):
    with pytest.raises(ProgrammingError, match=word) as info:
        Config(**{"batch_size": 1, **kwargs})
    assert info.value.code == "invalid_option"


# ---------------------------------------------------------------- the model on real measurements


def test_fit_on_profiled_tiny_models_predicts_positive_sensible_latencies(profiled, fitted):
    rows, ms, _ = profiled
    predicted = fitted.predict(rows)
    assert predicted.shape == (len(rows),) and predicted.dtype == np.float64
    assert (predicted > 0).all() and np.isfinite(predicted).all()
    assert median_relative_error(predicted, ms) < 0.5  # a loose bound: five runs per point on a shared machine
    names = [n for n, _ in fitted.terms()]
    assert names and all(n.startswith("onnxruntime_cpu:") for n in names)
    assert all(c > 0 for _, c in fitted.terms())


def test_predictions_grow_with_the_batch_for_an_mlp(zoo, fitted):
    z = zoo["mlp_256x2"]
    for threads in (1, 2):
        p = fitted.predict(_rows_for(z, (1, 2, 4, 8, 16, 32, 64, 128, 256), threads))
        assert (p > 0).all()
        # from two rows on, every work term grows with the batch (one row is a GEMV: a term of its own)
        assert (np.diff(p[1:]) >= 0).all(), p


def test_json_round_trip_is_exact(profiled, fitted):
    rows, _, _ = profiled
    text = fitted.to_json()
    again = CostModel.from_json(text)
    assert again.to_json() == text
    assert np.array_equal(again.predict(rows), fitted.predict(rows))
    assert again.terms() == fitted.terms()


def test_onnx_export_equals_predict_in_onnxruntime(profiled, fitted):
    rows, _, _ = profiled
    model = fitted.to_onnx()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, inp.shape[1]) == ("features", "tensor(float)", len(FEATURES))
    assert out.name == "latency_ms"
    got = session.run(None, {"features": matrix(rows).astype(np.float32)})[0]
    want = fitted.predict(rows)
    assert got.shape == (len(rows),)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["features"]) == list(FEATURES) and meta["unit"] == "ms"


def test_onnx_export_of_the_correction_equals_predict(profiled):
    rows, ms, _ = profiled
    model = CostModel(correction=True).fit(rows, ms)
    session = ort.InferenceSession(model.to_onnx().SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"features": matrix(rows).astype(np.float32)})[0]
    np.testing.assert_allclose(got, model.predict(rows), rtol=1e-4)
    assert CostModel.from_json(model.to_json()).terms() == model.terms()


def test_onnx_export_gives_nan_for_an_untrained_backend(zoo, fitted):
    tvm = row(model_features(zoo["mlp_16x1"].model, 1), Config(batch_size=1, backend="tvm"))
    session = ort.InferenceSession(fitted.to_onnx().SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.isnan(session.run(None, {"features": matrix([tvm]).astype(np.float32)})[0]).all()
    with pytest.raises(ProgrammingError, match="trained only on") as info:
        fitted.predict([tvm])
    assert info.value.code == "target_not_trained"


def test_a_known_physical_law_is_recovered_from_ten_percent_of_the_points(profiled):
    rows, _, names = profiled
    x = matrix(rows)
    col = {n: i for i, n in enumerate(FEATURES)}
    flops = x[:, col["gemm_flops"]] + x[:, col["conv_flops"]] + x[:, col["matmul_flops"]]
    kernels = x[:, [i for n, i in col.items() if n.endswith("_kernels")]].sum(axis=1)
    truth = 0.006 + 0.0008 * kernels + 1e-8 * flops / x[:, col["threads"]] + 2e-6 * x[:, col["tree_visits"]]
    train, test = random_splits(len(rows), 0.5, 1, seed=3)[0]
    model = CostModel().fit([rows[i] for i in train], truth[train])
    assert within(model.predict([rows[i] for i in test]), truth[test], 0.02) > 0.95
    # and with the backend as a categorical: a TVM copy of the same law, twice as slow
    tvm_rows = [{**r, "on_onnxruntime_cpu": 0.0, "on_tvm_cpu": 1.0} for r in rows]
    both = CostModel().fit(rows + tvm_rows, np.concatenate([truth, 2 * truth]))
    assert both.targets == ("onnxruntime_cpu", "tvm_cpu")
    assert within(both.predict(tvm_rows), 2 * truth, 0.05) > 0.9


# ---------------------------------------------------------------- evaluation


def test_within_and_median_relative_error_on_known_arrays():
    measured = np.array([1.0, 2.0, 4.0, 10.0])
    predicted = np.array([1.05, 2.5, 3.7, 10.0])  # errors 5%, 25%, 7.5%, 0%
    assert within(predicted, measured) == 0.75
    assert within(predicted, measured, tol=0.30) == 1.0
    assert within([1.1], [1.0]) == 1.0  # exactly 10% counts as within
    assert median_relative_error(predicted, measured) == pytest.approx(0.0625)


def test_noise_ceiling_is_the_agreement_of_two_passes():
    first = np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    second = np.array([1.02, 0.95, 1.3, 0.8, 1.0])
    assert noise_ceiling(first, second) == 0.6
    assert noise_ceiling(first, second, tol=0.5) == 1.0


def test_random_splits_train_on_the_share_and_test_the_rest():
    splits = random_splits(100, 0.10, 5, seed=1)
    assert len(splits) == 5
    for train, test in splits:
        assert len(train) == 10 and len(test) == 90 and not set(train) & set(test)
    assert not np.array_equal(splits[0][0], splits[1][0])
    assert np.array_equal(random_splits(100, 0.1, 1, seed=7)[0][0], random_splits(100, 0.1, 1, seed=7)[0][0])


def test_group_folds_never_test_a_model_seen_in_training():
    groups = [g for g in "abcdefghij" for _ in range(3)]
    folds = group_folds(groups, 5, seed=0)
    assert len(folds) == 5
    tested = np.concatenate([t for _, t in folds])
    assert sorted(tested) == list(range(len(groups)))
    for train, test in folds:
        assert not {groups[i] for i in train} & {groups[i] for i in test}


def test_solvers_on_small_known_problems():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(nnls(a, np.array([1.0, -1.0, 0.0])), [0.5, 0.0], atol=1e-9)  # x2 = 0 binds
    x = np.random.default_rng(0).standard_normal((50, 4))
    y = 3 * x[:, 0] + 0.5
    w, c = lasso(x, y, 0.01)
    assert w[0] == pytest.approx(2.99, abs=0.02) and (w[1:] == 0).all() and c == pytest.approx(0.5, abs=0.02)


# ---------------------------------------------------------------- bad input


def test_bad_training_input_raises_clear_errors(profiled):
    rows, ms, _ = profiled
    with pytest.raises(ProgrammingError, match="empty training set") as info:
        CostModel().fit([], [])
    assert info.value.code == "empty_training_set"
    with pytest.raises(DataError, match="finite and positive") as info:
        CostModel().fit(rows[:3], [1.0, math.nan, 2.0])
    assert info.value.code == "invalid_latency"
    with pytest.raises(DataError, match="finite and positive"):
        CostModel().fit(rows[:2], [1.0, 0.0])
    with pytest.raises(ProgrammingError, match="3 feature rows but 2"):
        CostModel().fit(rows[:3], [1.0, 2.0])
    with pytest.raises(DataError, match="weights"):
        CostModel().fit(rows[:2], [1.0, 2.0], weights=[1.0, -1.0])
    with pytest.raises(ProgrammingError, match="lacks"):
        CostModel().fit([{"batch_size": 1.0}], [1.0])


def test_an_unfitted_model_and_bad_json_raise():
    with pytest.raises(ProgrammingError, match="not fitted") as info:
        CostModel().predict([])
    assert info.value.code == "not_fitted"
    with pytest.raises(ProgrammingError, match="not fitted"):
        CostModel().to_onnx()
    for text in ("{", "[]", json.dumps({"format": "other"}), json.dumps({"format": "modelsql.costmodel.mantis/1",
                                                                          "features": ["x"]})):
        with pytest.raises(DataError) as info:
            CostModel.from_json(text)
        assert info.value.code == "invalid_cost_model"


def test_the_package_is_a_lower_layer():
    root = Path(__file__).resolve().parents[2] / "modelsql" / "costmodel"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert not (node.module or "").startswith(("planner", "catalog", "sql")), path.name
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.startswith(("modelsql.engine", "modelsql.catalog", "modelsql.sql")) for n in names), path
