"""``CREATE MODEL m FROM PYTHON 'package.module:factory' [WITH (...)]`` (a trainable model for TUNE) and
``CREATE MODEL m FROM STUDY s [TRIAL n]`` (a study's trial registered as an ONNX model version).

A trainable is a factory ``f(in_features=F, n_outputs=K, **params) -> torch.nn.Module``; its
``WITH`` options are default factory arguments, which TUNE's SEARCH may override. The catalog keeps
the factory module's source digest, so a changed factory is a new version (TUNE registers it by itself
when the source changed since the latest version). Models and trainables share one namespace.

A trainable's factory is code kept in the database: :func:`trainable_code` is checked with
:func:`~modelsql.engine.artifacts.trust.require` before the factory is imported (TUNE, ``FROM STUDY``), and
``CREATE MODEL ... FROM PYTHON`` signs it with its user's key. That statement runs the Python it names with the
process's rights: it is refused on a connection with ``allow_python=False`` and, before anything is imported,
on a read-only one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Optional

import pyarrow as pa
from sqlglot import exp

from modelsql.catalog.evaluations import EvaluationRow
from modelsql.catalog.studies import Trainable
from modelsql.errors import Error, IntegrityError, NotSupportedError, ProgrammingError
from modelsql.converters import from_torch
from modelsql.converters.label_values import with_label_values
from modelsql.sql.models import ImportModel
from modelsql.tuning.factories import factory_digest, resolve_factory
from modelsql.tuning.training import for_inference, load_trained
from modelsql.engine.evaluate.recording import (record_evaluation, study_origin,
                                                study_query)
from modelsql.engine.evaluate.statement import result_with_evaluation
from modelsql.engine.models import statements as ddl
from modelsql.engine.tune.data import load_study_data
from modelsql.engine.tune.estimators import create_from_estimator_study
from modelsql.engine.artifacts import trust
from modelsql.engine.options import no_repeats, value
from modelsql.engine.models.from_python import create_python_model, store_program, wants_import
from modelsql.engine.result import Result
from modelsql.engine.tune.spec import TRAINING_NAMES, constant, frozen, trainable_defaults
from modelsql.engine.handlers import catalog_write, catalog_write_retrying

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["create_trainable", "trainable_for_tune", "register", "create_from_study", "drop_trainable",
           "trainable_code"]


def create_trainable(stmt: ImportModel, session: Session, params: list) -> Result:
    """``CREATE [OR REPLACE] MODEL [IF NOT EXISTS] m FROM PYTHON 'pkg.mod:factory' [WITH (...)]``.

    Raises:
        ProgrammingError: ``factory_not_found`` (the reference does not import).
        IntegrityError: ``duplicate_model`` (an ONNX model, or a trainable without OR REPLACE / IF NOT
            EXISTS, has the name).
        NotSupportedError: ``python_disabled`` (``allow_python=False``), before anything is imported.
        OperationalError: ``read_only``, before anything is imported.
    """
    name = stmt.this.model_name.lower()
    trust.require_python_allowed(session, f"CREATE MODEL {name} FROM PYTHON")
    session.check_writable()
    if wants_import(stmt, params):
        return create_python_model(stmt, session, params)
    ref = str(value(stmt.args["source"], params))
    no_repeats(stmt.args.get("options"), f"CREATE MODEL {name}")
    if "device" in {k.lower() for k in stmt.option_values}:
        raise ProgrammingError(f"CREATE MODEL {name} FROM PYTHON '{ref}' registers a trainable factory: where it "
                               "trains is TUNE's option (TUNE ... WITH (device = 'cuda')), not a hyper-parameter of "
                               "the factory.", code="invalid_option")
    options = tuple(sorted((k, json.dumps(constant(v, k))) for k, v in stmt.option_values.items()))
    key = trust.signing_key()  # before anything is written
    resolve_factory(ref)
    existing = session.catalog.studies.trainable(name)
    if session.catalog.exists(name):
        raise IntegrityError(f'Model "{name}" already exists as an ONNX model; trainables and models share '
                             "names: DROP MODEL it or choose another name.", code="duplicate_model")
    if existing is not None and not stmt.args.get("replace"):
        if stmt.args.get("exists"):
            return Result(session.duck, rowcount=0)
        raise IntegrityError(f'Model "{name}" already exists (a trainable, {existing.factory}); use CREATE OR '
                             "REPLACE MODEL for a new version.", code="duplicate_model")
    version = existing.version + 1 if existing is not None else 1
    trainable = Trainable(name, version, ref, factory_digest(ref), options)
    with catalog_write(session) as catalog:
        catalog.studies.add_trainable(trainable)
        trust.sign(session, trainable_code(trainable), key)
    return Result(session.duck, rowcount=1)


def trainable_code(trainable: Trainable) -> trust.CodeArtifact:
    """The code artifact of a trainable: its factory reference with its default arguments."""
    args = dict(trainable.options)
    what = f"the Python factory {trainable.factory}" + (f" with {json.dumps(args, sort_keys=True)[:200]}" if args else "")
    return trust.CodeArtifact("trainable", trust.trainable_digest(trainable.factory, trainable.options),
                              trainable.name, trainable.version, what)


def trainable_for_tune(session: Session, name: str, version: Optional[int], ref=None) -> Trainable:
    """The trainable TUNE trains: version ``version``, or the latest one, or (when its factory's source
    changed since) the next version, not yet in the catalog: :func:`register` records it when the study
    starts. Raises ProgrammingError ``model_not_found`` (naming an ONNX model of that name as not
    trainable), NotSupportedError ``untrusted_code`` (before the factory is imported)."""
    found = session.catalog.studies.trainable(name, version)
    if found is None:
        written = exp.to_identifier(name).sql(dialect="duckdb")  # quoted when it must be ("My Model")
        if session.catalog.exists(name):
            raise session.pointed(ProgrammingError(
                f'Model "{name}" is an ONNX model, not a trainable: TUNE trains a factory registered with '
                f"CREATE MODEL {exp.to_identifier(name + '_trainable').sql(dialect='duckdb')} FROM PYTHON "
                "'package.module:function', or a scikit-learn model type (WITH (model_type = 'random_forest_classifier', "
                "...)).", code="model_not_trainable"), ref)
        raise session.pointed(ProgrammingError(
            f'Trainable model "{name}"' + (f" version {version}" if version else "") + " does not exist; register "
            f"one with CREATE MODEL {written} FROM PYTHON 'modelsql.zoo:mlp' (or your own factory), or tune a "
            "scikit-learn model type: WITH (model_type = '...').", code="model_not_found"), ref)
    trust.require(session, trainable_code(found))
    if version is not None:
        return found
    digest = factory_digest(found.factory)
    if digest == found.code_digest:
        return found
    return Trainable(found.name, found.version + 1, found.factory, digest, found.options)


def register(session: Session, trainable: Trainable) -> None:
    """Record ``trainable`` when the catalog does not have that version yet (a changed factory source)."""
    if session.catalog.studies.trainable(trainable.name, trainable.version) is None:
        with catalog_write(session) as catalog:
            catalog.studies.add_trainable(trainable)


def create_from_study(stmt: ImportModel, session: Session, params: list) -> Result:
    """``CREATE [OR REPLACE] MODEL m FROM STUDY s [TRIAL n]``: the trial's final weights (the study's best
    trial by default), exported to ONNX through :mod:`modelsql.converters.torch` and imported as a model
    version whose features are the study's feature columns (or, for a study over one array column, whose
    input is named after that column, so PREDICT binds it by name).

    Raises:
        ProgrammingError: ``study_not_found``, ``trial_not_found``, ``trial_failed``, ``checkpoint_collected`` (a
            pruned trial's checkpoint is not kept).
    """
    studies = session.catalog.studies
    study_name = stmt.args["study"].name.lower()
    study = studies.study(study_name)
    if study is None:
        raise studies.not_found(study_name)
    trial_arg = stmt.args.get("trial")
    number = int(trial_arg.this) if trial_arg is not None else study.best_trial
    trials = {t.trial: t for t in studies.trials(study_name)}
    if number is None or number not in trials:
        raise ProgrammingError(f'Study "{study_name}" has no trial {number}' if number is not None else
                               f'Study "{study_name}" has no finished trial yet.', code="trial_not_found")
    trial = trials[number]
    if trial.status == "failed":
        raise ProgrammingError(f'Trial {number} of study "{study_name}" failed ({trial.error or "no error kept"}): it '
                               "made no model; name another trial (modelsql.trials lists them).", code="trial_failed")
    if json.loads(study.options).get("objective"):
        raise NotSupportedError(f'Study "{study_name}" tuned a Python objective, which makes no model: its trials\' '
                                "configurations and scores are in modelsql.trials.", code="not_supported")
    made: Optional[tuple[int, Optional[EvaluationRow]]]
    if json.loads(study.options).get("model_type"):
        made = create_from_estimator_study(session, stmt, study, trial)  # a scikit-learn model type's study: refit
    else:
        made = _from_trial(session, stmt, study, trial)
    if made is None:
        return Result(session.duck, rowcount=0)  # IF NOT EXISTS found the model
    head = [("model", "VARCHAR"), ("version", "INTEGER"), ("study", "VARCHAR"), ("trial", "INTEGER"),
            ("metric", "DOUBLE")]
    return result_with_evaluation(session, head, [stmt.this.model_name.lower(), made[0], study.name, trial.trial,
                                                  trial.metric], made[1])


def _from_trial(session: Session, stmt: ImportModel, study, trial) -> Optional[tuple[int, Optional[EvaluationRow]]]:
    """A network's trial: its checkpoint imported (:func:`_import_trained`) and evaluated; the new version and its
    evaluation (None when the study keeps no validation rows), or None when IF NOT EXISTS found the model.

    Raises:
        ProgrammingError: ``checkpoint_collected``.
    """
    if trial.checkpoint is None:
        raise ProgrammingError(f'Trial {trial.trial} of study "{study.name}" has no checkpoint (it is {trial.status}; '
                               "checkpoints of pruned and failed trials are collected).", code="checkpoint_collected")
    before = session.catalog.versions(stmt.this.model_name)
    _import_trained(session, stmt, study, trial)
    new_versions = [v for v in session.catalog.versions(stmt.this.model_name) if v not in before]
    if not new_versions:
        return None
    try:
        return new_versions[-1], _record_validation(session, stmt.this.model_name.lower(), new_versions[-1], study,
                                                    trial)
    except BaseException:  # (the study's rows no longer read: the version goes, as an estimator study's does)
        catalog_write_retrying(session, lambda: session.catalog.drop(stmt.this.model_name, new_versions[-1],
                                                                     missing_ok=True))
        raise


def _record_validation(session: Session, name: str, version: int, study, trial) -> Optional[EvaluationRow]:
    """EVALUATE, recorded, of the version made from a trial on the study's validation rows (VALIDATE ON, or the
    rows TUNE held out with the study's seed, read again with the TUNE's ``?`` values); none for a study over trees
    or an array column, or one made before studies kept their validation fraction or their parameters."""
    options = json.loads(study.options)
    fraction = options.get("validation_fraction")
    params = study.parameters
    if options.get("trees") or len(options["features"]) != options.get("in_features") or (
            study.validate_sql is None and fraction is None) or (not params and any(
                study_query(sql).find(exp.Placeholder) for sql in (study.train_sql, study.validate_sql) if sql)):
        return None  # (a study made before studies kept their parameters: its rows cannot be read again)
    kept = options.get("train_fingerprint")
    try:
        data = load_study_data(session, study.train_sql, study.validate_sql, study.target, options["features"],
                               fraction or 0.2, study.seed, params)
    except Error:
        if kept is None:
            raise
        return None  # the ON rows are gone or changed shape since the TUNE
    if kept is not None and data.train_fingerprint != kept:
        return None  # the ON rows changed since the TUNE: split again, "held-out" rows were trained on
    if study.validate_sql is None and options.get("data_digest", data.digest) != data.digest:
        return None  # the same rows in another order: the rows held out by position were trained on
    x_val, y_val = data.data.x_val, data.data.y_val
    truth = [data.labels[i] for i in y_val.tolist()] if data.labels is not None else y_val.astype("float64")
    rows = pa.table({**{f: x_val[:, i] for i, f in enumerate(data.features)}, study.target: truth})
    held = "VALIDATE ON" if study.validate_sql is not None else "validation rows held out of"
    source = study.validate_sql or study.train_sql
    return record_evaluation(session, "model", name, version, rows, study.target,
                             input_text=f"STUDY {study.name} ({held} {source.removeprefix('SELECT * FROM ')})",
                             options={"study": study.name, "trial": trial.trial},
                             called_as=f"CREATE MODEL {name} FROM STUDY {study.name}, evaluating it with EVALUATE",
                             fingerprint=data.validate_fingerprint)


def _import_trained(session: Session, stmt: ImportModel, study, trial) -> None:
    """Export the trial's network to ONNX and import it as model ``stmt.this``'s next version (a network over
    trees is stored as a Python program instead: :func:`_import_trained_program`)."""
    import numpy as np

    if json.loads(study.options).get("trees"):
        return _import_trained_program(session, stmt, study, trial)
    module, features, in_features = _trained_module(session, study, trial)
    example: Optional[np.ndarray] = np.zeros((1, in_features), np.float32)
    input_names = [features[0]] if len(features) != in_features else None  # an array column: bound by name
    names = _output_names(study)
    outputs: Optional[list[str]] = names
    labels = json.loads(study.options).get("labels")
    if labels is not None and not all(isinstance(v, int) and not isinstance(v, bool) for v in labels):
        # text or boolean labels: the exported index output is mapped to the labels themselves
        proto = from_torch(module, example, input_names=input_names, output_names=names)
        module, example, input_names, outputs = with_label_values(proto, "label", labels), None, None, None
    ddl.import_model(session, stmt.this.model_name, module, example_input=example,
                     features=features if len(features) == in_features else None, input_names=input_names,
                     output_names=outputs, replace=bool(stmt.args.get("replace")),
                     if_not_exists=bool(stmt.args.get("exists")),
                     options={"study": study.name, "trial": str(trial.trial), "target": study.target},
                     origin=study_origin(session, study, trial, study.parameters))


def _import_trained_program(session: Session, stmt: ImportModel, study, trial) -> None:
    """A trial of a study over trees as a Python program (:class:`~modelsql.tuning.inference.TrainedNetwork`
    rebuilt from the factory and its arguments, the trial's weights loaded), run eagerly: the level-batched
    executor is already one batch per tree height. Its inputs are named after the study's two columns.

    Raises:
        NotSupportedError: ``not_supported`` for text or boolean class labels.
    """
    import torch

    from modelsql.errors import NotSupportedError
    from modelsql.analyses.program_checks import batching
    from modelsql.converters.python_program import program
    from modelsql.tuning.inference import TrainedNetwork

    model, params, trainable = _trained_network(session, study, trial)
    options = json.loads(study.options)
    labels = options.get("labels")
    if labels is not None and not all(isinstance(v, int) and not isinstance(v, bool) for v in labels):
        raise NotSupportedError(f'CREATE MODEL ... FROM STUDY "{study.name}": a network over trees with text or '
                                "boolean labels is not supported yet; use integer labels.", code="not_supported")
    args = dict(factory=trainable.factory, params=dict(params),
                in_features=options.get("in_features", 1), n_outputs=len(labels) if labels is not None else 1,
                task="classification" if labels is not None else "regression", labels=labels)
    net = TrainedNetwork(**args)
    net.inner.load_state_dict(model.state_dict())
    width = args["in_features"]
    node = (lambda n: torch.zeros(n)) if width == 1 else (lambda n: torch.zeros(n, width))
    example = ([node(1), node(2)], [torch.tensor([-1]), torch.tensor([-1, 0])])
    name = stmt.this.model_name
    prog = program(net.eval(), example, input_names=list(options["features"]), output_names=_output_names(study),
                   label=f'model "{name.lower()}" (study "{study.name}" trial {trial.trial})')
    store_program(session, stmt, "modelsql.tuning.inference:TrainedNetwork", prog, "eager",
                  {"python": f"modelsql.tuning.inference:TrainedNetwork of {trainable.factory}", "study": study.name,
                   "trial": str(trial.trial), "target": study.target}, args, row_reason=batching(prog, None),
                  origin=study_origin(session, study, trial, study.parameters))


def _trained_network(session: Session, study, trial):
    """(the trial's trained network, its factory arguments, the trainable)."""
    options = json.loads(study.options)
    trainable = session.catalog.studies.trainable(study.model, study.model_version)
    if trainable is None:
        raise ProgrammingError(f'Study "{study.name}" trained {study.model} version {study.model_version}, which '
                               "is no longer in the catalog.", code="model_not_found")
    trust.require(session, trainable_code(trainable))
    if factory_digest(trainable.factory) != trainable.code_digest:
        raise ProgrammingError(
            f'The source of {trainable.factory} changed since study "{study.name}" trained it ({study.model} '
            f"version {study.model_version}): its checkpoints may not fit the network the factory builds now. "
            "Restore that source, or tune again.", code="factory_changed")
    sequence = json.loads(trial.sequence)
    params = trainable_defaults(trainable)
    params.update({k: frozen(v) for k, v in (sequence[-1] if sequence else {}).items() if k not in TRAINING_NAMES})
    labels = options.get("labels")
    features = tuple(options["features"])
    n_outputs = len(labels) if labels is not None else 1
    in_features = options.get("in_features", len(features))
    try:
        model = load_trained(trainable.factory, params, session.store.get(trial.checkpoint), (in_features, n_outputs))
    except RuntimeError as exc:  # torch's load_state_dict: the network differs from the one trained
        raise ProgrammingError(f'The network {trainable.factory} builds does not fit the checkpoint of trial '
                               f'{trial.trial} of study "{study.name}": {str(exc).splitlines()[0]}',
                               code="factory_changed") from None
    return model, params, trainable


def _trained_module(session: Session, study, trial):
    options = json.loads(study.options)
    model, _, _ = _trained_network(session, study, trial)
    labels = options.get("labels")
    task = "classification" if labels is not None else "regression"
    return for_inference(model, task, labels), tuple(options["features"]), options.get("in_features",
                                                                                      len(options["features"]))


def _output_names(study) -> list[str]:
    return ["label", "probabilities"] if json.loads(study.options).get("labels") is not None else ["prediction"]


def drop_trainable(plan, session: Session) -> Result:
    """``DROP MODEL [IF EXISTS] m [VERSION n]`` of a trainable: its versions (or version ``n``) leave the catalog;
    the studies that tuned it stay (their trained models are ONNX models of their own).

    Raises:
        NotSupportedError: ``not_supported`` for one VERSION of a trainable.
    """
    from modelsql.errors import NotSupportedError

    if plan.version is not None:
        raise NotSupportedError(f'DROP MODEL {plan.name} VERSION {plan.version}: a trainable is dropped with all its '
                                "versions (DROP MODEL without VERSION)", code="not_supported")
    with catalog_write(session) as catalog:
        removed = catalog.studies.drop_trainable(plan.name)
    return Result(session.duck, rowcount=removed)


ddl.TRAINABLE_HANDLERS["drop"] = drop_trainable
ddl.TRAINABLE_HANDLERS["python"] = create_trainable
ddl.TRAINABLE_HANDLERS["study"] = create_from_study
