"""``ALTER MODEL``: aliases (MLflow's registry aliases), promotion by a metric (``SET ALIAS a = BEST BY metric``,
as PostgresML deploys the best model) and tags (MLflow's), written in a catalog transaction of their own.

``BEST BY metric [ON input]`` reads the recorded evaluations (``modelsql.evaluations``): the input is the one
written after ON (as EVALUATE recorded it: ``TABLE t`` or the query's text), else the input of the model's
latest evaluation that has the metric; the rows compared are those of that input's latest evaluation (its
fingerprint), so versions evaluated on other rows are never compared; each version's latest evaluation on them
counts, and the best value wins (highest, or lowest for ``log_loss`` and the errors; a tie goes to the newer
version).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from sqlglot import exp

from modelsql import sql as msql
from modelsql.errors import Error, ProgrammingError, did_you_mean
from modelsql.sql.models import AlterModel
from modelsql.engine.handlers import catalog_write, handles
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["HIGHER_IS_BETTER", "LOWER_IS_BETTER", "best_version"]

HIGHER_IS_BETTER = ("accuracy", "precision", "recall", "f1_score", "roc_auc", "r2_score", "explained_variance")
LOWER_IS_BETTER = ("log_loss", "mean_absolute_error", "mean_squared_error", "root_mean_squared_error",
                   "median_absolute_error")


@handles(AlterModel)
def _alter(stmt: AlterModel, session: Session, params: list) -> Result:
    if stmt.args.get("tag") is not None:
        return _tag(stmt, session)
    if stmt.args["action"] == "drop":
        return _drop_alias(stmt, session)
    ref, alias = stmt.this, stmt.args["alias"].name.lower()
    name = ref.model_name.lower()
    session.get_model(ref.model_name, None, ref)  # model_not_found, pointed
    if stmt.args.get("metric") is None:
        version = int(stmt.args["version"].this)
        session.get_model(ref.model_name, version, ref)  # version_not_found, pointed
        with catalog_write(session) as catalog:
            catalog.aliases.set(name, alias, version)
        return Result(session.duck, rowcount=1)
    metric = stmt.args["metric"].name.lower()
    source = stmt.args.get("source")
    chosen = best_version(session, name, metric, _input_text(source) if source is not None else None)
    with catalog_write(session) as catalog:
        catalog.aliases.set(name, alias, chosen["version"])
    columns = [("model", "VARCHAR"), ("alias", "VARCHAR"), ("version", "INTEGER"), ("metric", "VARCHAR"),
               ("value", "DOUBLE"), ("input", "VARCHAR"), ("evaluation", "BIGINT"), ("versions_compared", "INTEGER")]
    row = (name, alias, chosen["version"], metric, chosen["value"], chosen["input"], chosen["evaluation"],
           chosen["compared"])
    return Result(session.duck, description=[(n, t, None, None, None, None, True) for n, t in columns], rows=[row])


def _input_text(source: exp.Expression) -> str:
    """The input as EVALUATE records it (``TABLE t`` or the query's text)."""
    text = source.sql(dialect=msql.DIALECT)
    return f"TABLE {text}" if isinstance(source, exp.Table) else text


def best_version(session: Session, name: str, metric: str, input_text: Optional[str]) -> dict[str, Any]:
    """The version of model ``name`` whose latest evaluation on one input scores best by ``metric`` (see the
    module): ``{"version", "value", "input", "evaluation", "compared"}``.

    Raises:
        ProgrammingError: ``unknown_metric`` (with a "did you mean"); ``no_evaluation`` (no recorded evaluation
            of the model has the metric, on that input).
    """
    known = HIGHER_IS_BETTER + LOWER_IS_BETTER
    if metric not in known:
        raise ProgrammingError(f"BEST BY {metric}: not a metric EVALUATE records.{did_you_mean(metric, known)} "
                               f"Metrics: {', '.join(known)}.", code="unknown_metric")
    rows = session.catalog.query(
        "SELECT evaluation, version, input, fingerprint, metrics ->> ? FROM {s}.evaluations WHERE kind = 'model' "
        "AND name = ? AND metrics ->> ? IS NOT NULL" + (" AND input = ?" if input_text is not None else "")
        + " ORDER BY evaluation DESC", [metric, name, metric, *([input_text] if input_text is not None else [])])
    if not rows:
        where = f" on {input_text}" if input_text is not None else ""
        raise ProgrammingError(f'Model "{name}" has no recorded evaluation with {metric}{where}: run EVALUATE MODEL '
                               f"{name} VERSION n ON ... TARGET ... for the versions to compare first.",
                               code="no_evaluation")
    _, _, text, fingerprint, _ = rows[0]
    latest: dict[int, tuple[int, float]] = {}
    for evaluation, version, row_input, row_fingerprint, value in rows:  # newest first: keep each version's first
        if row_input == text and row_fingerprint == fingerprint and version not in latest:
            latest[version] = (evaluation, float(json.loads(value)))
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    version = max(latest, key=lambda v: (sign * latest[v][1], v))
    return {"version": version, "value": latest[version][1], "input": text, "evaluation": latest[version][0],
            "compared": len(latest)}


def _drop_alias(stmt: AlterModel, session: Session) -> Result:
    ref, alias = stmt.this, stmt.args["alias"].name.lower()
    name = ref.model_name.lower()
    session.get_model(ref.model_name, None, ref)
    if alias not in session.catalog.aliases.of(name):
        if stmt.args.get("exists"):
            return Result(session.duck, rowcount=0)
        raise session.pointed(_alias_error(session, name, alias), ref)
    with catalog_write(session) as catalog:
        catalog.aliases.drop(name, alias)
    return Result(session.duck, rowcount=1)


def _alias_error(session: Session, name: str, alias: str) -> Error:
    try:
        session.catalog.aliases.resolve(name, alias)
    except Error as err:
        return err
    raise AssertionError("unreachable: the alias is missing")  # pragma: no cover


def _tag(stmt: AlterModel, session: Session) -> Result:
    """SET TAG t = 'v' (replacing it) / DROP TAG [IF EXISTS] t, of the model or of ``VERSION n``."""
    ref, tag = stmt.this, stmt.args["tag"].name.lower()
    name = ref.model_name.lower()
    version = ref.version_number
    session.get_model(ref.model_name, version, ref)  # model_not_found / version_not_found, pointed
    number = 0 if version is None else version
    if stmt.args["action"] == "set":
        with catalog_write(session) as catalog:
            catalog.tags.set(name, number, tag, stmt.args["value"].this)
        return Result(session.duck, rowcount=1)
    tags = session.catalog.tags.of(name, number)
    if tag not in tags:
        if stmt.args.get("exists"):
            return Result(session.duck, rowcount=0)
        whose = f'Model "{name}" version {version}' if version is not None else f'Model "{name}"'
        raise session.pointed(ProgrammingError(
            f'{whose} has no tag "{tag}".{did_you_mean(tag, list(tags))} Its tags: {", ".join(tags) or "none"}.',
            code="tag_not_found"), ref)
    with catalog_write(session) as catalog:
        catalog.tags.drop(name, number, tag)
    return Result(session.duck, rowcount=1)
