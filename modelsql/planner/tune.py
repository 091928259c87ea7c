"""``TUNE MODEL ...``, ``EXPLAIN TUNE ...``, ``SHOW STUDIES``, ``DESCRIBE STUDY s`` and ``DROP STUDY s``.

TUNE binds the statement (:func:`bind_tune`: the trainable, the data, the space, the algorithm and
its options), then runs the study as stage trees (:class:`~modelsql.planner.tune_run.StudyRun`).
Like the other model statements it commits the session's open transaction first; it then commits
its own progress stage by stage, so another connection of this process sees the study's rows while
it runs (DuckDB lets one process write a database file). Re-running a study with the same definition
(or adding ``RESUME``) resumes it: only what was not finished trains.
"""

from __future__ import annotations

import math
from typing import Any

from sqlglot import exp

from ..errors import NotSupportedError, ProgrammingError
from ..sql.nodes import DescribeStudy, DropStudy, PredictTable, ShowStudies, TuneModel
from ..tuning.algorithms import make_algorithm
from ..tuning.space import Space
from .handlers import run_statement
from .options import no_repeats, value
from .plan import RoundPlan
from .result import Result
from .rules import TUNE_RULES, apply_rules
from .trainables import trainable_for_tune
from .tune_data import load_study_data
from .tune_run import StudyRun, load_tree
from .tune_spec import (COMMON_OPTIONS, TRAINER_VERSION, TRAINING_NAMES, StudySpec, bind_space, digest_of,
                        trainable_defaults)

__all__ = ["bind_tune", "explain_tune", "RUNNING"]

RUNNING: set[str] = set()
"""Names of the studies this process is running now (others found ``running`` in the catalog are dead)."""

_METRICS = {"val_loss": "min", "val_accuracy": "max", "train_loss": "min"}


def _relation_sql(node: exp.Expression, what: str) -> str:
    if node.find(PredictTable) is not None:
        raise NotSupportedError(f"TUNE {what}: an input with PREDICT is not supported; materialize it with "
                                "CREATE TABLE ... AS first.", code="tune_input_predict")
    return f"SELECT * FROM {node.sql(dialect='duckdb')}"


def _options(stmt: TuneModel, params: list) -> dict[str, Any]:
    no_repeats(stmt.args.get("options"), f"TUNE MODEL {stmt.this.model_name}")
    return {k.lower(): value(v, params) for k, v in stmt.option_values.items()}


def _int_option(options: dict, key: str, default: int, low: int = 1) -> int:
    raw = options.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < low:
        raise ProgrammingError(f"TUNE option {key} must be an integer >= {low}, got {raw!r}", code="invalid_option")
    return raw


def bind_tune(stmt: TuneModel, session, params: list) -> StudySpec:
    """The :class:`StudySpec` of a TUNE statement (reads the data).

    Raises:
        ProgrammingError: ``model_not_found`` / ``model_not_trainable``, ``invalid_search_space``,
            ``unknown_option`` / ``invalid_option``, ``column_not_found``, ``hyperparameter_not_schedulable``.
        DataError: bad data (see :func:`~modelsql.planner.tune_data.load_study_data`).
    """
    ref = stmt.this
    trainable = trainable_for_tune(session, ref.model_name.lower(), ref.version_number, ref)
    options = _options(stmt, params)
    common = {k: options.pop(k) for k in list(options) if k in COMMON_OPTIONS}
    max_epochs = _int_option(common, "max_epochs", options.get("max_t", 10))
    space = bind_space(stmt.args["search"])
    space.validate(max_epochs)
    _check_schedulable(space, max_epochs)
    metric = str(common.get("metric", "val_loss")).lower()
    if metric not in _METRICS:
        raise ProgrammingError(f"TUNE option metric must be one of {', '.join(_METRICS)}, got {metric!r}",
                               code="invalid_option")
    mode = str(common.get("mode", _METRICS[metric])).lower()
    if mode not in ("min", "max"):
        raise ProgrammingError(f"TUNE option mode must be 'min' or 'max', got {mode!r}", code="invalid_option")
    seed = _int_option(common, "seed", 0, 0)
    features = common.get("features")
    features = (features,) if isinstance(features, str) else features
    validate = stmt.args.get("validate")
    train_sql = _relation_sql(stmt.args["train"], "ON")
    validate_sql = _relation_sql(validate, "VALIDATE ON") if validate is not None else None
    data = load_study_data(session, train_sql, validate_sql, stmt.args["target"].name, features,
                           float(common.get("validation_fraction", 0.2)), seed, params)
    threads = _int_option(common, "threads", 1)
    execution = str(common.get("execution", "stages")).lower()
    if execution not in ("stages", "trials"):
        raise ProgrammingError("TUNE option execution must be 'stages' (the stage tree) or 'trials' (every trial "
                               f"from scratch, the baseline), got {execution!r}", code="invalid_option")
    executor = str(common.get("executor", "local")).lower()
    if executor not in ("local", "ray"):
        raise ProgrammingError(f"TUNE option executor must be 'local' or 'ray', got {executor!r}",
                               code="invalid_option")
    algorithm = stmt.args["algorithm"].name.lower()
    name = str(common.get("study_name", f"{trainable.name}_study")).lower()
    tree = digest_of("tree", TRAINER_VERSION, trainable.name, trainable.version, trainable.code_digest,
                     trainable.factory, list(trainable.options), data.digest, seed, threads)
    definition = digest_of(tree, space.to_json(), algorithm, sorted(options.items()), max_epochs, metric, mode,
                           execution)
    budget = common.get("time_budget_s")
    spec = StudySpec(
        name=name, trainable=trainable, algorithm=algorithm, algorithm_options=options, space=space,
        max_epochs=max_epochs, seed=seed, metric=metric, mode=mode, threads=threads,
        workers=_int_option(common, "workers", 1), executor=executor, address=common.get("address"),
        sharing=execution == "stages", train_sql=train_sql, validate_sql=validate_sql,
        target=stmt.args["target"].name, features=data.features, data=data.data, labels=data.labels,
        base_params=tuple(sorted(trainable_defaults(trainable).items())),
        time_budget_s=float(budget) if budget is not None else None, statement=session.text, tree=tree,
        definition=definition, change_points=frozenset(space.change_points(max_epochs)))
    _check_algorithm(spec)
    return spec


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


def _check_algorithm(spec: StudySpec) -> None:
    make_algorithm(spec.algorithm, spec.space, max_epochs=spec.max_epochs, mode=spec.mode, seed=spec.seed,
                   study_name=spec.name, options=spec.algorithm_options)


# ---------------------------------------------------------------- executing


def _executor(spec: StudySpec):
    if spec.executor == "ray":
        from ..tuning.ray_executor import ray_executor

        return ray_executor(spec.workers, spec.address, threads=spec.threads)
    from ..tuning.executor import local_executor

    return local_executor(spec.workers)


def _check_existing(session, spec: StudySpec, resume: bool) -> None:
    studies = session.catalog.studies
    if spec.name in RUNNING:
        raise ProgrammingError(f'Study "{spec.name}" is running now (in this process).', code="study_running")
    with session.catalog.transaction(join=False):
        studies.mark_interrupted(sorted(RUNNING))
    old = studies.study(spec.name)
    if old is None:
        if resume:
            raise studies.not_found(spec.name)
        return
    if old.definition != spec.definition:
        raise ProgrammingError(
            f'Study "{spec.name}" exists with another definition (model, data, SEARCH, USING or options differ): '
            f"DROP STUDY {spec.name} first, or name this one with WITH (study_name = '...').",
            code="study_definition_changed")


@run_statement.register
def _tune(stmt: TuneModel, session, params: list) -> Result:
    session.check_writable()
    session.commit()
    spec = bind_tune(stmt, session, params)
    _check_existing(session, spec, bool(stmt.args.get("resume")))
    RUNNING.add(spec.name)
    try:
        row = StudyRun(session, spec, _executor(spec), getattr(session, "progress", None)).run()
    finally:
        RUNNING.discard(spec.name)
        session.changed()
    saved = row.epochs_requested / row.epochs_trained if row.epochs_trained else None
    return Result(session.duck, description=_describe(("study", "VARCHAR"), ("status", "VARCHAR"),
                                                      ("trials", "INTEGER"), ("best_trial", "INTEGER"),
                                                      ("best_metric", "DOUBLE"), ("epochs_trained", "BIGINT"),
                                                      ("epochs_requested", "BIGINT"), ("steps_ratio", "DOUBLE")),
                  rows=[(row.name, row.status, len(session.catalog.studies.trials(row.name)), row.best_trial,
                         row.best_metric, row.epochs_trained, row.epochs_requested, saved)])


def _describe(*columns: tuple[str, str]) -> list[tuple]:
    return [(name, kind, None, None, None, None, True) for name, kind in columns]


# ---------------------------------------------------------------- EXPLAIN TUNE


def explain_tune(stmt: TuneModel, session, params: list) -> Result:
    """``EXPLAIN TUNE ...``: the stage tree of the study's first round, planned (nothing trains), with its
    estimated cost against trial-based execution (epochs, and time at the measured or a default rate)."""
    spec = bind_tune(stmt, session, params)
    algorithm = make_algorithm(spec.algorithm, spec.space, max_epochs=spec.max_epochs, mode=spec.mode,
                               seed=spec.seed, study_name=spec.name, options=spec.algorithm_options)
    requests = algorithm.ask()
    tree = load_tree(session.catalog, spec.tree)
    targets = tuple(tree.insert(r.sequence) for r in requests)
    plan = apply_rules(RoundPlan(tree, targets, spec.change_points), TUNE_RULES)
    lines = _render_round(spec, requests, plan, session.catalog.studies.epoch_seconds(spec.tree))
    return Result(session.duck, description=_describe(("explain_key", "VARCHAR"), ("explain_value", "VARCHAR")),
                  rows=[("modelsql_tune", "\n".join(lines))])


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
             f"workers={spec.workers}",
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
    return f"{a / b:.2f}x" if b else "all (nothing to train)"


# ------------------------------------------------------------ SHOW / DESCRIBE


@run_statement.register
def _show(stmt: ShowStudies, session, params: list) -> Result:
    session.begin_if_needed()
    session.run("SELECT s.name, s.model, s.algorithm, s.status, count(t.trial)::INTEGER AS trials, s.trials_done, "
                "s.best_trial, s.best_metric, s.metric, s.epochs_trained, s.epochs_requested, "
                "CASE WHEN s.epochs_trained > 0 THEN s.epochs_requested / s.epochs_trained END AS steps_ratio, "
                "s.updated_at FROM modelsql.studies s LEFT JOIN modelsql.trials t ON t.study = s.name "
                "GROUP BY ALL ORDER BY s.name", None)
    return session.duckdb_result("SELECT")


@run_statement.register
def _describe_study(stmt: DescribeStudy, session, params: list) -> Result:
    name = stmt.this.name.lower()
    if session.catalog.studies.study(name) is None:
        raise session.catalog.studies.not_found(name)
    session.begin_if_needed()
    session.run("SELECT trial, status, epochs, metric, best_metric, config, error FROM modelsql.trials "
                "WHERE study = ? ORDER BY trial", [name])
    return session.duckdb_result("SELECT")


@run_statement.register
def _drop_study(stmt: DropStudy, session, params: list) -> Result:
    session.check_writable()
    name = stmt.this.name.lower()
    if name in RUNNING:
        raise ProgrammingError(f'Study "{name}" is running now.', code="study_running")
    if session.catalog.studies.study(name) is None:
        if stmt.args.get("exists"):
            return Result(session.duck, rowcount=0)
        raise session.catalog.studies.not_found(name)
    session.commit()
    with session.catalog.transaction(join=False):
        session.catalog.studies.drop_study(name)
    session.changed()
    return Result(session.duck, rowcount=1)
