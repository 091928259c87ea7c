"""``ALTER MODEL``: aliases (MLflow's registry aliases), promotion by a metric (``SET ALIAS a = BEST BY metric``,
as PostgresML deploys the best model) and tags (MLflow's), written in a catalog transaction of their own.

``BEST BY metric [ON input]`` reads the recorded evaluations (``modelsql.evaluations``): the rows are those of the
input written after ON (their fingerprint, computed as EVALUATE records it, so parameters count and the text need
not match), else those of the model's latest evaluation that has the metric; versions evaluated on other rows, with
other averaging, positive class or threshold, or on the rows they were trained on are never compared; each
version's latest evaluation counts, and the best value wins (highest, or lowest for ``log_loss`` and the errors; a
tie goes to the newer version); versions whose evaluation lacks the metric (NULL: no probabilities known) are
named in ``versions_left_out``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from sqlglot import exp

from modelsql.duckdb_errors import translate
from modelsql.errors import Error, ProgrammingError, did_you_mean
from modelsql.estimators.scoring import HIGHER_IS_BETTER, LOWER_IS_BETTER
from modelsql.sql.models import AlterModel
from modelsql.engine.evaluate.binding import input_text
from modelsql.engine.evaluate.recording import query_fingerprint
from modelsql.engine.handlers import catalog_write_retrying, handles
from modelsql.engine.options import value
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["best_version"]


@handles(AlterModel)
def _alter(stmt: AlterModel, session: Session, params: list) -> Result:
    if stmt.args.get("tag") is not None:
        return _tag(stmt, session, params)
    if stmt.args["action"] == "drop":
        return _drop_alias(stmt, session)
    ref, alias = stmt.this, _name(stmt.args["alias"], "alias")
    name = ref.model_name.lower()
    session.get_model(ref.model_name, None, ref)  # model_not_found, pointed
    if stmt.args.get("metric") is None:
        version = int(stmt.args["version"].this)
        session.get_model(ref.model_name, version, ref)  # before the write commits the user's transaction

        def set_alias() -> None:  # checked in the write's own snapshot: no alias to a dropped version
            session.get_model(ref.model_name, version, ref)  # version_not_found, pointed
            session.catalog.aliases.set(name, alias, version)

        catalog_write_retrying(session, set_alias)  # (another connection moving the alias at once: tried again)
        return Result(session.duck, rowcount=1)
    metric = stmt.args["metric"].name.lower()
    source = stmt.args.get("source")
    fingerprint = _fingerprint(session, source, params) if source is not None else None
    text = input_text(source) if source is not None else None
    best_version(session, name, metric, fingerprint, text)  # no_evaluation ... before the write commits the user's

    def set_best() -> dict:  # chosen again in the write's own snapshot (an evaluation may have come)
        best = best_version(session, name, metric, fingerprint, text)
        session.catalog.aliases.set(name, alias, best["version"])
        return best

    chosen = catalog_write_retrying(session, set_best)
    columns = [("model", "VARCHAR"), ("alias", "VARCHAR"), ("version", "INTEGER"), ("metric", "VARCHAR"),
               ("value", "DOUBLE"), ("input", "VARCHAR"), ("evaluation", "BIGINT"), ("versions_compared", "INTEGER"),
               ("versions_left_out", "VARCHAR")]
    row = (name, alias, chosen["version"], metric, chosen["value"], chosen["input"], chosen["evaluation"],
           chosen["compared"], chosen["left_out"])
    return Result(session.duck, description=[(n, t, None, None, None, None, True) for n, t in columns], rows=[row])


_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""An alias name: a word (SHOW MODELS lists aliases as ``a = 3, b = 4``, which other characters would garble)."""

_RESERVED_ALIAS = re.compile(r"^(latest|v\d+)$", re.I)
"""Alias names MLflow's registry reserves: ``latest``, ``v1``, ``v2`` ... read as versions, not aliases."""


def _name(node: exp.Expression, what: str) -> str:
    """An alias or tag name, lower-cased.

    Raises:
        ProgrammingError: ``invalid_name`` for an empty name, or an alias that is not a word.
    """
    if not node.name.strip():
        raise ProgrammingError(f"An empty {what} name: name it" + (" (letters, digits, underscores)." if what == "alias"
                                                                   else "."), code="invalid_name")
    if what == "alias" and not _ALIAS.match(node.name):
        raise ProgrammingError(f"Alias name {node.name!r}: an alias is letters, digits and underscores, not starting "
                               "with a digit (champion, challenger_2).", code="invalid_name")
    if what == "alias" and _RESERVED_ALIAS.match(node.name):
        raise ProgrammingError(f"Alias name {node.name!r} is reserved, as in MLflow's registry: it reads as the latest "
                               "version or a version number (write VERSION n); name the alias otherwise.",
                               code="invalid_name")
    return node.name.lower()


def _fingerprint(session: Session, source: exp.Expression, params: list) -> str:
    """The fingerprint EVALUATE records of the rows of ``source`` (``<rows>:<sum of the rows' hashes>``).

    Raises:
        ProgrammingError (or the PEP 249 class of DuckDB's error): the input is not a relation.
    """
    try:
        return query_fingerprint(session, exp.select("*").from_(source.copy()), params)
    except Exception as exc:
        raise session.pointed(translate(exc), source if isinstance(source, exp.Table) else None) from None


_BY_CLASS = ("precision", "recall", "f1_score", "roc_auc")
"""The metrics the classes' averaging and the positive class change."""
_BY_LABEL = ("accuracy", "precision", "recall", "f1_score")
"""The metrics a threshold changes (it decides the predicted class)."""


def _scoring(metric: str, r: Any) -> tuple:
    """What makes two evaluations' ``metric`` comparable: the TARGET column; the classes' averaging and the positive
    class for the metrics they change (a binary ROC AUC is one whatever the averaging, and the same for either
    class); the threshold and the class it thresholds for those of the predicted class; nothing more for the
    others (log loss, a regressor's)."""
    metrics, threshold = r.metrics, r.options.get("threshold")
    by_class = metric in _BY_CLASS and not (metric == "roc_auc" and len(metrics.get("labels") or ()) <= 2)
    by_label = metric in _BY_LABEL and threshold is not None
    return (r.target.lower(), metrics.get("average") if by_class else None,
            str(metrics.get("positive")) if by_class or by_label else None, threshold if by_label else None)


@dataclass(frozen=True)
class _Evaluated:
    """One recorded evaluation, as BEST BY reads it."""

    evaluation: int
    version: int
    input: str
    fingerprint: str
    target: str
    metrics: dict
    options: dict


def best_version(session: Session, name: str, metric: str, fingerprint: Optional[str],
                 input_text: Optional[str] = None) -> dict[str, Any]:
    """The version of model ``name`` whose latest evaluation on one set of rows scores best by ``metric`` (see the
    module): ``{"version", "value", "input", "evaluation", "compared", "left_out"}``.

    Raises:
        ProgrammingError: ``unknown_metric`` (with a "did you mean"); ``no_evaluation`` (no recorded evaluation
            of the model has the metric, on those rows).
    """
    known = HIGHER_IS_BETTER + LOWER_IS_BETTER
    if metric not in known:
        raise ProgrammingError(f"BEST BY {metric}: not a metric EVALUATE records.{did_you_mean(metric, known)} "
                               f"Metrics: {', '.join(known)}.", code="unknown_metric")
    rows, own_rows = _evaluations(session, name, fingerprint)
    scored = [r for r in rows if r.metrics.get(metric) is not None]
    if not scored:
        raise _no_evaluation(name, metric, fingerprint, own_rows,
                             _skipping_inputs(session, name, metric, input_text) if fingerprint is not None else [])
    on_those = [r for r in rows if r.fingerprint == scored[0].fingerprint]  # the rows of the newest evaluation
    with_value = [r for r in on_those if r.metrics.get(metric) is not None]
    scoring = _most_shared_scoring(metric, with_value)
    chosen: dict[int, _Evaluated] = {}
    for r in with_value:  # newest first: each version's newest evaluation with a value, scored alike
        if r.version not in chosen and _scoring(metric, r) == scoring:
            chosen[r.version] = r
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    version = max(chosen, key=lambda v: (sign * float(chosen[v].metrics[metric]), v))
    alike = {r.version for r in on_those if _scoring(metric, r) == scoring}
    trained_on = {v for v, f in own_rows if f == scored[0].fingerprint} - {r.version for r in on_those}
    unscored = set(session.catalog.versions(name)) - {r.version for r in on_those} - trained_on
    left_out = ", ".join([f"{v} (no {metric})" for v in sorted(alike - set(chosen))]
                         + [f"{v} (scored against another target or with another averaging, positive class or "
                            "threshold)" for v in sorted({r.version for r in on_those} - alike)]
                         + [f"{v} (scored on the rows it was trained on)" for v in sorted(trained_on)]
                         + ([f"{', '.join(map(str, sorted(unscored)))} (not evaluated on these rows)"]
                            if unscored else [])) or None
    best = chosen[version]
    return {"version": version, "value": float(best.metrics[metric]), "input": best.input,
            "evaluation": best.evaluation, "compared": len(chosen), "left_out": left_out}


def _evaluations(session: Session, name: str, fingerprint: Optional[str]) -> tuple[list[_Evaluated], list[tuple]]:
    """The model's recorded evaluations that count (newest first; on ``fingerprint``'s rows when given), and
    ``(version, fingerprint)`` of those left out for scoring a version on its training query's rows (its lineage's
    digest); CREATE MODEL's own evaluation of its training rows never counts either."""
    rows = session.catalog.query(
        "SELECT e.evaluation, e.version, e.input, e.fingerprint, e.target, e.metrics, e.options, o.digest IS NOT "
        "DISTINCT FROM 'rows:' || e.fingerprint FROM {s}.evaluations e LEFT JOIN {s}.model_origins o ON o.name = "
        "e.name AND o.version = e.version WHERE e.kind = 'model' AND e.name = ? AND coalesce(e.options ->> 'rows', "
        "'') <> 'training'" + (" AND e.fingerprint = ?" if fingerprint is not None else "")
        + " ORDER BY e.evaluation DESC", [name, *([fingerprint] if fingerprint is not None else [])])
    own = [(v, f) for _, v, _, f, _, _, _, trained in rows if trained]
    kept = [_Evaluated(e, v, text, f, str(target), json.loads(m), json.loads(o))
            for e, v, text, f, target, m, o, trained in rows if not trained]
    return kept, own


def _skipping_inputs(session: Session, name: str, metric: str, input_text: Optional[str]) -> list[str]:
    """The inputs of the model's evaluations with ``metric`` made with ``on_null = 'skip'`` (recorded on the rows
    they evaluated, not every row of their input) on BEST BY's ON as written (``input_text``)."""
    rows = session.catalog.query("SELECT DISTINCT input FROM {s}.evaluations WHERE kind = 'model' AND name = ? AND "
                                 "options ->> 'on_null' = 'skip' AND input = ? AND metrics ->> ? IS NOT NULL",
                                 [name, input_text, metric])
    return [str(r[0]) for r in rows]


def _no_evaluation(name: str, metric: str, fingerprint: Optional[str], own_rows: list[tuple],
                   skipping: Sequence[str] = ()) -> ProgrammingError:
    where = " on those rows" if fingerprint is not None else ""
    own = sorted({v for v, _ in own_rows})
    trained = (f" (version{'s' if len(own) > 1 else ''} {', '.join(map(str, own))} "
               f"{'were' if len(own) > 1 else 'was'} scored on the rows of {'their' if len(own) > 1 else 'its'} "
               "training query)" if own else "")
    return ProgrammingError(f'Model "{name}" has no recorded evaluation with {metric}{where}{trained} (a regressor '
                            "has no accuracy, a classifier no r2_score; scores on training rows do not count): run "
                            f"EVALUATE MODEL {name} VERSION n ON ... TARGET ... for the versions to compare first."
                            + (f" Its evaluations with on_null = 'skip' (on {', '.join(skipping[:3])}) are recorded on "
                               "the rows they evaluated, those with no NULL feature: name exactly those rows in ON, "
                               "(SELECT * FROM ... WHERE <each feature> IS NOT NULL)." if skipping and not own else ""),
                            code="no_evaluation")


def _most_shared_scoring(metric: str, scored: list[_Evaluated]) -> tuple:
    """The scoring (:func:`_scoring`) most versions have an evaluation with among ``scored`` (newest first), the
    newest evaluation's on a tie: an exploratory EVALUATE with a threshold does not decide how the rest compare."""
    versions: dict[tuple, set[int]] = {}
    for r in scored:
        versions.setdefault(_scoring(metric, r), set()).add(r.version)
    return max(versions, key=lambda k: len(versions[k]))  # (dicts keep insertion order: the newest first on a tie)


def _drop_alias(stmt: AlterModel, session: Session) -> Result:
    ref, alias = stmt.this, stmt.args["alias"].name.lower()
    name = ref.model_name.lower()
    session.get_model(ref.model_name, None, ref)
    if alias not in session.catalog.aliases.of(name):
        if stmt.args.get("exists"):
            return Result(session.duck, rowcount=0)
        raise session.pointed(_alias_error(session, name, alias), ref)
    catalog_write_retrying(session, lambda: session.catalog.aliases.drop(name, alias))
    return Result(session.duck, rowcount=1)


def _alias_error(session: Session, name: str, alias: str) -> Error:
    if _RESERVED_ALIAS.match(alias):
        return ProgrammingError(f"Alias name {alias!r} is reserved, as in MLflow's registry: it names the latest "
                                "version or a version number, and is no alias to drop.", code="invalid_name")
    try:
        session.catalog.aliases.resolve(name, alias)
    except Error as err:
        return err
    raise AssertionError("unreachable: the alias is missing")  # pragma: no cover


def _tag(stmt: AlterModel, session: Session, params: list) -> Result:
    """SET TAG t = 'v' (replacing it) / DROP TAG [IF EXISTS] t, of the model or of ``VERSION n``; the model and
    version are checked in the write's own snapshot (no tag on a version another connection dropped)."""
    ref, tag = stmt.this, _name(stmt.args["tag"], "tag")
    name = ref.model_name.lower()
    version = ref.version_number
    number = 0 if version is None else version
    if stmt.args["action"] == "set":
        text = value(stmt.args["value"], params)
        if not isinstance(text, str):
            raise ProgrammingError(f"ALTER MODEL {name} SET TAG {tag}: a tag's value is text, not {text!r}.",
                                   code="invalid_argument")
        session.get_model(ref.model_name, version, ref)  # before the write commits the user's transaction

        def set_tag() -> None:
            session.get_model(ref.model_name, version, ref)  # model_not_found / version_not_found, pointed
            session.catalog.tags.set(name, number, tag, text)

        catalog_write_retrying(session, set_tag)
        return Result(session.duck, rowcount=1)
    session.get_model(ref.model_name, version, ref)
    tags = session.catalog.tags.of(name, number)
    if tag not in tags:
        if stmt.args.get("exists"):
            return Result(session.duck, rowcount=0)
        whose = f'Model "{name}" version {version}' if version is not None else f'Model "{name}"'
        raise session.pointed(ProgrammingError(
            f'{whose} has no tag "{tag}".{did_you_mean(tag, list(tags))} Its tags: {", ".join(tags) or "none"}.',
            code="tag_not_found"), ref)
    catalog_write_retrying(session, lambda: session.catalog.tags.drop(name, number, tag))
    return Result(session.duck, rowcount=1)
