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
``eval_every`` (10), ``validation_fraction`` (0.2, without VALIDATE ON), ``test`` (a table name).
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError, NotSupportedError, ProgrammingError, did_you_mean
from ..sql.nodes import FinetunePipeline
from . import artifacts, ddl
from .handlers import run_statement
from .options import no_repeats, value
from .pipelines import create_pipeline
from .plan import CreatePipelinePlan, StepSpec
from .result import Result
from .tune import relation_sql
from .tune_checks import number_option
from .tune_data import load_study_data

__all__ = ["OPTIONS", "EXACT"]

OPTIONS = ("epochs", "temperature", "lr", "seed", "eval_every", "validation_fraction", "test")
"""Options of FINETUNE PIPELINE."""

EXACT = 1e-4
"""Largest difference accepted between the translated program and ONNX Runtime running the steps."""

_COLUMNS = (("pipeline", "VARCHAR"), ("version", "INTEGER"), ("chosen", "VARCHAR"), ("best_epoch", "INTEGER"),
            ("epochs", "INTEGER"), ("metric", "VARCHAR"), ("val_before", "DOUBLE"), ("val_after", "DOUBLE"),
            ("test_before", "DOUBLE"), ("test_after", "DOUBLE"))


@run_statement.register
def _finetune(stmt: FinetunePipeline, session, params: list) -> Result:
    import torch

    from ..finetune.train import evaluate, finetune
    from ..finetune.translate import PipelineNet

    session.check_writable()
    ref = stmt.this
    pv = session.get_model(ref.model_name, ref.version_number, ref, pipeline=True)
    options = _options(stmt, params)
    x, y, x_val, y_val, task, raw_val = _data(session, stmt, pv, options, params)
    net = PipelineNet(pv, [artifacts.load_model_proto(session.store, s.model) for s in pv.steps])
    _check_exact(session, pv, net, x)
    classes = net.classes() if task == "classification" else None
    t = [torch.from_numpy(a) for a in (x, x_val)]
    ty, ty_val = (_indices(y, classes, "training"), _indices(raw_val, classes, "validation")) if classes else (
        torch.from_numpy(y.astype(np.float32)), torch.from_numpy(y_val.astype(np.float32)))
    test = _test_rows(session, options.get("test"), stmt, pv, params)
    before_test = evaluate(net, test[0], test[1], task, test[2]) if test else None
    net.calibrate(t[0])
    result = finetune(net, t[0], ty, t[1], ty_val, task=task, labels_val=raw_val if classes else None,
                      steps=options["epochs"], temperature=options["temperature"], lr=options["lr"],
                      seed=options["seed"], eval_every=options["eval_every"])
    after_test = evaluate(net, test[0], test[1], task, test[2]) if test else None
    version = _register(session, pv, net, t[1], options) if result.chosen == "finetuned" else None
    row = (pv.name, version, result.chosen, result.best_step, options["epochs"],
           "val_accuracy" if task == "classification" else "val_mse", result.val_before, result.val_after,
           before_test, after_test)
    return Result(session.duck, description=[(n, k, None, None, None, None, True) for n, k in _COLUMNS], rows=[row])


def _options(stmt: FinetunePipeline, params: list) -> dict:
    name = stmt.this.model_name
    no_repeats(stmt.args.get("options"), f"FINETUNE PIPELINE {name}")
    given = {}
    for key, node in stmt.option_values.items():
        if key not in OPTIONS:
            raise ProgrammingError(f'FINETUNE PIPELINE {name}: unknown option "{key}".{did_you_mean(key, OPTIONS)} '
                                   f"Options are: {', '.join(OPTIONS)}.", code="unknown_option")
        given[key] = node.name if key == "test" and node.__class__.__name__ == "Identifier" else value(node, params)
    out = {"test": given.get("test")}
    try:
        out["epochs"] = int(number_option(given, "epochs", 300, low=1, high=100_000, open_low=False))
        out["temperature"] = float(number_option(given, "temperature", 0.1, low=0.0, high=100.0))
        out["lr"] = float(number_option(given, "lr", 3e-3, low=0.0, high=10.0, open_low=False))
        out["seed"] = int(number_option(given, "seed", 0, low=0, high=2**32 - 1, open_low=False))
        out["eval_every"] = int(number_option(given, "eval_every", 10, low=1, high=100_000, open_low=False))
        out["validation_fraction"] = float(number_option(given, "validation_fraction", 0.2, low=0.0, high=1.0))
    except ProgrammingError as err:  # the shared option checks speak of TUNE
        raise ProgrammingError(str(err).replace("TUNE option", f"FINETUNE PIPELINE {name} option"),
                               code=err.code) from None
    return out


def _features(pv) -> tuple:
    """The pipeline's feature columns, or None (the input's numeric columns other than the target)."""
    if len(pv.inputs) != 1 or pv.inputs[0].elem_type not in ("FLOAT", "DOUBLE"):
        raise NotSupportedError(f'FINETUNE PIPELINE {pv.name}: only pipelines over one numeric matrix input are '
                                f"translated (this one takes {', '.join(i.name for i in pv.inputs)})",
                                code="not_supported")
    return pv.steps[0].model.features


def _data(session, stmt: FinetunePipeline, pv, options: dict, params: list):
    """(x, y, x_val, y_val, task, y_val label values) from ON / VALIDATE ON / TARGET."""
    validate = stmt.args.get("validate")
    data = load_study_data(session, relation_sql(stmt.args["train"], "ON", "FINETUNE"),
                           relation_sql(validate, "VALIDATE ON", "FINETUNE") if validate is not None else None,
                           stmt.args["target"].name, _features(pv), options["validation_fraction"], options["seed"],
                           params)
    d = data.data
    width = pv.inputs[0].shape[1] if pv.inputs[0].shape and len(pv.inputs[0].shape) > 1 else None
    if isinstance(width, int) and d.x.shape[1] != width:
        raise ProgrammingError(f'FINETUNE PIPELINE {pv.name}: the input has {d.x.shape[1]} feature columns '
                               f"({', '.join(data.features)}) but the pipeline takes {width}", code="feature_mismatch")
    if d.task == "classification":
        labels = np.asarray(data.labels)
        return d.x, labels[d.y], d.x_val, labels[d.y_val], d.task, labels[d.y_val]
    return d.x, d.y, d.x_val, d.y_val, d.task, d.y_val


def _indices(values: np.ndarray, classes: list, what: str):
    """Label values as indices into the pipeline's probability columns."""
    import torch

    index = {c: i for i, c in enumerate(classes)}
    missing = sorted({v for v in values.tolist() if v not in index}, key=str)
    if missing:
        raise DataError(f"FINETUNE: {what} label {missing[0]!r} is not a class of the pipeline "
                        f"({', '.join(map(str, classes))})", code="unknown_label")
    return torch.tensor([index[v] for v in values.tolist()], dtype=torch.int64)


def _check_exact(session, pv, net, x: np.ndarray) -> None:
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


def _test_rows(session, table, stmt, pv, params):
    """(x, target tensor, label values) of the ``test`` table, or None."""
    if table is None:
        return None
    import torch

    data = load_study_data(session, f'SELECT * FROM "{table}"', f'SELECT * FROM "{table}"',
                           stmt.args["target"].name, _features(pv), 0.5, 0, params)
    d = data.data
    if d.task == "classification":
        labels = np.asarray(data.labels)[d.y]
        return torch.from_numpy(d.x), torch.zeros(len(d.x), dtype=torch.int64), labels
    return torch.from_numpy(d.x), torch.from_numpy(d.y.astype(np.float32)), None


def _register(session, pv, net, x_val, options: dict) -> int:
    """Export the fine-tuned program, check it, import it as ``<p>_finetuned`` and as the pipeline's next version."""
    import torch

    from ..formats.torch import from_torch

    class _Export(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    module = _Export(net).eval()
    proto = from_torch(module, x_val[:8], input_names=[pv.inputs[0].name], output_names=[o.name for o in pv.outputs])
    name = f"{pv.name}_finetuned"
    mv = ddl.import_model(session, name, proto, replace=True, features=pv.steps[0].model.features,
                          options={"finetuned_from": f"pipeline {pv.name} version {pv.version}",
                                   "temperature": str(options["temperature"]), "epochs": str(options["epochs"])})
    _check_export(session, mv, module, x_val)
    created = create_pipeline(session, CreatePipelinePlan(name=pv.name, steps=(StepSpec(mv.name, mv.version),),
                                                          replace=True, source=f"FINETUNE of version {pv.version}"))
    return created.version


def _check_export(session, mv, module, x_val) -> None:
    import torch

    runner = artifacts.model_session(session.store, mv, intra=1)
    got = runner.run({mv.inputs[0].name: x_val.numpy()}, [o.name for o in mv.outputs])
    with torch.no_grad():
        expected = [o.numpy() for o in module(x_val)]
    for spec, g, e in zip(mv.outputs, got, expected):
        if e.dtype.kind == "f" and not np.allclose(np.asarray(g).reshape(e.shape), e, atol=1e-4, rtol=1e-4):
            diff = float(np.abs(np.asarray(g).reshape(e.shape) - e).max())
            raise DataError(f'FINETUNE: the exported ONNX model disagrees with the fine-tuned program on output '
                            f'"{spec.name}" (by up to {diff:.3g})', code="export_mismatch")
