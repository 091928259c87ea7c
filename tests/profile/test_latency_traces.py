"""Latency traces of real ONNX Runtime sessions (the measurements PROFILE will record): one trace per
(threads, batch size), every timed run kept, inputs made to the model's own input types and shapes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.operators.backends.profiling import LatencyTrace, profile_latency, synthetic_feeds

from conftest import linear_model


def test_one_trace_per_configuration_with_every_run():
    model = linear_model(np.ones((8, 3), np.float32), np.zeros(3, np.float32)).SerializeToString()
    traces = profile_latency(model, batch_sizes=[1, 16], threads=[1, 2], repeat=5)
    assert [(t.threads, t.batch_size) for t in traces] == [(1, 1), (1, 16), (2, 1), (2, 16)]
    for t in traces:
        assert t.backend == "onnxruntime" and len(t.seconds) == 5 and all(s > 0 for s in t.seconds)
        assert min(t.seconds) <= t.quantile(0.5) <= t.quantile(0.99) == max(t.seconds)
        assert t.rows_per_second == pytest.approx(t.batch_size / t.median)


def test_synthetic_feeds_follow_the_inputs():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", "S"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    z = helper.make_tensor_value_info("z", TensorProto.INT64, ["N", "S"])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["ids"], ["z"])],
                              "g", [x, ids], [y, z])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = synthetic_feeds(session, 3, dims={"S": 7})
    assert feeds["x"].shape == (3, 4) and feeds["x"].dtype == np.float32
    assert feeds["ids"].shape == (3, 7) and feeds["ids"].dtype == np.int64 and not feeds["ids"].any()
    with pytest.raises(NotSupportedError) as ei:
        synthetic_feeds(session, 3)
    assert ei.value.code == "symbolic_dimension" and "'ids'" in str(ei.value)
    fixed = linear_model(np.ones((2, 2), np.float32), batch=1).SerializeToString()
    fixed_session = ort.InferenceSession(fixed, providers=["CPUExecutionProvider"])
    assert synthetic_feeds(fixed_session, 1)["x"].shape == (1, 2)
    with pytest.raises(NotSupportedError) as ei:
        synthetic_feeds(fixed_session, 4)
    assert ei.value.code == "fixed_batch"


@pytest.mark.parametrize("kwargs", [dict(batch_sizes=[], threads=[1], repeat=1),
                                    dict(batch_sizes=[0], threads=[1], repeat=1),
                                    dict(batch_sizes=[1], threads=[1], repeat=0)])
def test_bad_configurations_are_refused(kwargs):
    model = linear_model(np.ones((2, 2), np.float32), np.zeros(2, np.float32)).SerializeToString()
    with pytest.raises(ProgrammingError) as ei:
        profile_latency(model, **kwargs)
    assert ei.value.code == "invalid_option"


def test_quantiles_are_nearest_rank():
    t = LatencyTrace("onnxruntime", 1, 4, (0.4, 0.1, 0.3, 0.2))
    assert (t.quantile(0), t.quantile(1), t.median) == (0.1, 0.4, 0.25)
