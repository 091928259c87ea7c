"""``FINETUNE PIPELINE p ON ... [VALIDATE ON ...] TARGET y [WITH (...)]``: a classical pipeline trained end to end.

1. The pipeline's steps (their ONNX graphs in the store) are translated into one differentiable program
   (:class:`modelsql.finetune.translate.PipelineNet`), which must agree with ONNX Runtime running the
   steps on the training rows (labels equal, probabilities within :data:`EXACT`); a translation that does
   not is refused, never fine-tuned.
2. :func:`modelsql.finetune.train.finetune` trains all steps jointly, tree ensembles soft at
   ``temperature``, and keeps the original pipeline as the step-0 candidate chosen on validation.
3. When the fine-tuned candidate won, it is exported to ONNX (checked against the torch program on the
   validation rows), imported as model ``<p>_finetuned`` and registered as the pipeline's next version
   (one step); when the original won, nothing is registered and the report says so.

The result is one row: the pipeline, the new version (NULL when the original was kept), which candidate
won, the step it was taken at, and the metric (validation accuracy, or mean squared error for a
regression) before and after, on validation and on ``test`` (a table of held-out rows) when given.

Options: ``epochs`` (full-batch steps, 300), ``temperature`` (0.1), ``lr`` (0.003), ``seed`` (0),
``eval_every`` (10), ``validation_fraction`` (0.2, without VALIDATE ON), ``test`` (a table name), ``features``
(the columns to feed, in order; by default the pipeline's features, else every column but the target and the
keys, as :mod:`~modelsql.engine.training_features` says), ``device``
(``'auto'``: ``cuda:0`` when there is a GPU, else ``cpu``; ``'cpu'``, ``'cuda'``, ``'cuda:N'``; checked before
anything is read or trained, see :func:`~modelsql.engine.tune.checks.training_device`). The translation is
checked and calibrated on the CPU; only the training (and the ``test`` metric after it) runs on the device,
with deterministic kernels (:func:`~modelsql.tuning.training.deterministic_on`), and the chosen program comes
back to the CPU before it is exported. The pipeline version it started from and the version it made are both
EVALUATEd on the validation rows and recorded in ``modelsql.evaluations`` (``options->>'finetune'``: ``before``,
``after``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
import pyarrow as pa

from modelsql.catalog.lineage import Origin
from modelsql.errors import DataError, IntegrityError, NotSupportedError
from modelsql.operators.backends.onnxruntime import OrtModel
from modelsql.progress import Meter
from modelsql.sql.finetune import FinetunePipeline
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.models import statements as ddl
from modelsql.engine.finetune.data import finetune_options, read_data, read_test
from modelsql.engine.evaluate.recording import record_evaluation
from modelsql.engine.handlers import handles
from modelsql.engine.pipelines.statements import create_pipeline
from modelsql.engine.pipelines.plans import CreatePipelinePlan, StepSpec
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["EXACT"]

EXACT = 1e-4
"""Largest difference accepted between the translated program and ONNX Runtime running the steps."""

_COLUMNS = (("pipeline", "VARCHAR"), ("version", "INTEGER"), ("chosen", "VARCHAR"), ("best_epoch", "INTEGER"),
            ("epochs", "INTEGER"), ("metric", "VARCHAR"), ("val_before", "DOUBLE"), ("val_after", "DOUBLE"),
            ("test_before", "DOUBLE"), ("test_after", "DOUBLE"))


@handles(FinetunePipeline)
def _finetune(stmt: FinetunePipeline, session: Session, params: list) -> Result:
    import torch

    from modelsql.finetune.train import evaluate
    from modelsql.finetune.translate import PipelineNet

    session.check_writable()
    ref = stmt.this
    pv = session.get_model(ref.model_name, ref.version_number, ref, pipeline=True)
    options = finetune_options(stmt, params)
    _check_input(pv)
    net = PipelineNet(pv, [artifacts.load_model_proto(session.store, s.model) for s in pv.steps])
    classes = _classes(net, pv)
    task = "classification" if classes is not None else "regression"
    data = read_data(session, stmt, pv, options, params, classes)
    _check_exact(session, pv, net, data.x)
    test = read_test(session, options["test"], data.features, stmt.args["target"].name, classes)
    test = (torch.from_numpy(test[0]), torch.from_numpy(test[1]), test[2]) if test else None
    before_test = evaluate(net, test[0], test[1], task, test[2]) if test else None
    x, x_val = torch.from_numpy(data.x), torch.from_numpy(data.x_val)
    net.calibrate(x)
    meter = Meter(session.progress, "finetune", total=options["epochs"], label=pv.label, pipeline=pv.name)
    try:
        result, after_test = _train(net, (x, torch.from_numpy(data.y), x_val, torch.from_numpy(data.y_val)), test,
                                    task, data.labels_val, options, meter)
    except BaseException:
        meter.finish(ok=False)
        raise
    meter.finish()
    features = data.features if len(data.features) == data.x.shape[1] else pv.steps[0].model.features
    version = _register(session, pv, net, x_val, options, features) if result.chosen == "finetuned" else None
    _record(session, stmt, pv, version, data)
    row = (pv.name, version, result.chosen, result.best_step, options["epochs"],
           "val_accuracy" if task == "classification" else "val_mse", result.val_before, result.val_after,
           before_test, after_test)
    return Result(session.duck, description=[(n, k, None, None, None, None, True) for n, k in _COLUMNS], rows=[row])


def _record(session: Session, stmt: FinetunePipeline, pv, version: Optional[int], data) -> None:
    """EVALUATE, recorded, of the pipeline version FINETUNE started from and of the version it made (if any), on
    the validation rows (one input text and one fingerprint, so ``BEST BY`` compares them); none when the
    features are an array column (the rows are not a table of named columns)."""
    if len(data.features) != data.x_val.shape[1]:
        return
    target = stmt.args["target"].name
    truth = data.labels_val if data.labels_val is not None else data.y_val.astype(np.float64)
    rows = pa.table({**{f: data.x_val[:, i] for i, f in enumerate(data.features)}, target: truth})
    source = stmt.args.get("validate") or stmt.args["train"]
    held = "VALIDATE ON" if stmt.args.get("validate") is not None else "validation rows held out of ON"
    text = f"FINETUNE PIPELINE {pv.name} ({held} {source.sql(dialect='duckdb')})"
    for number, which in ((pv.version, "before"), (version, "after")):
        if number is not None:
            record_evaluation(session, "pipeline", pv.name, number, rows, target, input_text=text,
                              options={"finetune": which}, called_as=f"FINETUNE PIPELINE {pv.name}, evaluating "
                                                                     f"version {number} with EVALUATE")


def _train(net, tensors: tuple, test, task: str, labels_val, options: dict, meter: Meter):
    """(the :class:`~modelsql.finetune.train.FinetuneResult`, the test metric after) of fine-tuning ``net`` on
    ``options["device"]``; ``net`` is back on the CPU afterwards, holding the chosen candidate. ``meter`` counts
    the epochs (full-batch steps) trained, with the loss.

    Raises:
        NotSupportedError: ``nondeterministic_operator`` (on CUDA, an operator without a deterministic kernel).
        DataError: ``training_diverged``.
    """
    from modelsql.finetune.train import evaluate, finetune
    from modelsql.tuning.inprocess_executor import training_here
    from modelsql.tuning.training import deterministic_on, nondeterministic_error

    device = options["device"]
    x, y, x_val, y_val = (t.to(device) for t in tensors)
    try:
        with training_here(), deterministic_on(device):  # torch's RNG is the process's: one training at a time
            net.to(device)
            result = finetune(net, x, y, x_val, y_val, task=task, labels_val=labels_val, steps=options["epochs"],
                              temperature=options["temperature"], lr=options["lr"], seed=options["seed"],
                              eval_every=options["eval_every"],
                              progress=lambda step, loss: meter.update(step, loss=loss))
            after = evaluate(net, test[0].to(device), test[1].to(device), task, test[2]) if test else None
    except RuntimeError as exc:
        refused = nondeterministic_error(exc)
        if refused is None:
            raise
        raise refused from None
    finally:
        net.cpu()
    return result, after


def _check_input(pv) -> None:
    if len(pv.inputs) != 1 or pv.inputs[0].elem_type not in ("FLOAT", "DOUBLE"):
        raise NotSupportedError(f'FINETUNE PIPELINE {pv.name}: only pipelines over one numeric matrix input are '
                                f"translated (this one takes {', '.join(i.name for i in pv.inputs)})",
                                code="not_supported")


def _classes(net, pv):
    """The pipeline's classes (a classifier), or None (a one-output regressor).

    Raises:
        NotSupportedError: ``not_supported`` for a pipeline with several regression outputs.
    """
    try:
        return net.classes()
    except NotSupportedError:
        outs = pv.outputs
        width = outs[0].shape[1] if outs[0].shape and len(outs[0].shape) > 1 else 1
        if len(outs) != 1 or width not in (1, None):
            raise NotSupportedError(f'FINETUNE PIPELINE {pv.name}: neither a classifier (a label output of known '
                                    "classes) nor a regressor with one output; not fine-tuned",
                                    code="not_supported") from None
        return None


def _check_exact(session: Session, pv, net, x: np.ndarray) -> None:
    """The translated program (hard) agrees with ONNX Runtime running the pipeline's steps on ``x``."""
    import torch

    runner = artifacts.model_session(session.store, pv, intra=1)
    expected = runner.run({pv.inputs[0].name: x}, [o.name for o in pv.outputs])
    net.set_temperature(0.0)
    with torch.no_grad():
        got = [o.numpy() for o in net(torch.from_numpy(x))]
    for spec, e, g in zip(pv.outputs, expected, got):
        e = np.asarray(e)
        same = np.array_equal(e.reshape(g.shape), g) if e.dtype.kind in "iub" else np.allclose(
            e.reshape(g.shape), g, atol=EXACT, rtol=EXACT)
        if not same:
            raise NotSupportedError(f'FINETUNE PIPELINE {pv.name}: the translated program differs from the pipeline '
                                    f'on output "{spec.name}" of the training rows, so it is not fine-tuned',
                                    code="translation_not_exact")


def _register(session: Session, pv, net, x_val, options: dict, features) -> int:
    """Export the fine-tuned program, check it, then import it as ``<p>_finetuned`` (its features: the columns
    it was trained on, so PREDICT feeds it those) and as the pipeline's next version (the catalog is untouched
    when the name is taken or the export disagrees)."""
    import torch

    from modelsql.converters.torch import from_torch

    class _Export(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    name = f"{pv.name}_finetuned"
    if session.catalog.exists(name):
        made_by = dict(session.catalog.get(name).options).get("finetuned_from", "")
        if not made_by.startswith(f"pipeline {pv.name} "):
            raise IntegrityError(f'FINETUNE PIPELINE {pv.name} registers its result as model "{name}", which exists '
                                 "and was not made by FINETUNE of this pipeline: rename or drop that model first.",
                                 code="duplicate_model")
    module = _Export(net).eval()
    output_names = [o.name for o in pv.outputs]
    proto = from_torch(module, x_val[:8], input_names=[pv.inputs[0].name], output_names=output_names)
    _check_export(proto, pv, module, x_val)
    mv = ddl.import_model(session, name, proto, replace=True, features=features,
                          options={"finetuned_from": f"pipeline {pv.name} version {pv.version}",
                                   "temperature": str(options["temperature"]), "epochs": str(options["epochs"])},
                          origin=Origin("finetune", f"FINETUNE PIPELINE {pv.name}", parent_kind="pipeline",
                                        parent_name=pv.name, parent_version=pv.version))
    created = create_pipeline(session, CreatePipelinePlan(name=pv.name, steps=(StepSpec(mv.name, mv.version),),
                                                          replace=True, source=f"FINETUNE of version {pv.version}"))
    return created.version


def _check_export(proto, pv, module, x_val) -> None:
    """ONNX Runtime running the exported ``proto`` agrees with the fine-tuned ``module`` on the validation rows.

    Raises:
        DataError: ``export_mismatch`` naming the output.
    """
    import torch

    runner = OrtModel(proto.SerializeToString(), f'the fine-tuned export of pipeline "{pv.name}"')
    names = [o.name for o in pv.outputs]
    got = runner.run({pv.inputs[0].name: x_val.numpy()}, names)
    with torch.no_grad():
        expected = [o.numpy() for o in module(x_val)]
    for name, g, e in zip(names, got, expected):
        if e.dtype.kind == "f" and not np.allclose(np.asarray(g).reshape(e.shape), e, atol=1e-4, rtol=1e-4):
            diff = float(np.abs(np.asarray(g).reshape(e.shape) - e).max())
            raise DataError(f'FINETUNE: the exported ONNX model disagrees with the fine-tuned program on output '
                            f'"{name}" (by up to {diff:.3g})', code="export_mismatch")
