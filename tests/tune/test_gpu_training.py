"""Training on a device (issue 24): the ``device`` option of TUNE, FINETUNE and ``CREATE MODEL ... FROM PYTHON``.

Everywhere: the option is parsed and checked before anything trains or is stored (``invalid_option``;
``device_not_available`` for a GPU that is absent or hidden by ``MODELSQL_DEVICES=cpu``, the catalog
unchanged), a CPU study's stage-tree key is what it was before devices existed, and the zoo's networks
compute on the CPU exactly what they did.

With a GPU (``-m gpu``; skipped with a reason where CUDA is absent): a TUNE on ``cuda`` gives every trial
the same per-epoch metrics, bit for bit, as stage tree and trial-based (dropout, BatchNorm and convolutions
included), its checkpoints load on the CPU (``CREATE MODEL ... FROM STUDY``), an operator without a
deterministic CUDA kernel fails its trial with ``nondeterministic_operator``, FINETUNE trains on the GPU,
and a Python program's PREDICT on ``cuda`` equals the CPU's within :data:`PROGRAM_TOLERANCE`.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import modelsql  # noqa: E402
from modelsql.errors import NotSupportedError, ProgrammingError  # noqa: E402
from modelsql.operators.backends import devices  # noqa: E402
from modelsql.tuning.training import (StageSpec, TrainData, nondeterministic_error, train_stage)  # noqa: E402

from tune_fixtures import GRID_SQL, make_db, trial_metrics  # noqa: E402

PROGRAM_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
"""How far a Python program's outputs on a GPU may be from the CPU's (float32; cuBLAS sums in another order)."""

gpu = pytest.mark.skipif(not devices.cuda_available(),
                         reason="needs a CUDA device that modelsql.operators.backends.devices reports "
                                "(onnxruntime-gpu and an NVIDIA driver); none here")


@pytest.fixture
def con(tmp_path):
    c = make_db(str(tmp_path / "devices.duckdb"))
    yield c
    c.close()


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("MODELSQL_DEVICES", "cpu")


def _row(cur) -> dict:
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def _counts(con) -> tuple:
    return tuple(con.execute(f"SELECT count(*) FROM modelsql.{t}").fetchone()[0]
                 for t in ("studies", "trials", "stages", "trainables", "models"))


# ------------------------------------------------------------------ everywhere


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "CUDA:1"])
def test_tune_on_an_absent_gpu_is_refused_before_anything_trains(con, no_gpu, device):
    before = _counts(con)
    with pytest.raises(NotSupportedError) as err:
        con.execute(GRID_SQL.format(extra=f", device = '{device}'"))
    assert err.value.code == "device_not_available"
    assert "TUNE option device" in str(err.value) and "cuda" in str(err.value)
    assert _counts(con) == before


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cpu:0", "1"])
def test_tune_with_a_bad_device_names_the_option(con, device):
    before = _counts(con)
    with pytest.raises(ProgrammingError) as err:
        con.execute(GRID_SQL.format(extra=f", device = '{device}'"))
    assert err.value.code == "invalid_option"
    assert "TUNE option device" in str(err.value) and "device = " in str(err.value)  # points at the option
    assert _counts(con) == before


def test_a_cpu_study_keeps_its_tree_key(con, no_gpu):
    first = _row(con.execute(GRID_SQL.format(extra=", study_name = 'plain'")))
    explicit = _row(con.execute(GRID_SQL.format(extra=", study_name = 'on_cpu', device = 'cpu'")))
    auto = _row(con.execute(GRID_SQL.format(extra=", study_name = 'on_auto', device = 'auto'")))
    assert first["epochs_trained"] > 0 and explicit["epochs_trained"] == auto["epochs_trained"] == 0
    assert trial_metrics(con, "plain") == trial_metrics(con, "on_cpu") == trial_metrics(con, "on_auto")
    options = con.execute("SELECT options FROM modelsql.studies WHERE name = 'on_cpu'").fetchone()[0]
    assert "device" not in options


def test_explain_tune_checks_the_device_too(con, no_gpu):
    with pytest.raises(NotSupportedError) as err:
        con.execute("EXPLAIN " + GRID_SQL.format(extra=", device = 'cuda'"))
    assert err.value.code == "device_not_available"


@pytest.fixture
def pipeline_db():
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    import pyarrow as pa

    d = load_digits()
    x, y = (d.data / 16).astype(np.float32), d.target.astype(np.int64)
    con = modelsql.connect(":memory:")
    cols = {f"p{i}": x[:, i] for i in range(64)}
    con.register("rows", pa.table({**cols, "label": y}))
    cur = con.cursor()
    cur.execute("CREATE TABLE train AS SELECT * FROM rows LIMIT 1000")
    cur.execute("CREATE TABLE val AS SELECT * FROM rows LIMIT 400 OFFSET 1000")
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)).fit(x[:1000], y[:1000])
    con.import_pipeline("p", pipe, example_input=x[:20])
    yield con, cur
    con.close()


def _versions(cur) -> tuple:
    cur.execute("SELECT (SELECT count(*) FROM modelsql.pipeline_versions), (SELECT count(*) FROM modelsql.models)")
    return cur.fetchone()


def test_finetune_refuses_an_absent_gpu_and_a_bad_device(pipeline_db, no_gpu):
    con, cur = pipeline_db
    before = _versions(cur)
    with pytest.raises(NotSupportedError) as err:
        cur.execute("FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 5, "
                    "device = 'cuda')")
    assert err.value.code == "device_not_available" and "FINETUNE PIPELINE p option device" in str(err.value)
    with pytest.raises(ProgrammingError) as err:
        cur.execute("FINETUNE PIPELINE p ON TABLE train TARGET label WITH (device = 'gpu0')")
    assert err.value.code == "invalid_option" and "FINETUNE" in str(err.value)
    assert _versions(cur) == before


def test_finetune_on_the_cpu_is_what_it_was(pipeline_db, no_gpu):
    con, cur = pipeline_db
    sql = "FINETUNE PIPELINE p VERSION 1 ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 20{})"
    plain = _row(cur.execute(sql.format("")))
    on_cpu = _row(cur.execute(sql.format(", device = 'cpu'")))
    for key in ("chosen", "best_epoch", "val_before", "val_after"):
        assert plain[key] == on_cpu[key]


def test_a_python_program_on_an_absent_gpu_is_refused(tmp_path, no_gpu):
    with modelsql.connect(str(tmp_path / "p.duckdb")) as con:
        cur = con.cursor()
        for device, cls, code in (("cuda", NotSupportedError, "device_not_available"),
                                  ("cuda:one", ProgrammingError, "invalid_option")):
            with pytest.raises(cls) as err:
                cur.execute("CREATE MODEL loop FROM PYTHON 'modelsql.datasets.programs:WhileLoop' "
                            f"WITH (execution = 'eager', device = '{device}')")
            assert err.value.code == code and "option device" in str(err.value)
        assert cur.execute("SELECT count(*) FROM modelsql.models").fetchone()[0] == 0
        cur.execute("CREATE MODEL loop FROM PYTHON 'modelsql.datasets.programs:WhileLoop' "
                    "WITH (execution = 'eager', device = 'auto')")  # auto: the CPU
        cur.execute("SELECT options FROM modelsql.model_versions WHERE name = 'loop'")
        assert "device" not in str(cur.fetchone()[0])


def _digits_data(rows: int = 120) -> TrainData:
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.data / 16).astype(np.float32), d.target.astype(np.int64)
    return TrainData(x[:rows], y[:rows], x[rows:rows + 60], y[rows:rows + 60], "classification", 10)


def _stage(device: str, factory: str = "modelsql.zoo:mlp", params=(("hidden", 8),)) -> StageSpec:
    return StageSpec(factory, params, ((("lr", 0.1),),), 0, 0, 1, device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where torch has no CUDA")
def test_a_stage_on_a_device_torch_lacks_is_refused():
    with pytest.raises(NotSupportedError) as err:
        train_stage(_stage("cuda:0"), _digits_data(), None)
    assert err.value.code == "device_not_available"


def test_a_stage_device_is_cpu_or_cuda_n():
    with pytest.raises(ProgrammingError) as err:
        train_stage(_stage("tpu:0"), _digits_data(), None)
    assert err.value.code == "invalid_stage"


def test_torchs_refusal_of_a_nondeterministic_kernel_names_the_operator():
    exc = RuntimeError("adaptive_avg_pool2d_backward_cuda does not have a deterministic implementation, but you set "
                       "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this "
                       "operation, or you can use the 'warn_only=True' option, if that's acceptable for your "
                       "application.")
    err = nondeterministic_error(exc)
    assert isinstance(err, NotSupportedError) and err.code == "nondeterministic_operator"
    assert "adaptive_avg_pool2d_backward_cuda" in str(err)
    assert nondeterministic_error(RuntimeError("shape mismatch")) is None


def test_the_zoo_resnet_keeps_its_state_names_and_cifar_resnet_reads_3x32x32_rows():
    from modelsql import zoo

    assert list(zoo.resnet(64, 10).state_dict())[-2:] == ["body.7.weight", "body.7.bias"]  # old checkpoints load
    assert tuple(zoo.cifar_resnet(3072, 4)(torch.zeros(3, 3072)).shape) == (3, 4)
    with pytest.raises(ValueError):
        zoo.cifar_resnet(64, 10)


# ------------------------------------------------------------------ on a GPU

DROPOUT_SQL = """TUNE MODEL mlp ON TABLE train VALIDATE ON TABLE val TARGET label
SEARCH (lr = STEP_DECAY(initial => CHOICE(0.2, 0.1), milestones => CHOICE((2,), (3,)), gamma => 0.1),
        batch_size = 64, dropout = 0.2)
USING GRID WITH (max_epochs = 4, seed = 0, workers = 2, device = 'cuda'{extra})"""

RESNET_SQL = """TUNE MODEL rn ON TABLE train VALIDATE ON TABLE val TARGET label
SEARCH (lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => CHOICE((1,), (2,)), gamma => 0.1),
        batch_size = 32)
USING GRID WITH (max_epochs = 3, seed = 0, workers = 2, device = 'cuda:0'{extra})"""


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("sql", [DROPOUT_SQL, RESNET_SQL], ids=["mlp_dropout", "resnet_batchnorm"])
def test_tune_on_cuda_is_bit_identical_between_stage_tree_and_trials(con, sql):
    con.execute("CREATE MODEL rn FROM PYTHON 'modelsql.zoo:resnet' WITH (width = 8, blocks = 1)")
    staged = _row(con.execute(sql.format(extra=", study_name = 'staged'")))
    trials = _row(con.execute(sql.format(extra=", study_name = 'trials', execution = 'trials'")))
    assert staged["status"] == trials["status"] == "finished"
    assert staged["epochs_trained"] < trials["epochs_trained"]
    a, b = trial_metrics(con, "staged"), trial_metrics(con, "trials")
    assert a == b and all(status == "completed" for status, _ in a.values())
    assert staged["best_metric"] == trials["best_metric"]
    options = con.execute("SELECT options FROM modelsql.studies WHERE name = 'staged'").fetchone()[0]
    assert '"device": "cuda:0"' in options


@pytest.mark.gpu
@gpu
def test_a_cuda_study_has_its_own_tree_and_its_model_loads_on_the_cpu(con):
    on_cpu = _row(con.execute(GRID_SQL.format(extra=", study_name = 'on_cpu', device = 'cpu'")))
    on_gpu = _row(con.execute(GRID_SQL.format(extra=", study_name = 'on_gpu', device = 'cuda'")))
    assert on_gpu["epochs_trained"] == on_cpu["epochs_trained"] > 0  # nothing reused across devices
    again = _row(con.execute(GRID_SQL.format(extra=", study_name = 'on_gpu2', device = 'auto'")))
    assert again["epochs_trained"] == 0  # auto is cuda:0 here: the GPU tree
    with pytest.raises(ProgrammingError) as err:  # the same study name on another device
        con.execute(GRID_SQL.format(extra=", study_name = 'on_cpu', device = 'cuda'"))
    assert err.value.code == "study_definition_changed" and "trained on cpu" in str(err.value)
    cur = con.cursor()
    cur.execute("CREATE MODEL best FROM STUDY on_gpu")
    cur.execute("SELECT count(*) FROM PREDICT(MODEL best, TABLE val)")
    assert cur.fetchone()[0] > 0


def adaptive_cnn(in_features: int, n_outputs: int) -> torch.nn.Module:
    """A network with bilinear upsampling and ``AdaptiveAvgPool2d(2)``, whose CUDA backwards have no deterministic
    kernel (``AdaptiveAvgPool2d(1)`` has one: torch computes it as a mean)."""
    from torch import nn

    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 4, 3, padding=1),
                         nn.Upsample(scale_factor=2, mode="bilinear"), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, n_outputs))


@pytest.mark.gpu
@gpu
def test_an_operator_without_a_deterministic_cuda_kernel_is_named():
    with pytest.raises(NotSupportedError) as err:
        train_stage(_stage("cuda:0", f"{__name__}:adaptive_cnn", ()), _digits_data(), None)
    assert err.value.code == "nondeterministic_operator" and "_cuda" in str(err.value)
    assert "operator" in str(err.value) and "deterministic" in str(err.value)
    assert not torch.are_deterministic_algorithms_enabled()  # the caller's flags are back


@pytest.mark.gpu
@gpu
def test_a_stage_resumes_bit_exactly_on_cuda_and_its_checkpoint_is_cpu_tensors():
    import io

    data = _digits_data(200)
    params = (("dropout", 0.3), ("hidden", 16))
    epochs = tuple(((("lr", lr),),) for lr in (0.2, 0.2, 0.05))
    whole = train_stage(StageSpec("modelsql.zoo:mlp", params, tuple(e[0] for e in epochs), 0, 0, 1, "cuda:0"),
                        data, None)
    head = train_stage(StageSpec("modelsql.zoo:mlp", params, (epochs[0][0],), 0, 0, 1, "cuda:0"), data, None)
    tail = train_stage(StageSpec("modelsql.zoo:mlp", params, (epochs[1][0], epochs[2][0]), 1, 0, 1, "cuda:0"),
                       data, head.checkpoint)
    assert [m["val_loss"].hex() for m in whole.metrics] == [m["val_loss"].hex() for m in head.metrics + tail.metrics]
    state = torch.load(io.BytesIO(tail.checkpoint), weights_only=True)
    assert all(t.device.type == "cpu" for t in state["model"].values()) and state["device"] == "cuda"


@pytest.mark.gpu
@gpu
def test_finetune_trains_on_cuda_reproducibly(pipeline_db):
    con, cur = pipeline_db
    sql = ("FINETUNE PIPELINE p VERSION 1 ON TABLE train VALIDATE ON TABLE val TARGET label "
           "WITH (epochs = 40, device = 'cuda')")
    first, second = _row(cur.execute(sql)), _row(cur.execute(sql))
    assert first["val_after"] >= first["val_before"]
    assert (first["chosen"], first["best_epoch"], first["val_after"]) == \
        (second["chosen"], second["best_epoch"], second["val_after"])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("execution", ["eager", "coexecute"])
def test_a_python_program_predicts_on_cuda_what_it_predicts_on_the_cpu(tmp_path, execution):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 4)) * 4).astype(np.float32)
    with modelsql.connect(str(tmp_path / "p.duckdb")) as con:
        import pyarrow as pa

        con.register("rows", pa.table({"id": np.arange(300), "x": list(x)}))
        cur = con.cursor()
        cur.execute("CREATE TABLE t AS SELECT id, x::FLOAT[4] AS x FROM rows")
        for name, device in (("on_cpu", "cpu"), ("on_gpu", "cuda")):
            cur.execute(f"CREATE MODEL {name} FROM PYTHON 'modelsql.datasets.programs:WhileLoop' "
                        f"WITH (execution = '{execution}', device = '{device}')")
        out = {}
        for name in ("on_cpu", "on_gpu"):
            cur.execute(f"SELECT output FROM PREDICT(MODEL {name}, TABLE t) ORDER BY id")
            out[name] = np.array([r[0] for r in cur.fetchall()], np.float32)
    np.testing.assert_allclose(out["on_gpu"], out["on_cpu"], **PROGRAM_TOLERANCE)
