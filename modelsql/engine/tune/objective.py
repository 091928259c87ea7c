"""TUNE of a Python objective, for anything neither a trainable nor a scikit-learn model type covers:
``TUNE MODEL name ON ... [VALIDATE ON ...] TARGET y SEARCH (...) USING GRID | RANDOM | TPE WITH (objective =
'package.module:function', mode = 'max' | 'min', ...)``.

The function is called once per trial, in this process, as ``function(config, train, validate, target)``: the
trial's configuration (``{name: value}``, the SEARCH's names), the training and validation rows as
``pyarrow.Table`` s (``VALIDATE ON``'s, else the ON rows split as ``CREATE MODEL ... AS``'s ``'random'`` validation:
``validation_fraction``, the study ``seed``), and the TARGET column's name; it returns the score (a finite number),
which the algorithm maximises or minimises as ``mode`` says. A trial whose call raises, or returns something else,
fails with the reason; the study goes on. ``name`` names the study (``<name>_study``); nothing is stored but the
study and its trials (``modelsql.studies`` / ``modelsql.trials``, ``options->>'objective'``): there is no model to
make ``FROM STUDY``. Naming Python in SQL needs a connection that runs Python (``allow_python``).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from typing import TYPE_CHECKING, Any, Optional

import pyarrow as pa

from modelsql import sql as msql
from modelsql.catalog.studies import StudyRow, TrialRow
from modelsql.errors import DataError, Error, NotSupportedError, ProgrammingError, did_you_mean
from modelsql.estimators import validation_rows
from modelsql.sql.tune import TuneModel
from modelsql.tuning.algorithms import make_algorithm
from modelsql.tuning.factories import factory_digest, resolve_reference
from modelsql.engine.artifacts import trust
from modelsql.engine.handlers import catalog_write
from modelsql.engine.options import OptionValues, option_error
from modelsql.engine.result import Result
from modelsql.engine.tune.result import study_result
from modelsql.engine.tune.inprocess import claim_study, input_rows, release_study, rows_digest
from modelsql.engine.training_features import check_column_names
from modelsql.engine.tune.spec import bind_space

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["tune_objective", "ALGORITHMS"]

ALGORITHMS = ("grid", "random", "tpe")
"""The algorithms an objective's study takes (one score per trial: nothing to stop early)."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_UNUSED = ("metric", "max_epochs", "model_type", "features", "workers", "threads", "executor", "address",
           "execution", "time_budget_s", "device", "on_null")
"""TUNE options an objective's study does not have (its function reads the rows and scores them itself)."""


def _function(ref: str, where: str) -> Any:
    """The function ``ref`` names.

    Raises:
        ProgrammingError: ``factory_not_found``: not ``module:name``, the module does not import (whatever it
            raises), no such attribute, or not callable.
    """
    try:
        function = resolve_reference(ref)
    except Error as err:
        raise ProgrammingError(f"{where}: {str(err).replace('factory', 'objective')}", code="factory_not_found") from None
    except Exception as exc:  # noqa: BLE001 - the module raised while it was imported
        raise ProgrammingError(f"{where}: importing {ref.split(':')[0]} raised {type(exc).__name__}: {exc}",
                               code="factory_not_found") from None
    if not callable(function):
        raise ProgrammingError(f"{where}: {ref} is not a function.", code="factory_not_found")
    return function


def _check(stmt: TuneModel, options: OptionValues, where: str) -> str:
    """The algorithm, after the options an objective's study cannot take are refused."""
    if stmt.this.version_number is not None:
        raise ProgrammingError(f"{where}: VERSION names a model's version; an objective's study has no model.",
                               code="parse_error")
    for key in _UNUSED:
        if key in options.given:
            raise option_error(key, f"{where}: option {key} does not apply to a Python objective (it scores the rows "
                                    "itself).")
    if options["mode"] is None:
        raise option_error("objective", f"{where}: give mode = 'max' or 'min': whether the objective's score is "
                                        "better high or low.", code="missing_option")
    algorithm = stmt.args["algorithm"].name.lower()
    if algorithm not in ALGORITHMS:
        raise NotSupportedError(f"{where} USING {algorithm.upper()}: an objective gives one score per trial, nothing "
                                "to stop early or exploit; use GRID, RANDOM or TPE.", code="not_supported")
    return algorithm


def _data(session: Session, stmt: TuneModel, params: list, fraction: float, seed: int) -> tuple[pa.Table, pa.Table]:
    """The ON rows and the validation rows (VALIDATE ON's, or a fraction held out of ON's).

    Raises:
        ProgrammingError: ``duplicate_column`` (two columns of one name in two cases: the objective would be handed
            both, where every other statement refuses them); the queries' errors.
    """
    train = input_rows(session, stmt.args["train"], params)[0]
    check_column_names(train.column_names, "TUNE ON")
    validate = stmt.args.get("validate")
    if validate is not None:
        rows = input_rows(session, validate, params)[0]
        check_column_names(rows.column_names, "TUNE VALIDATE ON")
        return train, rows
    keep, held = validation_rows(train.num_rows, "random", fraction, seed)
    return train.take(pa.array(keep, pa.int64())), train.take(pa.array(held, pa.int64()))


def _target(name: str, train: pa.Table, validate: pa.Table, where: str) -> str:
    """The TARGET as the rows spell it.

    Raises:
        ProgrammingError: ``column_not_found`` (not in ON's or VALIDATE ON's rows).
        DataError: ``too_few_rows`` (no validation rows).
    """
    if validate.num_rows == 0:
        raise DataError(f"{where}: the validation rows are empty.", code="too_few_rows")
    for rows, what in ((train, "ON"), (validate, "VALIDATE ON")):
        if name.lower() not in (c.lower() for c in rows.column_names):
            raise ProgrammingError(f'{where}: TARGET column "{name}" is not in the rows of {what}.'
                                   f"{did_you_mean(name, rows.column_names)} Columns: {', '.join(rows.column_names)}.",
                                   code="column_not_found")
    return next(c for c in train.column_names if c.lower() == name.lower())


def _score(function: Any, config: dict, train: pa.Table, validate: pa.Table, target: str) -> tuple[Optional[float], Optional[str]]:
    """(the score, None) or (None, why the trial failed)."""
    try:
        value = function(dict(config), train, validate, target)
    except Exception as exc:  # noqa: BLE001 - the user's function raised: this trial fails, the study goes on
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"{type(exc).__name__}: {text}"
    try:
        number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int past float's range
        number = math.nan
    if not math.isfinite(number):
        return None, f"the objective returned {value!r}, not a finite number"
    return number, None


def tune_objective(stmt: TuneModel, session: Session, params: list, options: OptionValues) -> Result:
    """Run an objective's study (see the module) and record it; one row, TUNE's columns.

    Raises:
        NotSupportedError: ``python_disabled``, ``not_supported`` (PBT, ASHA, HYPERBAND).
        ProgrammingError: ``factory_not_found`` (the reference does not import), ``missing_option`` (no mode),
            ``invalid_option``, ``study_definition_changed``, ``invalid_hyperparameter`` (every trial failed).
    """
    ref = str(options["objective"])
    where = f"TUNE MODEL {stmt.this.model_name} (objective {ref})"
    trust.require_python_allowed(session, where)
    algorithm = _check(stmt, options, where)
    name = (f"{stmt.this.model_name}_study" if options["study_name"] is None else options["study_name"]).lower()
    if not _NAME.match(name):
        raise option_error("study_name", f"TUNE option study_name must be a name (letters, digits and underscores, "
                                         f"starting with a letter), not {name!r}.")
    function = _function(ref, where)
    space = bind_space(stmt.args["search"])
    space.validate(1)
    train, validate = _data(session, stmt, params, options["validation_fraction"], options["seed"])
    target = _target(stmt.args["target"].name, train, validate, where)
    definition = hashlib.sha256(json.dumps(
        [ref, factory_digest(ref), space.to_json(), algorithm, sorted(options.rest.items()), options["mode"],
         options["seed"], options["validation_fraction"], target.lower(), stmt.this.model_name.lower(),
         rows_digest(train), rows_digest(validate)],
        default=str).encode()).hexdigest()
    existing = session.catalog.studies.study(name)
    if existing is not None:
        if existing.definition != definition:
            what = ("another objective" if json.loads(existing.options).get("objective") != ref
                    else "its rows, SEARCH, USING or the options differ")
            raise ProgrammingError(f'Study "{name}" exists with another definition ({what}): DROP STUDY {name} '
                                   "first, or name this one with WITH (study_name = '...').",
                                   code="study_definition_changed")
        if existing.status == "finished":
            return study_result(session, existing)
    search = make_algorithm(algorithm, space, max_epochs=1, mode=options["mode"], seed=options["seed"],
                            study_name=name, options=options.rest)
    claim = _row(name, stmt, options, ref, algorithm, space, definition, "running", None, None, 0, 0)
    claim_study(session, claim)  # the name is claimed while the trials run (another run is refused)
    try:
        trials = _run(search, function, train, validate, target)
        _write(session, name, stmt, options, ref, algorithm, space, definition, search, trials, where)
    except BaseException:
        with catalog_write(session) as catalog:
            catalog.studies.drop_study(name)
        raise
    finally:
        release_study(name)
    return study_result(session, session.catalog.studies.study(name))


def _run(search: Any, function: Any, train: pa.Table, validate: pa.Table,
         target: str) -> dict[int, tuple[dict, Optional[float], Optional[str]]]:
    """Every trial the algorithm asks, scored, told in trial order."""
    trials: dict[int, tuple[dict, Optional[float], Optional[str]]] = {}
    while not search.finished:
        requests = search.ask()
        if not requests:
            break
        for request in sorted(requests, key=lambda r: r.trial):
            value, error = _score(function, dict(request.config), train, validate, target)
            trials[request.trial] = (dict(request.config), value, error)
            if value is not None:
                search.tell(request.trial, [value])
            else:
                search.tell_failed(request.trial, str(error))
    return trials


def _row(name: str, stmt: TuneModel, options: OptionValues, ref: str, algorithm: str, space: Any, definition: str,
         status: str, best: Optional[int], value: Optional[float], done: int, scored: int) -> StudyRow:
    return StudyRow(name, stmt.this.model_name.lower(), 0, algorithm, "objective", options["mode"], 1, options["seed"],
                    space.to_json(), json.dumps(dict(options.rest, objective=ref), default=str),
                    stmt.args["train"].sql(dialect=msql.DIALECT),
                    stmt.args["validate"].sql(dialect=msql.DIALECT) if stmt.args.get("validate") is not None else None,
                    stmt.args["target"].name, "", definition, status, None, best, value, done, scored, done)


def _write(session: Session, name: str, stmt: TuneModel, options: OptionValues, ref: str, algorithm: str, space: Any,
           definition: str, search: Any, trials: dict, where: str) -> None:
    scored = {t: v for t, (_, v, e) in trials.items() if e is None}
    if not scored:
        first = trials[min(trials)][2] if trials else "no trial ran"
        raise ProgrammingError(f"{where}: every trial failed; the first: {first}", code="invalid_hyperparameter")
    sign = 1.0 if options["mode"] == "max" else -1.0
    best = max(scored, key=lambda t: (sign * scored[t], -t))  # a tie goes to the earlier trial
    row = _row(name, stmt, options, ref, algorithm, space, definition, "finished", best, scored[best], len(trials),
               len(scored))
    with catalog_write(session) as catalog:
        for trial, (config, value, error) in sorted(trials.items()):
            metrics = (value,) if value is not None else ()
            catalog.studies.put_trial(TrialRow(name, trial, json.dumps(config, default=str),
                                               json.dumps(space.sequence(config, len(metrics)), default=str),
                                               search.status(trial), len(metrics), metrics, value, value, None, None,
                                               error))
        catalog.studies.put_study(row)
