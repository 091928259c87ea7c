"""Binding ``TUNE MODEL ...``: the statement's search space, algorithm and options as a :class:`StudySpec`.

The SEARCH items become a :class:`~modelsql.tuning.space.Space`:

* a constant: a number, a string, ``TRUE``/``FALSE``, a tuple ``(10, 20)``, or a bare word (``adam``);
* ``CHOICE(v, ...)``, ``UNIFORM(low, high)``, ``LOGUNIFORM(low, high)``, ``INTEGER(low, high)``
  (both ends included, as Optuna's ``suggest_int``): sampled dimensions;
* ``STEP_DECAY(initial => v, milestones => (m, ...), gamma => g [, warmup => k])`` and
  ``PIECEWISE(values => (v, ...), milestones => (m, ...) [, warmup => k])``: a value per epoch,
  whose arguments may themselves be dimensions.

Hyper-parameters named ``lr``, ``momentum``, ``weight_decay``, ``batch_size`` and ``optimizer``
configure training (and all but ``optimizer`` may change over epochs); every other name is a
keyword argument of the trainable's factory and must stay constant.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from sqlglot import exp

from modelsql.recursive.trees import Trees
from modelsql.catalog.studies import StudyRow, Trainable
from modelsql.catalog.study_parameters import kept_parameters
from modelsql.errors import ProgrammingError
from modelsql.tuning.algorithms import Algorithm
from modelsql.tuning.space import Choice, IntRange, LogUniform, Piecewise, Space, StepDecay, Uniform
from modelsql.tuning.stage_tree import EpochHP
from modelsql.engine.options.declared import TUNE

__all__ = ["TRAINING_NAMES", "COMMON_OPTIONS", "StudySpec", "bind_space", "TRAINER_VERSION",
           "frozen", "trainable_defaults", "digest_of", "device_part", "constant"]

TRAINING_NAMES = frozenset({"lr", "momentum", "weight_decay", "batch_size", "optimizer"})
"""Hyper-parameters that configure training rather than the factory (see :mod:`modelsql.tuning.training`)."""

TRAINER_VERSION = "1"
"""Part of every tree key: bump it when a change to training would change its numbers."""

COMMON_OPTIONS = TUNE.names
"""``WITH`` options of TUNE that are not the algorithm's (:data:`modelsql.engine.options.declared.TUNE`)."""

_DIMENSIONS = {"CHOICE": None, "UNIFORM": Uniform, "LOGUNIFORM": LogUniform, "INTEGER": IntRange}
_FLOAT_RANGES: dict[str, type[Uniform] | type[LogUniform]] = {"UNIFORM": Uniform, "LOGUNIFORM": LogUniform}
_SCHEDULES = {"STEP_DECAY": (StepDecay, ("initial", "milestones", "gamma", "warmup")),
              "PIECEWISE": (Piecewise, ("values", "milestones", "warmup"))}


@dataclass(frozen=True)
class StudySpec:
    """A bound TUNE statement: everything a :class:`~modelsql.engine.tune.run.StudyRun` needs.

    Attributes:
        name: the study (``study_name`` option; default ``<model>_study``).
        trainable: the trainable version tuned.
        algorithm, algorithm_options: ``USING`` name (lower case) and its own options.
        space: the search space; ``change_points`` its epochs where values may change.
        max_epochs, seed, metric, mode, threads, workers: as the options say.
        executor, address: ``local``, ``processes`` or ``ray`` and the Ray address.
        sharing: False for trial-based execution (``execution = 'trials'``: every trial from scratch).
        train_sql, validate_sql, target, features: where the data came from.
        data: the :class:`~modelsql.tuning.training.TrainData`; ``labels`` the class labels (classification).
        tree: the stage-tree key; ``definition`` the study's definition digest.
        time_budget_s: stop (resumably) after this many seconds, or None.
        device: where the stages train, ``"cpu"`` or ``"cuda:N"`` (the ``device`` option, ``'auto'`` resolved).
        parameters: the statement's ``?`` values (ON / VALIDATE ON read them), kept so the rows can be read again.
        train_fingerprint: EVALUATE's fingerprint of the ON rows as TUNE read them (a version made FROM STUDY
            records it as the rows it was trained on).
        data_digest: SHA-256 of the study's arrays, training and validation, in order (the data part of the tree
            key): CREATE MODEL ... FROM STUDY evaluates the held-out rows again only while the rows read give the
            same arrays (the fingerprint ignores the rows' order, which decides the held-out rows).
        search: the search algorithm, built once when the statement is bound (building it checks its options);
            the study's run asks and tells this object.
    """

    name: str
    trainable: Trainable
    algorithm: str
    algorithm_options: Mapping[str, Any]
    space: Space
    max_epochs: int
    seed: int
    metric: str
    mode: str
    threads: int
    workers: int
    executor: str
    address: Optional[str]
    sharing: bool
    train_sql: str
    validate_sql: Optional[str]
    target: str
    features: tuple[str, ...]
    data: Any
    labels: Optional[tuple] = None
    base_params: tuple[tuple[str, Any], ...] = ()
    time_budget_s: Optional[float] = None
    statement: str = ""
    tree: str = field(default="")
    definition: str = field(default="")
    change_points: frozenset = frozenset()
    device: str = "cpu"
    validation_fraction: float = 0.2
    search: Optional[Algorithm] = field(default=None, compare=False, repr=False)
    parameters: tuple = ()
    train_fingerprint: Optional[str] = None
    data_digest: str = ""

    def factory_params_of(self, hp: EpochHP) -> tuple[tuple[str, Any], ...]:
        """The factory's keyword arguments for an epoch: the trainable's defaults, then the search's."""
        params = dict(self.base_params)
        params.update((k, v) for k, v in hp if k not in TRAINING_NAMES)
        return tuple(sorted(params.items()))

    def study_row(self) -> StudyRow:
        """The study's catalog row (status ``running``, no progress)."""
        options = dict(self.algorithm_options, workers=self.workers, threads=self.threads, executor=self.executor,
                       execution="stages" if self.sharing else "trials", features=list(self.features),
                       in_features=int(self.data.x.shape[1]),
                       labels=list(self.labels) if self.labels is not None else None,
                       **({"trees": True} if isinstance(self.data.x, Trees) else {}),
                       **({"validation_fraction": self.validation_fraction} if self.validate_sql is None else {}),
                       **({"device": self.device} if self.device != "cpu" else {}),
                       **({"parameters": kept_parameters(self.parameters)} if self.parameters else {}),
                       **({"train_fingerprint": self.train_fingerprint} if self.train_fingerprint else {}),
                       **({"data_digest": self.data_digest} if self.data_digest else {}))
        return StudyRow(self.name, self.trainable.name, self.trainable.version, self.algorithm, self.metric, self.mode,
                        self.max_epochs, self.seed, self.space.to_json(), json.dumps(options, default=str),
                        self.train_sql, self.validate_sql, self.target, self.tree, self.definition, "running")


def frozen(value: Any) -> Any:
    """A JSON value with its lists made tuples (hashable, as hyper-parameter values are)."""
    return tuple(frozen(v) for v in value) if isinstance(value, list) else value


def trainable_defaults(trainable: Trainable) -> dict[str, Any]:
    """The trainable's ``WITH`` options: default factory arguments (stored as JSON text)."""
    return {k: frozen(json.loads(v)) for k, v in trainable.options}


def device_part(device: str) -> list:
    """What the stage-tree key holds of the device: nothing for the CPU (so CPU keys are those of before devices
    existed), ``["cuda"]`` for any ``cuda:N`` (CUDA rounds differently from the CPU; one GPU model is assumed,
    as one CPU type is)."""
    return [] if device == "cpu" else [device.split(":", 1)[0]]


def digest_of(*parts: Any) -> str:
    """SHA-256 of the JSON text of ``parts`` (keys sorted)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------------ the space


def bind_space(items: list[exp.EQ]) -> Space:
    """The :class:`Space` of a SEARCH list. Raises ProgrammingError (``invalid_search_space``) naming the
    hyper-parameter for an argument of the wrong kind or an unknown function."""
    params = []
    for item in items:
        name = item.this.name.lower()  # names are case-insensitive, as SQL's are
        params.append((name, _bind_value(item.expression, name, top=True)))
    return Space(tuple(params))


def _bad(name: str, why: str) -> ProgrammingError:
    err = ProgrammingError(f'SEARCH: hyper-parameter "{name}": {why}', code="invalid_search_space")
    err.hyperparameter = name
    return err


def _bind_value(node: exp.Expression, name: str, *, top: bool = False) -> Any:
    if isinstance(node, exp.Anonymous):
        fn = node.name.upper()
        if fn in _SCHEDULES:
            if not top:
                raise _bad(name, f"{fn} must be the whole value of the hyper-parameter, not inside another call")
            return _bind_schedule(fn, node, name)
        if fn in _DIMENSIONS:
            return _bind_dimension(fn, node, name)
        raise _bad(name, f"unknown function {node.name}(...); use CHOICE, UNIFORM, LOGUNIFORM, INTEGER, "
                         "STEP_DECAY or PIECEWISE")
    return constant(node, name)


def _bind_dimension(fn: str, node: exp.Anonymous, name: str) -> Any:
    args = node.expressions
    if any(isinstance(a, exp.Kwarg) for a in args):
        raise _bad(name, f"{fn} takes positional arguments only")
    values = [constant(a, name) for a in args]
    if fn == "CHOICE":
        return Choice(tuple(values))
    if len(values) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise _bad(name, f"{fn} takes two numbers (low, high), got {node.sql()}")
    if fn == "INTEGER":
        if not all(isinstance(v, int) for v in values):
            raise _bad(name, f"INTEGER takes two integers, got {node.sql()}")
        return IntRange(values[0], values[1])
    return _FLOAT_RANGES[fn](float(values[0]), float(values[1]))


def _bind_schedule(fn: str, node: exp.Anonymous, name: str) -> Any:
    cls, allowed = _SCHEDULES[fn]
    kwargs: dict[str, Any] = {}
    for arg in node.expressions:
        if not isinstance(arg, exp.Kwarg):
            raise _bad(name, f"{fn} takes named arguments ({', '.join(a + ' => ...' for a in allowed)})")
        key = arg.this.name.lower()
        if key not in allowed:
            raise _bad(name, f"{fn} has no argument {key!r} (it takes {', '.join(allowed)})")
        value = arg.expression
        if fn == "PIECEWISE" and key == "values" and isinstance(value, exp.Tuple):
            kwargs[key] = tuple(_bind_value(v, name) for v in value.expressions)
        else:
            kwargs[key] = _bind_value(value, name)
    needed = ("initial",) if fn == "STEP_DECAY" else ("values", "milestones")
    missing = [k for k in needed if k not in kwargs]
    if missing:
        raise _bad(name, f"{fn} needs {', '.join(k + ' => ...' for k in missing)}")
    if fn == "PIECEWISE" and not isinstance(kwargs["values"], tuple):
        kwargs["values"] = (kwargs["values"],)
    return cls(**kwargs)


def constant(node: exp.Expression, name: str) -> Any:
    """The Python value of a constant: number, string, boolean, a bare word (a string) or a tuple of them."""
    if isinstance(node, exp.Paren):
        return constant(node.this, name)
    if isinstance(node, exp.Tuple):
        return tuple(constant(v, name) for v in node.expressions)
    if isinstance(node, exp.Neg):
        value = constant(node.this, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    elif isinstance(node, exp.Boolean):
        return bool(node.this)
    elif isinstance(node, exp.Literal):
        return node.this if node.is_string else _number(node.this)
    elif isinstance(node, exp.Column) and not node.table:
        return node.name
    raise _bad(name, f"expected a constant, a tuple or CHOICE/UNIFORM/LOGUNIFORM/INTEGER, got {node.sql()}")


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return float(text)
