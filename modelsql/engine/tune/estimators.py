"""TUNE of a scikit-learn model type: ``TUNE MODEL m ON ... TARGET y SEARCH (...) USING algorithm WITH (model_type =
'...', ...)``, or of a model trained in SQL (its model type and hyper-parameters are the defaults).

The rows are bound as ``CREATE MODEL ... AS`` binds them (:mod:`modelsql.engine.models.training_rows`) and split as
its ``'random'`` validation (``validation_fraction``, the study seed), unless ``VALIDATE ON`` gives the validation
rows; the preprocessing (:func:`modelsql.estimators.build_pipeline`) is fitted once on the training rows and each
trial fits the estimator on its output, scored on the validation rows by EVALUATE's metric definitions
(:mod:`modelsql.estimators.scoring`). The algorithms are TUNE's (:func:`modelsql.tuning.algorithms.make_algorithm`),
driven in rounds, told in trial order.

A boosted model (``boosted_tree_*``: scikit-learn's gradient boosting) grows one tree per "epoch": ``max_epochs``
is its largest ``n_estimators``, a trial's metric is known after every tree (``staged_predict_proba``), and trials
share training as Hippo's stage trees share epochs: a trial asked for more trees continues from the trees it (or a
trial of the same configuration) already has (``warm_start``, whose random state carries on, so the trees are those
of one fit of that many trees: identical results). ``epochs_trained`` counts the trees fitted,
``epochs_requested`` what training every request from scratch would fit; ``steps_ratio`` is the second over the
first; ``execution = 'trials'`` trains every request from scratch instead (the baseline). Other estimators
train once per configuration (``max_epochs`` 1; a configuration asked again is not refitted).

The study and its trials are kept in ``modelsql.studies`` / ``modelsql.trials`` (``options->>'model_type'`` marks
it), so SHOW STUDIES and DESCRIBE STUDY list it, and ``CREATE MODEL x FROM STUDY s [TRIAL n]`` fits the trial's
configuration on the training rows and stores it (:func:`create_from_estimator_study`).
"""

from __future__ import annotations

import hashlib
import re
import json
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
from sqlglot import exp

from modelsql import sql as msql
from modelsql.catalog.evaluations import EvaluationRow
from modelsql.catalog.studies import StudyRow, TrialRow
from modelsql.catalog.study_parameters import kept_parameters
from modelsql.errors import DataError, Error, NotSupportedError, ProgrammingError, without_excerpt
from modelsql.estimators import (ColumnKinds, ModelType, Transform, build_pipeline, conversion_tolerance,
                                 hyperparameters_from_text, hyperparameters_text, imputed_columns, resolve_model_type,
                                 transform_columns, transforms_from_json, transforms_json, transforms_text,
                                 validation_rows)
from modelsql.estimators.scoring import HIGHER_IS_BETTER, checked_mode, metric_for, score, staged_scores
from modelsql.sql.tune import TuneModel
from modelsql.tuning.algorithms import make_algorithm
from modelsql.tuning.space import Piecewise, Space, StepDecay
from modelsql.engine.evaluate.recording import hashes_fingerprint, record_evaluation, study_origin
from modelsql.engine.handlers import catalog_write, catalog_write_retrying
from modelsql.engine.models import statements as ddl
from modelsql.engine.models.training_rows import TrainingRows, training_rows
from modelsql.engine.options import OptionValues, option_error
from modelsql.engine.result import Result
from modelsql.engine.models.transform_clause import check_transform
from modelsql.engine.tune.inprocess import claim_study, release_study, input_rows, rows_digest
from modelsql.engine.tune.result import study_result
from modelsql.engine.tune.spec import bind_space
from modelsql.progress import Meter, tune_meter

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["estimator_type", "tune_estimator", "create_from_estimator_study", "BOOSTED"]

BOOSTED = ("sklearn.ensemble:GradientBoostingClassifier", "sklearn.ensemble:GradientBoostingRegressor")
"""Estimators whose "epochs" are boosting stages (one tree each), grown with ``warm_start``."""

_STUDY_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

_TRAINABLE_ONLY = ("workers", "threads", "executor", "address", "time_budget_s", "device")
"""TUNE options of trainable studies only."""


def estimator_type(session: Session, name: str, version: Optional[int], options: OptionValues
                   ) -> Optional[tuple[ModelType, dict, Optional[tuple[Transform, ...]], tuple[str, ...]]]:
    """The model type TUNE trains, its default hyper-parameters, its ``TRANSFORM`` items (None: the automatic
    preprocessing) and the columns it imputes (model ``name``'s: ``on_null = 'impute'``, ``ML.IMPUTER``): the
    ``model_type`` option's, else those of model ``name`` (its ``version``, else its latest) when it was trained
    in SQL; None for a trainable (torch) study.

    Raises:
        NotSupportedError: ``not_supported`` for a clusterer (nothing to score against a TARGET).
    """
    recorded = dict(session.catalog.get(name, version).options) if session.catalog.exists(name) else {}
    transforms = transforms_from_json(recorded.get("transforms"))
    imputed = tuple(json.loads(recorded.get("imputed") or "[]"))
    if options["model_type"] is not None:  # that model type; the model's TRANSFORM and imputation are kept
        return _tunable(resolve_model_type(options["model_type"])), {}, transforms, imputed
    if "model_type" not in recorded:
        return None
    return _tunable(resolve_model_type(recorded["model_type"])), _base(session, recorded), transforms, imputed


def _base(session: Session, recorded: dict) -> dict:
    """The hyper-parameters a study over a model trained in SQL starts from: the version's, or, for a version made
    FROM STUDY, the ones that study started from (its trial's tuned values are no defaults: the same TUNE run
    again is the same study)."""
    study = session.catalog.studies.study(recorded["study"]) if recorded.get("study") else None
    started = json.loads(study.options).get("base") if study is not None else None
    return dict(started) if started is not None else hyperparameters_from_text(recorded.get("hyperparameters", "{}"))


def _tunable(model_type: ModelType) -> ModelType:
    if model_type.task == "clustering":
        raise NotSupportedError(f"TUNE scores a model against its TARGET; model_type {model_type.name!r} is a clusterer, "
                                "which has none to score against.", code="not_supported")
    return model_type


@dataclass
class _Data:
    rows: TrainingRows
    train: np.ndarray
    valid_rows: TrainingRows
    valid: np.ndarray
    x_train: Any = None
    x_valid: Any = None
    fingerprint: str = ""
    train_fingerprint: Optional[str] = None  # EVALUATE's fingerprint of the ON rows read
    valid_fingerprint: Optional[str] = None  # and of the rows validated on (VALIDATE ON's, or those held out)


@dataclass
class _Study:
    name: str
    model: str
    model_type: ModelType
    base: dict
    space: Space
    algorithm: str
    algorithm_options: dict
    max_epochs: int
    seed: int
    metric: str
    mode: str
    target: str
    features: Optional[tuple[str, ...]]
    fraction: float
    train_sql: str
    validate_sql: Optional[str]
    data: _Data
    definition: str = ""
    sharing: bool = True
    fitted: dict = field(default_factory=dict)  # configuration key -> (estimator, stages, metrics)
    errors: dict = field(default_factory=dict)  # trial -> why its fit or score failed
    parameters: list = field(default_factory=list)  # the statement's ? values (ON / VALIDATE ON read them)
    transforms: Optional[tuple[Transform, ...]] = None  # the model's TRANSFORM items (None: automatic preprocessing)
    model_version: int = 0  # the version of the model tuned (its hyper-parameters, TRANSFORM), 0: none

    @property
    def boosted(self) -> bool:
        return self.model_type.estimator in BOOSTED


# ---------------------------------------------------------------- data


def _rows_of(session: Session, source: exp.Expression, params: list, target: str, features, task: str,
             where: str, imputed: Sequence[str], on_null: str = "refuse") -> tuple[TrainingRows, np.ndarray]:
    """The rows of ``source`` as the estimator takes them, and each row read's hash over every column (what
    EVALUATE's fingerprint of rows is summed from)."""
    try:
        table, types, hashes = input_rows(session, source, params)
    except Error as err:  # the query's error, named for the clause it came from (as a trainable's TUNE names it)
        raise err.retold(f"{where}: {err}", line=err.line, column=err.column) from None
    rows = training_rows(table, types=types, task=task, target=target, features=features, on_null=on_null,
                         statement=where, imputed=imputed)
    return rows, hashes


def _data(session: Session, stmt: TuneModel, params: list, model_type: ModelType, features, fraction: float,
          seed: int, imputed: Sequence[str] = (), on_null: str = "refuse") -> _Data:
    """The study's rows and their split; ``imputed``: the feature columns that may be NULL (every one with
    ``on_null = 'impute'``).

    Raises:
        DataError: training_rows's, and ``null_value`` for an imputed column NULL in every training row.
    """
    target = stmt.args["target"].name
    rows, read = _rows_of(session, stmt.args["train"], params, target, features, model_type.task, "TUNE ON",
                          imputed, on_null)
    validate = stmt.args.get("validate")
    if validate is None:
        train, valid = validation_rows(rows.table.num_rows, "random", fraction, seed)
        data = _Data(rows, train, rows, valid, valid_fingerprint=hashes_fingerprint(read[rows.query_rows(valid)]))
    else:
        chosen = rows.features
        valid_rows, valid_read = _rows_of(session, validate, params, target, chosen, model_type.task,
                                          "TUNE VALIDATE ON", rows.imputed)
        if valid_rows.kinds != rows.kinds:
            raise ProgrammingError(f"TUNE: {_encoding_mismatch(rows.kinds, valid_rows.kinds)}", code="invalid_feature")
        data = _Data(rows, np.arange(rows.table.num_rows), valid_rows, np.arange(valid_rows.table.num_rows),
                     valid_fingerprint=hashes_fingerprint(valid_read))
    data.rows.check_imputed(data.train, "TUNE ON")
    data.train_fingerprint = hashes_fingerprint(read)
    data.fingerprint = rows_digest(data.rows.table.take(pa.array(data.train, pa.int64())),
                                   data.valid_rows.table.take(pa.array(data.valid, pa.int64())))
    return data


_ENCODED = {"numeric": "a number (scaled as one)", "categorical": "text or a category (one-hot encoded)",
            None: "not a feature"}


def _encoding_mismatch(on: ColumnKinds, validate: ColumnKinds) -> str:
    """Why VALIDATE ON's rows cannot be scored by models fitted on ON's: the first column encoded otherwise (its
    type in each), else the order of the columns."""
    for column in on.columns:
        if on.kind_of(column) != validate.kind_of(column):
            return (f'column "{column}" is {_ENCODED[validate.kind_of(column)]} in VALIDATE ON but '
                    f"{_ENCODED[on.kind_of(column)]} in ON: the models fitted on ON's rows encode it so; cast it to one "
                    "type in both queries.")
    return (f"VALIDATE ON's columns {validate.columns} are not in ON's order {on.columns}: select them in the same "
            "order.")


def _check_classes(data: _Data, model_type: ModelType) -> None:
    """A classifier's training rows hold two classes or more, and the validation rows none other.

    Raises:
        DataError: ``one_class``, ``unknown_label``.
    """
    if model_type.task != "classification":
        return
    assert data.rows.y is not None and data.valid_rows.y is not None  # TUNE has a TARGET
    train = set(data.rows.y[data.train].tolist())
    if len(train) < 2:
        raise DataError(f"TUNE: the TARGET has one class ({next(iter(train))!r}) in the {len(data.train)} training "
                        "rows: a classifier needs at least two.", code="one_class")
    unknown = sorted(set(data.valid_rows.y[data.valid].tolist()) - train, key=str)
    if unknown:
        raise DataError(f"TUNE: validation label {unknown[0]!r} is not among the training rows' classes.",
                        code="unknown_label")


def _preprocess(study: _Study) -> None:
    """Fit the preprocessing on the training rows once; every trial's estimator is fitted on its output."""
    data = study.data
    pipeline = build_pipeline(data.rows.kinds, None, study.model_type, study.transforms, data.rows.imputed)
    preprocess = pipeline.steps[0][1]
    data.x_train = preprocess.fit_transform(data.rows.features_frame(data.train))
    data.x_valid = preprocess.transform(data.valid_rows.features_frame(data.valid))


# ---------------------------------------------------------------- binding


def _estimator_names(space: Space, model_type: ModelType) -> Space:
    """``space`` with each hyper-parameter named as the estimator's ``get_params()`` names it (SQL names are
    matched whatever their case, and a trial's configuration shows ``C``, not ``c``)."""
    names = {k.lower(): k for k in model_type.parameters()}
    return Space(tuple((names.get(name.lower(), name), hp) for name, hp in space.params))


def _check_space(space: Space, model_type: ModelType, max_epochs: int, boosted: bool) -> None:
    known = set(model_type.parameters())
    for name, hp in space.params:
        if isinstance(hp, (StepDecay, Piecewise)):
            raise ProgrammingError(f'SEARCH: "{name}": a scikit-learn estimator takes one value for the whole fit; '
                                   "STEP_DECAY and PIECEWISE schedule torch trainables.",
                                   code="hyperparameter_not_schedulable")
        if name not in known:
            model_type.hyperparameters({name: None})  # unknown_hyperparameter, with the estimator's names
        if boosted and name in ("n_estimators", "n_iter_no_change"):
            raise ProgrammingError(f"SEARCH: {name} sets how many trees a boosted model grows, which is the study's "
                                   "budget: give the most trees as WITH (max_epochs = n); ASHA and HYPERBAND stop "
                                   "trials early by trees.", code="invalid_search_space")
    space.validate(max_epochs)


def _trees(options: OptionValues, base: dict) -> int:
    """A boosted study's tree budget: ``max_epochs`` (or ASHA's and Hyperband's ``max_t``), else the model's
    ``n_estimators``."""
    max_t = options.rest.get("max_t")
    if max_t is not None and options["max_epochs"] is not None and max_t != options["max_epochs"]:
        raise option_error("max_t", f"TUNE options max_t = {max_t!r} and max_epochs = {options['max_epochs']!r} "
                                    "contradict each other (max_t is ASHA's and Hyperband's name for max_epochs); give one")
    if base.get("n_iter_no_change") is not None:
        raise option_error("max_epochs", "a boosted study's trees are its epochs: the model's n_iter_no_change "
                                         "(early stopping) would end trials short of them.")
    return int(options["max_epochs"] or max_t or base.get("n_estimators", 100))


def _tuned_version(session: Session, stmt: TuneModel, options: OptionValues,
                   transforms: Optional[tuple[Transform, ...]], imputed: Sequence[str]) -> int:
    """The version of the model TUNE starts from (:func:`estimator_type` read its hyper-parameters, or its TRANSFORM
    and imputation under a ``model_type`` option), a FROM STUDY version's lineage parent; 0 when none is (a
    ``model_type`` over a model that was not trained in SQL, or no model of the name)."""
    name = stmt.this.model_name.lower()
    if not session.catalog.exists(name):
        return 0
    entry = session.catalog.get(name, stmt.this.version_number)
    if "model_type" not in dict(entry.options) or (options["model_type"] is not None and transforms is None
                                                   and not imputed):
        return 0
    return entry.version


def bind_estimator_study(stmt: TuneModel, session: Session, params: list, options: OptionValues,
                         model_type: ModelType, base: dict, transforms: Optional[tuple[Transform, ...]] = None,
                         imputed: Sequence[str] = ()) -> _Study:
    """The study of an estimator TUNE (reads the data; trains nothing); ``transforms``: the tuned model's
    ``TRANSFORM`` items, whose columns are the features; ``imputed``: the columns it imputes."""
    boosted = model_type.estimator in BOOSTED
    features = options["features"]
    if transforms is not None:
        if features is not None:
            raise option_error("features", f"TUNE option features: model {stmt.this.model_name} was trained with a "
                                           "TRANSFORM clause, whose columns are its features; leave features out.")
        features = transform_columns(transforms)
    for key in _TRAINABLE_ONLY:
        if key in options.given:
            raise option_error(key, f"TUNE option {key} applies to trainables (torch); a scikit-learn model type's "
                                    "trials are fitted one after another in this process.")
    algorithm = stmt.args["algorithm"].name.lower()
    if algorithm == "pbt" or (not boosted and algorithm in ("asha", "hyperband")):
        raise NotSupportedError(f"TUNE of {model_type.name} USING {algorithm.upper()}: "
                                + ("PBT exploits a member's training state, which a scikit-learn fit does not carry"
                                   if algorithm == "pbt" else "nothing to stop early: it trains once per trial")
                                + "; use GRID, RANDOM or TPE" + (", ASHA or HYPERBAND" if boosted else "") + ".",
                                code="not_supported")
    if not boosted and options["max_epochs"] not in (None, 1):
        raise option_error("max_epochs", f"TUNE option max_epochs applies to boosted models (one tree per epoch); "
                                         f"{model_type.name} trains once per trial.")
    max_epochs = _trees(options, base) if boosted else 1
    space = _estimator_names(bind_space(stmt.args["search"]), model_type)
    _check_space(space, model_type, max_epochs, boosted)
    seed = options["seed"]
    metric = metric_for(options["metric"], model_type.task)
    mode = checked_mode(metric, "max" if metric in HIGHER_IS_BETTER else "min", options["mode"])
    data = _data(session, stmt, params, model_type, features, options["validation_fraction"], seed,
                 (*imputed, *imputed_columns(transforms or ())), "impute" if options["on_null"] == "impute" else "refuse")
    for transform in transforms or ():  # the rows TUNE reads may type a column otherwise than the model's did
        check_transform(transform, data.rows.kinds.kind_of(transform.column), model_type.tree_based, "TUNE")
    name = (f"{stmt.this.model_name}_study" if options["study_name"] is None else options["study_name"]).lower()
    if not _STUDY_NAME.match(name):
        raise option_error("study_name", "TUNE option study_name must be a name (letters, digits and underscores, "
                                         f"starting with a letter), not {name!r}.")
    _check_classes(data, model_type)
    validate = stmt.args.get("validate")
    study = _Study(name, stmt.this.model_name.lower(), model_type, base, space, stmt.args["algorithm"].name.lower(),
                   dict(options.rest), max_epochs, seed, metric, mode, stmt.args["target"].name,
                   features, options["validation_fraction"], stmt.args["train"].sql(dialect=msql.DIALECT),
                   validate.sql(dialect=msql.DIALECT) if validate is not None else None, data, transforms=transforms)
    study.sharing = options["execution"] == "stages"
    study.model_version = _tuned_version(session, stmt, options, transforms, imputed)
    study.definition = hashlib.sha256(json.dumps(
        [model_type.estimator, sorted(base.items()), space.to_json(), study.algorithm,
         sorted(study.algorithm_options.items()), max_epochs, metric, mode, seed, data.fingerprint,
         options["execution"], study.model, study.target, list(data.rows.kinds.columns),
         *([transforms_json(transforms)] if transforms is not None else []),
         *([list(data.rows.imputed)] if data.rows.imputed else [])],
        default=str).encode()).hexdigest()
    return study


# ---------------------------------------------------------------- training


def _key(config: dict) -> str:
    return json.dumps(sorted(config.items()), default=str)


def _params(study: _Study, config: dict) -> dict:
    resolved = study.space.resolve(config)
    return study.model_type.hyperparameters({**study.base, **resolved})


def _train(study: _Study, config: dict, epochs: int) -> tuple[list[float], int]:
    """The trial's metric after each of its ``epochs`` epochs, and the epochs (trees) fitted now."""
    key = _key(config)
    if not study.sharing:
        study.fitted.pop(key, None)  # execution = 'trials': every request trains from scratch (the baseline)
    data = study.data
    assert data.rows.y is not None and data.valid_rows.y is not None  # TUNE has a TARGET
    y_train = data.rows.y[data.train]
    y_valid = data.valid_rows.y[data.valid]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not study.boosted:
            if key not in study.fitted:
                model = study.model_type.build(_params(study, config), study.seed).fit(data.x_train, y_train)
                study.fitted[key] = (None, 1, [score(model, data.x_valid, y_valid, study.metric,
                                                     study.model_type.task)])
                return study.fitted[key][2], 1
            return study.fitted[key][2], 0
        model, grown, metrics = study.fitted.get(key, (None, 0, []))
        if grown >= epochs:
            return metrics[:epochs], 0
        if model is None:
            model = study.model_type.build({**_params(study, config), "warm_start": True}, study.seed)
        model.set_params(n_estimators=epochs)
        model.fit(data.x_train, y_train)
        metrics = metrics + list(staged_scores(model, data.x_valid, y_valid, study.metric, study.model_type.task,
                                               grown))
        study.fitted[key] = (model, epochs, metrics)
        return metrics[:epochs], epochs - grown


def run_study(study: _Study, progress: Optional[Callable[[dict], Any]] = None) -> tuple[Any, dict, int, int]:
    """Drive the algorithm to the end: (the algorithm, trial -> (config, metrics), epochs trained, requested).
    ``progress``: the connection's hook, sent TUNE's messages (:mod:`modelsql.progress`) after every trial."""
    meter = tune_meter(progress, study.name)
    ok = False
    try:
        out = _run(study, meter)
        ok = True
        return out
    finally:
        meter.finish(ok=ok)


def _run(study: _Study, meter: Meter) -> tuple[Any, dict, int, int]:
    algorithm = make_algorithm(study.algorithm, study.space, max_epochs=study.max_epochs, mode=study.mode,
                               seed=study.seed, study_name=study.name, options=study.algorithm_options)
    _preprocess(study)
    trials: dict[int, tuple[dict, list[float]]] = {}
    trained = requested = 0
    while not algorithm.finished:
        requests = algorithm.ask()
        if not requests:
            break
        for request in sorted(requests, key=lambda r: r.trial):
            config = dict(request.config)
            requested += request.epochs
            try:
                metrics, fitted = _train(study, config, request.epochs)
            except Error:
                raise  # the statement's own error (a metric the model cannot give): not this trial's
            except Exception as exc:  # noqa: BLE001 - scikit-learn refused this configuration: the trial fails
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                study.errors[request.trial] = f"{type(exc).__name__}: {text}"
                trials[request.trial] = (config, [])
                algorithm.tell_failed(request.trial, study.errors[request.trial])
                continue
            trained += fitted
            trials[request.trial] = (config, metrics)
            algorithm.tell(request.trial, metrics)
        best, value = _best(study, trials)
        meter.update(len(trials), len(trials), trials=len(trials), trials_done=len(trials), best_trial=best,
                     best_metric=value, epochs_trained=trained, epochs_requested=requested)
    if trials and len(study.errors) == len(trials):
        first = study.errors[min(study.errors)]
        raise ProgrammingError(f"TUNE: every trial failed; the first: {first}", code="invalid_hyperparameter")
    return algorithm, trials, trained, requested


# ---------------------------------------------------------------- the statement


def _best(study: _Study, trials: dict) -> tuple[Optional[int], Optional[float]]:
    best: Optional[int] = None
    value: Optional[float] = None
    for trial, (_, metrics) in sorted(trials.items()):
        if not metrics or metrics[-1] != metrics[-1]:  # failed, or NaN (a metric that cannot be computed)
            continue
        last = metrics[-1]
        if value is None or (last > value if study.mode == "max" else last < value):
            best, value = trial, last
    return best, value


def _study_row(study: _Study, status: str, best: Optional[int], value: Optional[float], done: int, trained: int,
               requested: int) -> StudyRow:
    options = dict(study.algorithm_options, model_type=study.model_type.name, estimator=study.model_type.estimator,
                   base=study.base, features=list(study.data.rows.features), validation_fraction=study.fraction,
                   in_features=len(study.data.rows.kinds.columns), data=study.data.fingerprint,
                   parameters=kept_parameters(study.parameters),
                   **({"train_fingerprint": study.data.train_fingerprint} if study.data.train_fingerprint else {}),
                   **({"transforms": transforms_json(study.transforms)} if study.transforms is not None else {}),
                   **({"imputed": list(study.data.rows.imputed)} if study.data.rows.imputed else {}))
    return StudyRow(study.name, study.model, study.model_version, study.algorithm, study.metric, study.mode, study.max_epochs,
                    study.seed, study.space.to_json(), json.dumps(options, default=str), study.train_sql,
                    study.validate_sql, study.target, "", study.definition, status, None, best, value, done, trained,
                    requested)


def tune_estimator(stmt: TuneModel, session: Session, params: list, options: OptionValues, model_type: ModelType,
                   base: dict, transforms: Optional[tuple[Transform, ...]] = None, imputed: Sequence[str] = ()
                   ) -> Result:
    """Run an estimator study (see the module) and record it; one row, TUNE's columns."""
    study = bind_estimator_study(stmt, session, params, options, model_type, base, transforms, imputed)
    study.parameters = list(params)
    existing = _existing(session, study, bool(stmt.args.get("resume")))
    if existing is not None:
        return study_result(session, existing)
    claim_study(session, _study_row(study, "running", None, None, 0, 0, 0))
    try:
        _run_and_write(session, study)
    except BaseException:
        with catalog_write(session) as catalog:
            catalog.studies.drop_study(study.name)
        raise
    finally:
        release_study(study.name)
    return study_result(session, session.catalog.studies.study(study.name))


def _run_and_write(session: Session, study: _Study) -> None:
    """Run the claimed study and write its trials and its finished row."""
    algorithm, trials, trained, requested = run_study(study, session.progress)
    best, value = _best(study, trials)
    with catalog_write(session) as catalog:
        for trial, (config, metrics) in sorted(trials.items()):
            catalog.studies.put_trial(TrialRow(
                study.name, trial, json.dumps(config, default=str),
                json.dumps(study.space.sequence(config, len(metrics)), default=str), algorithm.status(trial),
                len(metrics), tuple(metrics), metrics[-1] if metrics else None,
                (max if study.mode == "max" else min)(metrics) if metrics else None, None, None,
                study.errors.get(trial)))
        catalog.studies.put_study(_study_row(study, "finished", best, value, len(trials), trained, requested))


def _existing(session: Session, study: _Study, resume: bool) -> Any:
    """The stored finished study of that name and definition (its result is the statement's), else None (a run of
    it that did not finish is claimed again: :func:`~.inprocess.claim_study`).

    Raises:
        ProgrammingError: ``study_definition_changed`` (another definition under the name); ``study_not_found``
            (``RESUME`` of a study never run).
    """
    existing = session.catalog.studies.study(study.name)
    if existing is None:
        if resume:
            raise session.catalog.studies.not_found(study.name)
        return None
    if existing.definition == study.definition and existing.status != "finished":
        return None
    if existing.definition != study.definition:
        stored = json.loads(existing.options)
        what = ("another model or model type" if existing.model != study.model or
                stored.get("estimator") != study.model_type.estimator else
                "the data or the columns changed" if stored.get("data") != study.data.fingerprint
                else "the model's hyper-parameters, which the study starts from, changed"
                if stored.get("base", {}) != study.base
                else "SEARCH, USING or the options differ")
        raise ProgrammingError(f'Study "{study.name}" exists with another definition ({what}): DROP STUDY '
                               f"{study.name} first, or name this one with WITH (study_name = '...').",
                               code="study_definition_changed")
    return existing


# ---------------------------------------------------------------- CREATE MODEL ... FROM STUDY


def create_from_estimator_study(session: Session, stmt: Any, study: Any, trial: Any
                                ) -> Optional[tuple[int, EvaluationRow]]:
    """``CREATE [OR REPLACE] MODEL m FROM STUDY s [TRIAL n]`` of an estimator study: the trial's configuration and
    trees fitted (with the preprocessing) on the study's training rows, stored like ``CREATE MODEL ... AS``'s, its
    origin the study and trial, EVALUATEd on the study's validation rows (recorded). The new version and its
    evaluation; None when IF NOT EXISTS found the model.

    Raises:
        ProgrammingError: ``study_definition_changed`` (the study's rows changed since it ran).
    """
    options = json.loads(study.options)
    name = stmt.this.model_name.lower()
    if ddl.existing_model(session, name, bool(stmt.args.get("replace")), bool(stmt.args.get("exists"))):
        return None
    model_type = resolve_model_type(options["model_type"])
    source = msql.parse(f"SELECT * FROM {study.train_sql}")[0].args["from_"].this
    validate = (msql.parse(f"SELECT * FROM {study.validate_sql}")[0].args["from_"].this
                if study.validate_sql else None)
    node = TuneModel(this=stmt.this, train=source, validate=validate, target=exp.to_identifier(study.target))
    try:
        data = _data(session, node, study.parameters, model_type, tuple(options["features"]),
                     options["validation_fraction"], study.seed, tuple(options.get("imputed") or ()))
    except Error as err:  # (a table dropped or changed since the TUNE): said as this statement's (the excerpt, of
        # the study's query, dropped)
        raise err.retold(f"CREATE MODEL {name} FROM STUDY {study.name}: the study's rows no longer read, and its trial "
                         f"is fitted again on them: {without_excerpt(str(err))}") from None
    if data.fingerprint != options.get("data"):
        raise ProgrammingError(f'CREATE MODEL {name} FROM STUDY {study.name}: the rows of the study\'s ON / VALIDATE ON '
                               "changed since it ran, so its trial would be fitted on other rows: TUNE again (or DROP "
                               "STUDY and TUNE).", code="study_definition_changed")
    config = json.loads(trial.config)
    space = Space.from_json(study.space)
    params = model_type.hyperparameters({**options.get("base", {}), **space.resolve(config)})
    if model_type.estimator in BOOSTED:
        params["n_estimators"] = trial.epochs
    transforms = transforms_from_json(options.get("transforms"))
    pipeline = build_pipeline(data.rows.kinds, model_type.build(params, study.seed), model_type, transforms,
                              data.rows.imputed)
    assert data.rows.y is not None  # TUNE has a TARGET
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline.fit(data.rows.features_frame(data.train), data.rows.y[data.train])
    sample = data.rows.features_frame(data.train[:256])
    version = ddl.import_model(
        session, name, pipeline, example_input=sample, replace=bool(stmt.args.get("replace")),
        if_not_exists=bool(stmt.args.get("exists")),
        tolerance=conversion_tolerance(model_type.task, data.rows.y[data.train]),
        options={"model_type": model_type.name, "estimator": model_type.estimator.replace(":", "."),
                 "task": model_type.task, "hyperparameters": hyperparameters_text(params),
                 "target": study.target, "study": study.name, "trial": str(trial.trial),
                 **({"transforms": options["transforms"], "transform": transforms_text(transforms)}
                    if transforms is not None else {}),
                 **({"imputed": json.dumps(list(data.rows.imputed))} if data.rows.imputed else {})},
        origin=study_origin(session, study, trial, study.parameters))
    held = "VALIDATE ON" if study.validate_sql else "validation rows held out of"
    rows = data.valid_rows.table.take(pa.array(data.valid, pa.int64()))
    try:
        record = record_evaluation(
            session, "model", name, version.version, rows, study.target,
            input_text=f"STUDY {study.name} ({held} {study.validate_sql or study.train_sql})",
            options={"study": study.name, "trial": trial.trial},
            called_as=f"CREATE MODEL {name} FROM STUDY {study.name}, evaluating it with EVALUATE",
            fingerprint=data.valid_fingerprint)
    except BaseException:
        catalog_write_retrying(session, lambda: session.catalog.drop(name, version.version, missing_ok=True))
        raise
    return version.version, record
