"""Search spaces of TUNE: what each hyper-parameter may be, and its value at every epoch.

A :class:`Space` is a list of named hyper-parameters. Each is a constant, a sampled
:data:`Dimension` (``CHOICE``, ``UNIFORM``, ``LOGUNIFORM``, ``INTEGER``) or a schedule
(:class:`StepDecay`, :class:`Piecewise`) whose arguments are constants or dimensions. The sampled
*leaves* have flattened names (``lr.initial``, ``lr.milestones``, ``lr.values[0]`` ...); a
*configuration* maps every leaf name, constants included, to its value.

:meth:`Space.sequence` expands a configuration into per-epoch hyper-parameters (:data:`EpochHP`):
the key of Hippo's stage tree (Shin et al., "Hippo: Taming Hyper-parameter Optimization of Deep
Learning with Stage Trees", VLDB 2022). A scheduled value is a pure function of (configuration,
epoch), never a stateful scheduler, so two configurations share a trained prefix exactly when their
per-epoch values agree.
"""

from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import dataclass
from typing import Any, Mapping, Union

from modelsql import errors

__all__ = [
    "Choice", "Uniform", "LogUniform", "IntRange", "Dimension", "DIMENSIONS", "StepDecay",
    "Piecewise", "Space", "EpochHP", "is_dimension",
]

EpochHP = tuple[tuple[str, Any], ...]
"""The hyper-parameters of one epoch: sorted ``(name, value)`` pairs."""


@dataclass(frozen=True)
class Choice:
    """``CHOICE(v, ...)``: one of ``values`` (int, float, str, bool or a tuple of numbers)."""

    values: tuple


@dataclass(frozen=True)
class Uniform:
    """``UNIFORM(low, high)``: a float drawn uniformly from ``[low, high]``."""

    low: float
    high: float


@dataclass(frozen=True)
class LogUniform:
    """``LOGUNIFORM(low, high)``: a float whose logarithm is uniform; ``0 < low < high``."""

    low: float
    high: float


@dataclass(frozen=True)
class IntRange:
    """``INTEGER(low, high)``: an int in ``[low, high]``, both ends included (Optuna ``suggest_int``)."""

    low: int
    high: int


Dimension = Union[Choice, Uniform, LogUniform, IntRange]
DIMENSIONS = (Choice, Uniform, LogUniform, IntRange)
Value = Any
"""A constant (int, float, str, bool, tuple of numbers) or a :data:`Dimension`."""


@dataclass(frozen=True)
class StepDecay:
    """``STEP_DECAY(initial, milestones, gamma, warmup)``.

    The value at epoch ``e`` (0-based) is ``initial * gamma ** k``, ``k`` the number of milestones
    ``<= e``; during warm-up (``e < warmup``) it is then multiplied by ``(e + 1)`` and divided by
    ``warmup`` (in that order). ``milestones`` is a tuple of epochs (or one int).
    """

    initial: Value
    milestones: Value = ()
    gamma: Value = 0.1
    warmup: Value = 0


@dataclass(frozen=True)
class Piecewise:
    """``PIECEWISE(values, milestones, warmup)``: ``values[i]`` for epochs in
    ``[milestones[i-1], milestones[i])``, so ``len(values) == len(milestones) + 1``; warm-up as in
    :class:`StepDecay`."""

    values: tuple
    milestones: tuple
    warmup: Value = 0


def is_dimension(value: Any) -> bool:
    """True when ``value`` is sampled (a :data:`Dimension`), False for a constant."""
    return isinstance(value, DIMENSIONS)


def _invalid(leaf: str, why: str) -> errors.ProgrammingError:
    err = errors.ProgrammingError(f"Invalid search space: hyper-parameter {leaf!r}: {why}.", code="invalid_search_space")
    err.hyperparameter = leaf
    return err


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_constant(v: Any) -> bool:
    if isinstance(v, tuple):
        return all(_is_number(x) for x in v)
    return isinstance(v, (int, float, str, bool))


def _as_tuple(v: Any) -> Any:
    """Lists (from JSON or a caller) become tuples, so values stay hashable."""
    return tuple(_as_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v


# -- leaves -----------------------------------------------------------------------------------


def _fields(name: str, hp: Any) -> list[tuple[str, Value, str]]:
    """``(leaf name, value, kind)`` of one hyper-parameter; kind says what the value must be."""
    if isinstance(hp, StepDecay):
        return [(f"{name}.initial", hp.initial, "number"), (f"{name}.milestones", hp.milestones, "milestones"),
                (f"{name}.gamma", hp.gamma, "number"), (f"{name}.warmup", hp.warmup, "warmup")]
    if isinstance(hp, Piecewise):
        kind = "any" if hp.warmup == 0 else "number"
        pieces = [(f"{name}.values[{i}]", v, kind) for i, v in enumerate(hp.values)]
        return pieces + [(f"{name}.warmup", hp.warmup, "warmup")]
    return [(name, hp, "any")]


# -- validation -------------------------------------------------------------------------------


def _check_dimension(leaf: str, d: Any) -> None:
    if isinstance(d, Choice):
        if not isinstance(d.values, tuple):
            raise _invalid(leaf, "CHOICE values must be a tuple")
        if not d.values:
            raise _invalid(leaf, "CHOICE needs at least one value")
        for v in d.values:
            if not _is_constant(v):
                raise _invalid(leaf, f"CHOICE value {v!r} is not a number, string, boolean or tuple of numbers")
        return
    ints = isinstance(d, IntRange)
    if not all((_is_int if ints else _is_number)(x) for x in (d.low, d.high)):
        raise _invalid(leaf, f"{_kind_word(d)} bounds must be {'integers' if ints else 'numbers'}")
    if isinstance(d, LogUniform) and d.low <= 0:
        raise _invalid(leaf, f"LOGUNIFORM needs low > 0, got {d.low!r}")
    if not d.low < d.high:
        raise _invalid(leaf, f"{_kind_word(d)} needs low < high, got ({d.low!r}, {d.high!r})")


def _check_milestones(leaf: str, ms: Any, max_epochs: int) -> None:
    ms = (ms,) if _is_int(ms) else ms
    if not isinstance(ms, tuple) or not all(_is_int(m) for m in ms):
        raise _invalid(leaf, f"milestones must be a tuple of integer epochs, got {ms!r}")
    if any(b <= a for a, b in zip(ms, ms[1:])):
        raise _invalid(leaf, f"milestones must be strictly increasing, got {ms!r}")
    if ms and not (1 <= ms[0] and ms[-1] < max_epochs):
        raise _invalid(leaf, f"milestones must lie in [1, {max_epochs}), got {ms!r}")


def _check_kind(leaf: str, v: Any, kind: str, max_epochs: int) -> None:
    """Check one leaf against the kind its schedule argument needs."""
    if is_dimension(v):
        _check_dimension(leaf, v)
    elif not _is_constant(v):
        raise _invalid(leaf, f"{v!r} is not a constant or a CHOICE/UNIFORM/LOGUNIFORM/INTEGER")
    if kind == "number" and not _values_are(v, _is_number):
        raise _invalid(leaf, f"must be a number, got {_describe_value(v)}")
    if kind == "milestones":
        if isinstance(v, (Uniform, LogUniform)):
            raise _invalid(leaf, f"milestones must be integer epochs, got {_describe_value(v)}")
        for ms in _reachable(v):
            _check_milestones(leaf, ms, max_epochs)
    if kind == "warmup":
        if isinstance(v, (Uniform, LogUniform)) or not _values_are(v, _is_int):
            raise _invalid(leaf, f"warmup must be an integer number of epochs, got {_describe_value(v)}")
        if min(_reachable(v)) < 0:
            raise _invalid(leaf, f"warmup must not be negative, got {_describe_value(v)}")
        if max(_reachable(v)) > max_epochs:
            raise _invalid(leaf, f"warmup must not be longer than the study's {max_epochs} epochs, "
                                 f"got {_describe_value(v)}")


def _values_are(v: Any, test: Any) -> bool:
    if isinstance(v, Choice):
        return all(test(x) for x in v.values)
    if isinstance(v, IntRange):
        return True
    if isinstance(v, (Uniform, LogUniform)):
        return test is _is_number
    return test(v)


def _reachable(v: Any) -> list:
    """Every value a leaf can take (an :class:`IntRange` enumerated; Uniform has none listed)."""
    if isinstance(v, Choice):
        return list(v.values)
    if isinstance(v, IntRange):
        return list(range(v.low, v.high + 1))
    return [] if is_dimension(v) else [v]


# -- describe ---------------------------------------------------------------------------------


def _kind_word(d: Any) -> str:
    return {Choice: "CHOICE", Uniform: "UNIFORM", LogUniform: "LOGUNIFORM", IntRange: "INTEGER"}[type(d)]


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, tuple):
        return "(" + ", ".join(_literal(x) for x in v) + ")"
    return repr(v)


def _describe_value(v: Any) -> str:
    if isinstance(v, Choice):
        return "CHOICE(" + ", ".join(_literal(x) for x in v.values) + ")"
    if is_dimension(v):
        return f"{_kind_word(v)}({_literal(v.low)}, {_literal(v.high)})"
    return _literal(v)


def _describe_hp(hp: Any) -> str:
    if isinstance(hp, StepDecay):
        args = [("initial", hp.initial), ("milestones", hp.milestones), ("gamma", hp.gamma)]
    elif isinstance(hp, Piecewise):
        values = "(" + ", ".join(_describe_value(v) for v in hp.values) + ")"
        return _call("PIECEWISE", [("values", values), ("milestones", _literal(hp.milestones))], hp.warmup)
    else:
        return _describe_value(hp)
    return _call("STEP_DECAY", [(k, _describe_value(v)) for k, v in args], hp.warmup)


def _call(word: str, args: list[tuple[str, str]], warmup: Any) -> str:
    if warmup != 0:
        args.append(("warmup", _describe_value(warmup)))
    return word + "(" + ", ".join(f"{k} => {v}" for k, v in args) + ")"


# -- JSON -------------------------------------------------------------------------------------

_DIM_TAGS = {Choice: "choice", Uniform: "uniform", LogUniform: "loguniform", IntRange: "integer"}
_TAG_DIMS = {tag: cls for cls, tag in _DIM_TAGS.items()}


def _encode(v: Any) -> Any:
    if isinstance(v, Choice):
        return {"choice": list(v.values)}
    if is_dimension(v):
        return {_DIM_TAGS[type(v)]: [v.low, v.high]}
    if isinstance(v, StepDecay):
        return {"step_decay": {k: _encode(getattr(v, k)) for k in ("initial", "milestones", "gamma", "warmup")}}
    if isinstance(v, Piecewise):
        return {"piecewise": {"values": [_encode(x) for x in v.values], "milestones": list(v.milestones),
                              "warmup": _encode(v.warmup)}}
    return {"const": v}


def _decode(obj: Any) -> Any:
    (tag, body), = obj.items()
    if tag == "const":
        return _as_tuple(body)
    if tag == "choice":
        return Choice(_as_tuple(body))
    if tag in _TAG_DIMS:
        return _TAG_DIMS[tag](*body)
    if tag == "step_decay":
        return StepDecay(**{k: _decode(x) for k, x in body.items()})
    if tag == "piecewise":
        return Piecewise(tuple(_decode(x) for x in body["values"]), _as_tuple(body["milestones"]),
                         _decode(body["warmup"]))
    raise ValueError(f"unknown tag {tag!r}")


# -- values at an epoch -----------------------------------------------------------------------


def _warm(v: Any, e: int, warmup: int) -> Any:
    return v * (e + 1) / warmup if e < warmup else v


def _value_at(name: str, hp: Any, leaf: Mapping[str, Any], e: int) -> Any:
    if isinstance(hp, StepDecay):
        ms = leaf[f"{name}.milestones"]
        ms = (ms,) if _is_int(ms) else ms
        v = leaf[f"{name}.initial"] * leaf[f"{name}.gamma"] ** bisect.bisect_right(ms, e)
        return _warm(v, e, leaf[f"{name}.warmup"])
    if isinstance(hp, Piecewise):
        v = leaf[f"{name}.values[{bisect.bisect_right(hp.milestones, e)}]"]
        return _warm(v, e, leaf[f"{name}.warmup"])
    return leaf[name]


@dataclass(frozen=True)
class Space:
    """The hyper-parameters of a study, in written order: ``((name, value or schedule), ...)``."""

    params: tuple

    def candidates(self) -> list[dict[str, Any]]:
        """Configurations that between them give every leaf each value it can take (each CHOICE value, an
        INTEGER's and a range's ends), one leaf varied at a time from the first values: what a check of
        the values a study may train with has to look at, without the whole grid."""
        dims = self.dimensions()
        ends = {leaf: list(d.values) if isinstance(d, Choice) else [d.low, d.high] for leaf, d in dims.items()}
        base = {leaf: values[0] for leaf, values in ends.items()}
        out = [base]
        for leaf, values in ends.items():
            out += [dict(base, **{leaf: v}) for v in values[1:]]
        return [self.resolve(c) for c in out]

    def leaves(self) -> dict[str, Value]:
        """Every leaf (flattened name -> constant or :data:`Dimension`), in written order."""
        return {leaf: v for name, hp in self.params for leaf, v, _ in _fields(name, hp)}

    def dimensions(self) -> dict[str, Dimension]:
        """The sampled leaves (flattened name -> :data:`Dimension`), in written order."""
        return {leaf: v for leaf, v in self.leaves().items() if is_dimension(v)}

    def validate(self, max_epochs: int) -> None:
        """Check the space for a study of ``max_epochs`` epochs.

        Raises:
            modelsql.errors.ProgrammingError: code ``invalid_search_space``, naming the leaf, for an
                empty CHOICE, ``low >= high``, LOGUNIFORM with ``low <= 0``, milestones that are not
                strictly increasing integers in ``[1, max_epochs)``, a PIECEWISE whose lengths do
                not match, a schedule argument of the wrong kind, a negative warm-up, or a name used
                twice.
        """
        seen: set[str] = set()
        for name, hp in self.params:
            if not isinstance(name, str) or not name:
                raise _invalid(str(name), "the name must be a non-empty string")
            if isinstance(hp, Piecewise):
                self._check_piecewise(name, hp, max_epochs)
            for leaf, v, kind in _fields(name, hp):
                if leaf in seen or name in seen:
                    raise _invalid(leaf, "the name is used twice")
                seen.add(leaf)
                _check_kind(leaf, v, kind, max_epochs)
            seen.add(name)

    @staticmethod
    def _check_piecewise(name: str, hp: Piecewise, max_epochs: int) -> None:
        if not isinstance(hp.values, tuple) or not isinstance(hp.milestones, tuple):
            raise _invalid(name, "PIECEWISE values and milestones must be tuples")
        if len(hp.values) != len(hp.milestones) + 1:
            raise _invalid(name, f"PIECEWISE needs one more value than milestones, got {len(hp.values)} "
                                 f"values and {len(hp.milestones)} milestones")
        _check_milestones(f"{name}.milestones", hp.milestones, max_epochs)

    def resolve(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Every leaf's value under ``config`` (constants from the space; lists become tuples).

        Raises:
            modelsql.errors.ProgrammingError: code ``missing_hyperparameter`` when ``config`` lacks a
                sampled leaf.
        """
        out = {}
        for leaf, v in self.leaves().items():
            if not is_dimension(v):
                out[leaf] = v
            elif leaf in config:
                out[leaf] = _as_tuple(config[leaf])
            else:
                raise errors.ProgrammingError(f"The configuration has no value for {leaf!r}.",
                                              code="missing_hyperparameter")
        return out

    def sequence(self, config: Mapping[str, Any], epochs: int) -> tuple[EpochHP, ...]:
        """The hyper-parameters of epochs ``0 .. epochs-1`` under ``config``.

        Each epoch is the sorted ``(name, value)`` pairs of every hyper-parameter (constants too).
        The same configuration always gives the same floats. Raises as :meth:`resolve`.
        """
        leaf = self.resolve(config)
        params = sorted(self.params, key=lambda p: p[0])
        return tuple(tuple((name, _value_at(name, hp, leaf, e)) for name, hp in params) for e in range(epochs))

    def grid(self) -> list[dict[str, Any]]:
        """Every combination of the CHOICE leaves (the last leaf varies fastest), as configurations.

        Raises:
            modelsql.errors.ProgrammingError: code ``grid_needs_choices`` naming a leaf that is a
                UNIFORM, LOGUNIFORM or INTEGER.
        """
        dims = self.dimensions()
        choices: list[Choice] = []
        for leaf, d in dims.items():
            if not isinstance(d, Choice):
                raise errors.ProgrammingError(
                    f"A grid search needs CHOICE for every searched hyper-parameter; {leaf!r} is "
                    f"{_describe_value(d)}.", code="grid_needs_choices")
            choices.append(d)
        combos = itertools.product(*(d.values for d in choices))
        return [self.resolve(dict(zip(dims, combo))) for combo in combos]

    def change_points(self, max_epochs: int) -> frozenset[int]:
        """Epochs in ``[1, max_epochs)`` at which some configuration's value may change: every
        reachable milestone and every warm-up epoch (the places checkpoints are worth keeping)."""
        points: set[int] = set()
        for name, hp in self.params:
            if isinstance(hp, StepDecay):
                for ms in _reachable(hp.milestones):
                    points.update((ms,) if _is_int(ms) else ms)
            elif isinstance(hp, Piecewise):
                points.update(hp.milestones)
            if isinstance(hp, (StepDecay, Piecewise)):
                points.update(range(1, max(_reachable(hp.warmup), default=0) + 1))
        return frozenset(p for p in points if 1 <= p < max_epochs)

    def describe(self) -> str:
        """One SQL-like line per hyper-parameter, e.g.
        ``lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => (10, 20), gamma => 0.1)``."""
        return "\n".join(f"{name} = {_describe_hp(hp)}" for name, hp in self.params)

    def to_json(self) -> str:
        """The space as JSON text; :meth:`from_json` gives back an equal space."""
        return json.dumps({"params": [[name, _encode(hp)] for name, hp in self.params]})

    @classmethod
    def from_json(cls, text: str) -> "Space":
        """The space :meth:`to_json` wrote.

        Raises:
            modelsql.errors.DataError: code ``corrupt_search_space`` when ``text`` is not such JSON.
        """
        try:
            return cls(tuple((name, _decode(hp)) for name, hp in json.loads(text)["params"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise errors.DataError(f"Corrupt search space JSON: {exc}.", code="corrupt_search_space") from exc

    def optuna_distributions(self) -> dict[str, Any]:
        """An ``optuna.distributions.BaseDistribution`` per sampled leaf, for ``study.ask``.

        A CHOICE holding a tuple becomes a categorical over value indices (Optuna's choices must be
        scalars); map Optuna's params back with :meth:`config_from_params`.
        """
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        out: dict[str, Any] = {}
        for leaf, d in self.dimensions().items():
            if isinstance(d, Choice):
                out[leaf] = CategoricalDistribution(range(len(d.values)) if _by_index(d) else d.values)
            elif isinstance(d, IntRange):
                out[leaf] = IntDistribution(d.low, d.high)
            else:
                out[leaf] = FloatDistribution(d.low, d.high, log=isinstance(d, LogUniform))
        return out

    def config_from_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The configuration of an Optuna trial's ``params`` (see :meth:`optuna_distributions`).

        Raises as :meth:`resolve`."""
        config = {}
        for leaf, d in self.dimensions().items():
            if leaf in params:
                p = params[leaf]
                config[leaf] = d.values[p] if isinstance(d, Choice) and _by_index(d) else p
        return self.resolve(config)


def _by_index(choice: Choice) -> bool:
    return any(not isinstance(v, (bool, int, float, str)) for v in choice.values)

