"""``TUNE MODEL ...``, ``EXPLAIN TUNE ...``, ``SHOW STUDIES``, ``DESCRIBE STUDY s`` and ``DROP STUDY s``.

TUNE binds the statement (:func:`bind_tune`: the trainable, the data, the space, the algorithm and
its options), then runs the study as stage trees (:class:`~modelsql.engine.tune.run.StudyRun`).
Like the other model statements it commits the session's open transaction first; it then commits
its own progress stage by stage, so another connection of this process sees the study's rows while
it runs (DuckDB lets one process write a database file). Re-running a study with the same definition
(or adding ``RESUME``) resumes it: only what was not finished trains.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import TYPE_CHECKING, Iterable

from sqlglot import exp

from modelsql.estimators.scoring import checked_mode
from modelsql.recursive.trees import Trees
from modelsql.errors import Error, NotSupportedError, ProgrammingError
from modelsql.sql import TABLE_FUNCTIONS
from modelsql.sql.evaluate import EvaluationTable
from modelsql.sql.predict import PredictTable
from modelsql.sql.tune import DescribeStudy, DropStudy, ShowStudies, TuneModel
from modelsql.tuning.algorithms import ALGORITHMS, Algorithm, check_algorithm, make_algorithm
from modelsql.tuning.space import Space
from modelsql.engine.handlers import catalog_write, catalog_write_retrying, handles
from modelsql.engine.options import OptionValues, option_error, option_of, sql_text
from modelsql.engine.options.declared import TUNE as TUNE_OPTIONS
from modelsql.engine.tune.round_plan import RoundPlan
from modelsql.engine.result import Result
from modelsql.engine.tune.stage_tree import tune_stage_tree
from modelsql.engine.models.trainables import register, trainable_for_tune
from modelsql.engine.training_features import check_query_columns, feature_option, input_keys
from modelsql.engine.tune.checks import check_space_values, check_threads, probe_factory, training_device
from modelsql.engine.tune.data import load_study_data
from modelsql.engine.tune.estimators import estimator_type, tune_estimator
from modelsql.engine.tune.objective import tune_objective
from modelsql.engine.tune.result import study_result
from modelsql.engine.tune.run import StudyRun, load_tree
from modelsql.engine.tune.running import RUNNING, STARTING
from modelsql.engine.tune.spec import TRAINER_VERSION, TRAINING_NAMES, StudySpec, bind_space, device_part, digest_of, trainable_defaults

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["bind_tune", "explain_tune", "relation_sql", "RUNNING"]


_METRICS = {"val_loss": "min", "val_accuracy": "max", "train_loss": "min"}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

MAX_EPOCHS = 100_000
"""The most epochs a study may ask for."""


def relation_sql(node: exp.Expression, what: str, statement: str = "TUNE") -> str:
    """``SELECT * FROM <the input>`` of ``ON TABLE t`` / ``ON (query)`` (TUNE's and FINETUNE's training data).

    Raises:
        NotSupportedError: ``tune_input_predict`` for an input with a PREDICT in it, or another table function of
            modelsql's (``EVALUATE(...)``, ``CONFUSION_MATRIX(...)``, ``ROC_CURVE(...)``, ``(SHOW MODELS)``), which
            DuckDB alone cannot read.
    """
    found = node.find(*TABLE_FUNCTIONS)
    if found is not None:
        name = ("PREDICT" if isinstance(found, PredictTable) else f"{found.args['function']}(...)"
                if isinstance(found, EvaluationTable) else "a listing of modelsql's (SHOW ..., DESCRIBE ...)")
        raise NotSupportedError(f"{statement} {what}: an input with {name} is not supported; materialize it with "
                                "CREATE TABLE ... AS first.", code="tune_input_predict")
    return f"SELECT * FROM {node.sql(dialect='duckdb')}"


def _options(stmt: TuneModel, params: list) -> OptionValues:
    """The ``WITH`` options: those of every algorithm (:data:`TUNE_OPTIONS`) checked, the algorithm's own in
    ``.rest`` (its builder checks them).

    Raises:
        ProgrammingError: ``duplicate_option``, ``unknown_option`` (neither TUNE's nor the algorithm's),
            ``invalid_option``.
        NotSupportedError: ``parameter_not_supported`` (a ``?`` in an option or in SEARCH).
    """
    own: Iterable[str] = ALGORITHMS[check_algorithm(stmt.args["algorithm"].name)][0]  # (unknown_algorithm first)
    options = TUNE_OPTIONS.parse(stmt, params, where="TUNE", extra=own)
    search = [i.this.name for i in stmt.args["search"] if i.expression.find(exp.Placeholder) is not None]
    if search:
        raise NotSupportedError(f"TUNE: a parameter (?) in {search[0]!r}: parameters are supported only "
                                "inside ON (query) and VALIDATE ON (query); write the value itself",
                                code="parameter_not_supported")
    return options


def _max_epochs(options: OptionValues) -> int:
    max_t = options.rest.get("max_t")
    if max_t is not None and "max_epochs" in options.given and max_t != options["max_epochs"]:
        raise option_error("max_t", f"TUNE options max_t = {max_t!r} and max_epochs = {options['max_epochs']!r} "
                           "contradict each other (max_t is ASHA's and Hyperband's name for max_epochs); give one")
    if options["max_epochs"] is not None:
        return options["max_epochs"]
    return TUNE_OPTIONS["max_epochs"].check(10 if max_t is None else max_t, "TUNE (max_t)")


def _study_name(options: OptionValues, trainable) -> str:
    name = f"{trainable.name}_study" if options["study_name"] is None else options["study_name"]
    if not _NAME.match(name):
        raise option_error("study_name", "TUNE option study_name must be a name (letters, digits and underscores, "
                                         f"starting with a letter), not {sql_text(name)}.")
    return name.lower()


def _metric(options: OptionValues, task: str) -> tuple[str, str]:
    metric = options["metric"]
    if metric not in _METRICS:
        raise option_error("metric", f"TUNE option metric = {metric!r} scores scikit-learn model types; a trainable's "
                                     f"study optimizes {', '.join(map(repr, _METRICS))}.")
    if metric == "val_accuracy" and task == "regression":
        raise option_error("metric", "TUNE option metric = 'val_accuracy' needs a class label TARGET; this TARGET is "
                                     "a number (regression): use 'val_loss'")
    return metric, checked_mode(metric, _METRICS[metric], options["mode"])


def bind_tune(stmt: TuneModel, session: Session, params: list) -> StudySpec:
    """The :class:`StudySpec` of a TUNE statement (reads the data; trains nothing, registers nothing); an error
    about an option, a hyper-parameter or the TARGET points at it in the SQL (a ``LINE n:`` excerpt)."""
    try:
        return _bind_tune(stmt, session, params)
    except Error as err:
        raise session.pointed(err, _node_of(stmt, err)) from None


def _node_of(stmt: TuneModel, err: Error):
    """The part of the statement ``err`` is about: a ``WITH`` option, a SEARCH item, or the TARGET."""
    option = err.option
    hp = err.hyperparameter or option  # (a model type's hyper-parameter errors name it as an option)
    written = option_of(stmt.args.get("options"), err)
    if written is not None:
        return written
    if hp is not None:
        return next((i for i in stmt.args["search"] if i.this.name.lower() == hp.split(".")[0].lower()), None)
    if getattr(err, "target", False):
        return exp.EQ(this=stmt.args["target"])
    return None


def _bind_tune(stmt: TuneModel, session: Session, params: list) -> StudySpec:
    """The work of :func:`bind_tune`.

    Raises:
        ProgrammingError: ``model_not_found`` / ``model_not_trainable``, ``invalid_search_space``,
            ``unknown_option`` / ``invalid_option``, ``column_not_found``, ``hyperparameter_not_schedulable``,
            ``invalid_hyperparameter``, ``invalid_factory`` / ``invalid_factory_params``.
        NotSupportedError: ``parameter_not_supported`` (a ``?`` outside ON / VALIDATE ON).
        DataError: bad data (see :func:`~modelsql.engine.tune.data.load_study_data`).
    """
    ref = stmt.this
    trainable = trainable_for_tune(session, ref.model_name.lower(), ref.version_number, ref)
    options = _options(stmt, params)
    if options["on_null"] != "error":
        raise option_error("on_null", "TUNE option on_null = 'impute' applies to scikit-learn model types (their "
                                      "preprocessing imputes); a trainable's rows may hold no NULL.")
    training_device(options["device"], "TUNE")  # a device that is not there fails before the data is read
    max_epochs = _max_epochs(options)
    space = bind_space(stmt.args["search"])
    space.validate(max_epochs)
    _check_schedulable(space, max_epochs)
    check_space_values(space, max_epochs)
    seed = options["seed"]
    target = stmt.args["target"].name
    features = feature_option(options["features"], target)
    validate = stmt.args.get("validate")
    train_sql = relation_sql(stmt.args["train"], "ON")
    validate_sql = relation_sql(validate, "VALIDATE ON") if validate is not None else None
    check_query_columns(session, stmt.args["train"], params, "TUNE ON")
    if validate is not None:
        check_query_columns(session, validate, params, "TUNE VALIDATE ON")
    data = load_study_data(session, train_sql, validate_sql, target, features, options["validation_fraction"], seed,
                           params, input_keys(session, stmt.args["train"]))
    metric, mode = _metric(options, data.data.task)
    workers, threads = options["workers"], options["threads"]
    execution, executor = options["execution"], options["executor"]
    check_threads(threads, workers, executor)
    device = training_device(options["device"], "TUNE", executor=executor, trees=isinstance(data.data.x, Trees))
    budget = options["time_budget_s"]
    defaults = trainable_defaults(trainable)
    probe_factory(space, trainable.factory, defaults, data.data.x.shape[1], data.data.n_outputs,
                  trees=isinstance(data.data.x, Trees))
    algorithm = stmt.args["algorithm"].name.lower()
    tree = digest_of("tree", TRAINER_VERSION, trainable.name, trainable.version, trainable.code_digest,
                     trainable.factory, list(trainable.options), data.digest, seed, threads, *device_part(device))
    spec = StudySpec(
        name=_study_name(options, trainable), trainable=trainable, algorithm=algorithm,
        algorithm_options=dict(options.rest),
        space=space, max_epochs=max_epochs, seed=seed, metric=metric, mode=mode, threads=threads, workers=workers,
        executor=executor, address=options["address"], sharing=execution == "stages", train_sql=train_sql,
        validate_sql=validate_sql, target=target, features=data.features, data=data.data, labels=data.labels,
        base_params=tuple(sorted(defaults.items())), time_budget_s=budget, statement=session.text, tree=tree,
        definition=digest_of(tree, space.to_json(), algorithm, sorted(options.rest.items()), max_epochs, metric, mode,
                             execution),
        change_points=frozenset(space.change_points(max_epochs)), device=device,
        validation_fraction=options["validation_fraction"], parameters=tuple(params),
        train_fingerprint=data.train_fingerprint, data_digest=data.digest)
    return dataclasses.replace(spec, search=_build_algorithm(spec))


def _check_schedulable(space: Space, max_epochs: int) -> None:
    """Only training hyper-parameters may change over epochs (a factory argument builds the model once)."""
    for name, param in space.params:
        if name not in TRAINING_NAMES and type(param).__name__ in ("StepDecay", "Piecewise"):
            raise ProgrammingError(
                f'SEARCH: "{name}" is a factory argument (it builds the model), so it cannot change over epochs; '
                f"only {', '.join(sorted(TRAINING_NAMES - {'optimizer'}))} can.", code="hyperparameter_not_schedulable")
        if name == "optimizer" and type(param).__name__ in ("StepDecay", "Piecewise"):
            raise ProgrammingError('SEARCH: "optimizer" cannot change over epochs.',
                                   code="hyperparameter_not_schedulable")


def _build_algorithm(spec: StudySpec) -> Algorithm:
    """The study's search algorithm, built once (its builder checks its options' values: ``invalid_option``)."""
    return make_algorithm(spec.algorithm, spec.space, max_epochs=spec.max_epochs, mode=spec.mode, seed=spec.seed,
                          study_name=spec.name, options=spec.algorithm_options)


# ---------------------------------------------------------------- executing


def _executor(spec: StudySpec):
    if spec.executor == "ray":
        from modelsql.tuning.ray_executor import ray_executor

        return ray_executor(spec.workers, spec.address, threads=spec.threads)
    from modelsql.tuning.executor import local_executor
    from modelsql.tuning.inprocess_executor import InProcessExecutor

    pool = local_executor(spec.workers)
    return InProcessExecutor(pool) if _trains_here(spec) else pool


def _trains_here(spec: StudySpec) -> bool:
    """The study's stages train in this process where they can, as Optuna's do: one local worker on the CPU."""
    return spec.executor == "local" and spec.workers == 1 and spec.device == "cpu"


def _check_existing(session: Session, spec: StudySpec, resume: bool) -> None:
    studies = session.catalog.studies
    if spec.name in RUNNING:
        raise ProgrammingError(f'Study "{spec.name}" is running now (in this process).', code="study_running")
    with catalog_write(session):
        studies.mark_interrupted(sorted(RUNNING))
    old = studies.study(spec.name)
    if old is None:
        if resume:
            raise studies.not_found(spec.name)
        return
    if old.definition != spec.definition:
        old_device = _study_device(old)
        what = ("the factory's source changed (trainable version " f"{old.model_version} -> {spec.trainable.version})"
                if (old.model, old.model_version) != (spec.trainable.name, spec.trainable.version)
                else f"it trained on {old_device}, this one on {spec.device}"
                if device_part(old_device) != device_part(spec.device)
                else "the data changed" if old.tree != spec.tree
                else "SEARCH, USING or the options differ")
        raise ProgrammingError(
            f'Study "{spec.name}" exists with another definition ({what}): DROP STUDY {spec.name} first, or name '
            "this one with WITH (study_name = '...').", code="study_definition_changed")


def _study_device(row) -> str:
    """The device a stored study trained on (its options JSON says so for CUDA)."""
    try:
        return str(json.loads(row.options or "{}").get("device", "cpu"))
    except (TypeError, ValueError):
        return "cpu"


@handles(TuneModel)
def _tune(stmt: TuneModel, session: Session, params: list) -> Result:
    # (not catalog_write: a long run that holds no catalog transaction; it writes in many of its own, then marks
    # cached plans stale in the finally below)
    session.check_writable()
    session.commit()
    try:
        options = _options(stmt, params)
        if options["objective"] is not None:
            return tune_objective(stmt, session, params, options)
        estimator = estimator_type(session, stmt.this.model_name.lower(), stmt.this.version_number, options)
        if estimator is not None:
            return tune_estimator(stmt, session, params, options, *estimator)
    except Error as err:
        raise session.pointed(err, _node_of(stmt, err)) from None
    finally:
        session.changed()
    spec = bind_tune(stmt, session, params)
    with STARTING:
        _check_existing(session, spec, bool(stmt.args.get("resume")))
        RUNNING.add(spec.name)
    try:
        register(session, spec.trainable)
        row = StudyRun(session, spec, _executor(spec), getattr(session, "progress", None)).run()
    finally:
        RUNNING.discard(spec.name)
        session.changed()
    return study_result(session, row)


def _describe(*columns: tuple[str, str]) -> list[tuple]:
    return [(name, kind, None, None, None, None, True) for name, kind in columns]


# ---------------------------------------------------------------- EXPLAIN TUNE


def explain_tune(stmt: TuneModel, session: Session, params: list) -> Result:
    """``EXPLAIN TUNE ...``: the stage tree of the study's first round, planned (nothing trains), with its
    estimated cost against trial-based execution (epochs, and time at the measured or a default rate)."""
    try:
        options = _options(stmt, params)
    except Error as err:
        raise session.pointed(err, _node_of(stmt, err)) from None
    if options["objective"] is not None or estimator_type(session, stmt.this.model_name.lower(),
                                                          stmt.this.version_number, options):
        raise NotSupportedError("EXPLAIN TUNE shows a trainable's stage tree; a scikit-learn model type's or a Python "
                                "objective's study has none to plan (its trials run one after another).",
                                code="explain_not_supported")
    spec = bind_tune(stmt, session, params)
    assert spec.search is not None  # bind_tune builds it
    requests = spec.search.ask()
    tree = load_tree(session.catalog, spec.tree)
    targets = tuple(tree.insert(r.sequence) for r in requests)
    plan = tune_stage_tree(RoundPlan(tree, targets, spec.change_points))
    lines = _render_round(spec, requests, plan, session.catalog.studies.epoch_seconds(spec.tree))
    old = session.catalog.studies.study(spec.name)
    if old is not None and old.definition != spec.definition:
        lines.insert(1, f'  note: study "{spec.name}" exists with another definition: running this statement fails '
                        "(study_definition_changed) unless it is dropped or given another study_name")
    elif old is not None:
        lines.insert(1, f'  note: study "{spec.name}" exists ({old.status}): running this statement resumes it')
    return Result(session.duck, description=_describe(("explain_key", "VARCHAR"), ("explain_value", "VARCHAR")),
                  rows=[("modelsql_tune", "\n".join(lines))])


def _where_stages_train(spec: StudySpec) -> str:
    """Where the study's stages train (:func:`_executor`), as EXPLAIN TUNE says it."""
    if spec.executor == "ray":
        return "Ray tasks"
    if _trains_here(spec):
        return "in this process, or a worker process while another training holds it"
    return f"worker processes on {spec.device}"


def _render_round(spec: StudySpec, requests, plan, epoch_seconds) -> list[str]:
    trial_epochs = sum(len(r.sequence) for r in requests)
    stage_epochs = sum(len(s.nodes) for t in plan.tasks for s in t.stages)
    critical = max((t.critical for t in plan.tasks), default=0)
    stage_time = max(critical, math.ceil(stage_epochs / spec.workers)) if plan.tasks else 0
    trial_time = math.ceil(trial_epochs / spec.workers) if requests else 0
    rate = (f"at {epoch_seconds:.3g} s per epoch (measured in this tree): {stage_time * epoch_seconds:.3g} s vs "
            f"{trial_time * epoch_seconds:.3g} s" if epoch_seconds else "no epoch of this tree timed yet")
    lines = [f"Tune study={spec.name} model={spec.trainable.name} v{spec.trainable.version} "
             f"algorithm={spec.algorithm} max_epochs={spec.max_epochs} metric={spec.metric} ({spec.mode}) "
             f"workers={spec.workers} ({_where_stages_train(spec)})",
             f"  first round: {len(requests)} trial(s), {trial_epochs} epoch(s) trial-based; stage tree: "
             f"{stage_epochs} epoch(s) in {sum(len(t.stages) for t in plan.tasks)} stage(s), "
             f"{plan.reused_epochs} already trained",
             f"  estimated: {_ratio(trial_epochs, stage_epochs)} fewer epochs; about {stage_time} epoch(s) of wall "
             f"time over {spec.workers} worker(s) (critical path {critical}) vs {trial_time} trial-based; {rate}",
             "  (later rounds depend on the metrics: the algorithm decides after each round)"]
    for task in plan.tasks:
        for stage in task.stages:
            start = "scratch" if stage.start.is_root else f"epoch {stage.start.epoch + 1}"
            first, last = stage.nodes[0], stage.nodes[-1]
            hp = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in first.hp)
            lines.append(f"  Stage task={task.id} after={task.after} epochs=[{first.epoch}, {last.epoch + 1}) "
                         f"from {start} critical={task.critical} {hp}"
                         + (f" recomputed={stage.recomputed}" if stage.recomputed else ""))
    return lines


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}x" if b else "nothing to train, all"


# ------------------------------------------------------------ SHOW / DESCRIBE


@handles(ShowStudies, reads_only=True)
def _show(stmt: ShowStudies, session: Session, params: list) -> Result:
    session.begin_if_needed()
    session.run("SELECT s.name, s.model, s.algorithm, s.status, count(t.trial)::INTEGER AS trials, s.trials_done, "
                "s.best_trial, s.best_metric, s.metric, s.epochs_trained, s.epochs_requested, "
                "CASE WHEN s.epochs_trained > 0 THEN s.epochs_requested / s.epochs_trained END AS steps_ratio, "
                "s.updated_at FROM modelsql.studies s LEFT JOIN modelsql.trials t ON t.study = s.name "
                "GROUP BY ALL ORDER BY s.name", None)
    return session.duckdb_result("SELECT")


@handles(DescribeStudy, reads_only=True)
def _describe_study(stmt: DescribeStudy, session: Session, params: list) -> Result:
    """One row per trial: trial, status, epochs, metric, best_metric, config, error, and ``features``
    (VARCHAR[]: the columns the study fed its models, the same on every row)."""
    name = stmt.this.name.lower()
    study = session.catalog.studies.study(name)
    if study is None:
        raise session.catalog.studies.not_found(name)
    session.begin_if_needed()
    session.run("SELECT trial, status, epochs, metric, best_metric, config, error, ?::VARCHAR[] AS features "
                "FROM modelsql.trials WHERE study = ? ORDER BY trial", [_study_features(study), name])
    return session.duckdb_result("SELECT")


def _study_features(row) -> list[str]:
    """The feature columns a stored study trained on (its options JSON keeps them)."""
    try:
        return [str(f) for f in json.loads(row.options or "{}").get("features") or []]
    except (TypeError, ValueError):
        return []


@handles(DropStudy)
def _drop_study(stmt: DropStudy, session: Session, params: list) -> Result:
    session.check_writable()
    name = stmt.this.name.lower()
    if name in RUNNING:
        raise ProgrammingError(f'Study "{name}" is running now.', code="study_running")
    # looked up inside the write, retried when another connection's write conflicts (two DROPs at once)
    digests = catalog_write_retrying(session, lambda: session.catalog.studies.drop_study(name))
    if digests is None:
        if stmt.args.get("exists"):
            return Result(session.duck, rowcount=0)
        raise session.catalog.studies.not_found(name)
    # after the commit (the catalog never names a missing blob); the references are read under the store's sweep
    # lock, after the pending blobs, so a blob another connection commits meanwhile is kept
    session.store.discard(digests, session.catalog.referenced_digests)
    return Result(session.duck, rowcount=1)
