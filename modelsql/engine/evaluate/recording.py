"""EVALUATE of rows a statement holds (an Arrow table), recorded in ``modelsql.evaluations``: how the statements
that make a version record what it scores (``CREATE MODEL ... AS`` on its validation rows, ``FINETUNE`` before and
after, ``CREATE MODEL ... FROM STUDY`` on the study's validation rows), so the metrics are EVALUATE's, comparable
with every other evaluation of those rows (``BEST BY``); and EVALUATE's fingerprint of the rows of a query, as those
statements and ``BEST BY ... ON`` take it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
from sqlglot import exp

from modelsql import sql as msql
from modelsql.arrow_numpy import numbers
from modelsql.catalog.evaluations import EvaluationRow
from modelsql.catalog.lineage import Origin
from modelsql.sql.evaluate import EvaluateModel
from modelsql.sql.grammar import ModelRef
from modelsql.engine.evaluate.binding import bind_evaluate
from modelsql.engine.evaluate.measure import measure
from modelsql.engine.evaluate.queries import fingerprint_sql, fingerprint_text
from modelsql.engine.query.bind_statement import renumber
from modelsql.engine.query_handler import columns_of, run_query
from modelsql.engine.handlers import catalog_write

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["record_evaluation", "fingerprint_of", "split_row_hash", "hashes_fingerprint", "query_fingerprint",
           "lineage_digest", "study_query", "study_fingerprint", "study_lineage", "study_origin"]

def fingerprint_of(duck: Any, query: exp.Expression, params: Sequence[Any]) -> str:
    """The fingerprint EVALUATE records of the rows of ``query`` (plain SQL) run on the DuckDB connection ``duck``
    (``<rows>:<sum of the rows' hashes over every column>``): what ``EVALUATE ... ON (query)`` records, whatever
    the model. Its ``$k`` are ``params[k - 1]`` (a statement's values, some of which it may not use).

    Raises:
        the query's DuckDB errors, as they are.
    """
    sql, used = renumber(query)
    values = [params[k - 1] for k in used] or None
    described = duck.execute(f"DESCRIBE {sql}", values).fetchall()
    columns = [exp.to_identifier(str(r[0]), quoted=True).sql("duckdb") for r in described]
    rows = duck.execute(fingerprint_sql(columns, f"({sql})"), values).fetchall()  # (all: no result left open)
    return fingerprint_text(rows[0][0], rows[0][1])


def split_row_hash(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """A table read with its rows' hashes as its last column (``run_query(..., row_hash=True)``), and the hashes
    apart: ``(rows without the column, uint64 (n,))``."""
    last = table.num_columns - 1
    hashes = numbers(table.column(last)) if table.num_rows else np.zeros(0, dtype=np.uint64)
    return table.remove_column(last), np.asarray(hashes, dtype=np.uint64)


def hashes_fingerprint(hashes: np.ndarray) -> str:
    """EVALUATE's fingerprint (``<count>:<hash>``, the sum of the rows' hashes modulo 2**64: order-independent) of
    rows whose ``hash()`` over every column DuckDB computed as a statement read them (:func:`split_row_hash`; a
    subset of them taken by position for rows left out): what ``EVALUATE ... ON (query)`` records of the same rows,
    whatever their types, with the query run once."""
    return fingerprint_text(len(hashes), int(np.add.reduce(hashes, dtype=np.uint64)) if len(hashes) else 0)


def query_fingerprint(session: Session, query: exp.Expression, params: Sequence[Any]) -> str:
    """:func:`fingerprint_of` ``query`` run by the session: a query with a PREDICT (or another table function of
    ours) is planned and run as a query (its rows, predictions included, are what ``EVALUATE ... ON (query)``
    reads and fingerprints); plain SQL goes to DuckDB as it is.

    Raises:
        the query's errors (a plain query's DuckDB errors as they are; a planned one's as modelsql errors).
    """
    text = query.sql(dialect=msql.DIALECT)
    if not msql.mentions_models(text):
        return fingerprint_of(session.duck, query, params)
    columns = [exp.to_identifier(n, quoted=True).sql("duckdb") for n, _ in columns_of(text, session, list(params))]
    out, _, _ = run_query(msql.parse(fingerprint_sql(columns, f"({text})"))[0], session, list(params))
    try:
        row = session.duck.fetchone()
    finally:
        session.duck.fetchall()
        out.release()
    assert row is not None  # an aggregate has one row
    return fingerprint_text(row[0], row[1])


def lineage_digest(fingerprint: str) -> str:
    """A version's lineage digest of the rows it was trained on (``rows:<count>:<hash>``) from EVALUATE's
    fingerprint of them: BEST BY leaves out an evaluation whose fingerprint it names."""
    return f"rows:{fingerprint}"


def study_query(sql: str) -> exp.Expression:
    """A study's stored input (a relation as written after ``ON TABLE`` / ``ON``, or a query) as a query.

    Raises:
        ProgrammingError: ``parse_error`` (a text no study stores).
    """
    return msql.parse(sql if sql.lstrip()[:6].upper() in ("SELECT", "WITH ", "FROM ") else f"SELECT * FROM {sql}")[0]


def study_fingerprint(session: Session, sql: Optional[str], params: Sequence[Any] = ()) -> Optional[str]:
    """:func:`fingerprint_of` a study's stored input (its training or ``VALIDATE ON`` rows, :func:`study_query`,
    whose ``$k`` are the TUNE statement's ``params``), read on a cursor of its own (the statement's connection may
    hold a result open), or None: none, or one that no longer runs (a table dropped since the TUNE, parameters the
    study did not keep)."""
    if sql is None:
        return None
    cursor = session.duck.cursor()
    try:
        return fingerprint_of(cursor, study_query(sql), params)
    except Exception:  # (what the study read is gone or changed shape: nothing to compare with)
        return None
    finally:
        cursor.close()


def study_lineage(session: Session, sql: str, params: Sequence[Any] = ()) -> Optional[str]:
    """The lineage digest (:func:`lineage_digest`) of a study's training rows as they are now, or None when they
    no longer read (:func:`study_fingerprint`)."""
    fingerprint = study_fingerprint(session, sql, params)
    return None if fingerprint is None else lineage_digest(fingerprint)


def study_origin(session: Session, study: Any, trial: Any, params: Sequence[Any] = ()) -> Origin:
    """The origin of a version made FROM STUDY (``study``, ``trial``: the catalog's rows): the statement, the
    fingerprint of the study's training rows as TUNE read them (kept in its options; for a study made before they
    were kept, as they are now: :func:`study_lineage`, its ``$k`` the TUNE's ``params``), the study and trial, and
    the model version it tuned (a trainable's, or a model trained in SQL that it started from; none when
    ``study.model_version`` is 0)."""
    parent = ({"parent_kind": "model", "parent_name": study.model, "parent_version": study.model_version}
              if study.model_version else {})
    stored = json.loads(study.options or "{}").get("train_fingerprint")  # as TUNE read them (older studies: now)
    digest = lineage_digest(stored) if stored else study_lineage(session, study.train_sql, params)
    return Origin("study", f"CREATE MODEL ... FROM STUDY {study.name} TRIAL {trial.trial}", digest,
                  study=study.name, trial=trial.trial, **parent)


def record_evaluation(session: Session, kind: str, name: str, version: int, rows: pa.Table, target: str, *,
                      input_text: str, options: Mapping[str, Any], called_as: str,
                      fingerprint: Optional[str] = None) -> EvaluationRow:
    """EVALUATE ``kind`` (``"model"`` / ``"pipeline"``) ``name`` version ``version`` on ``rows`` (the features, bound
    as EVALUATE binds them, and the ``target`` column), recorded (in a catalog transaction of its
    own) with ``input_text`` as its input and ``options`` as its options. Its PREDICT reports no progress (the
    statement that records it reports its own).

    Args:
        called_as: how the messages name what is evaluating (``"CREATE MODEL m, evaluating its validation rows
            with EVALUATE"``).
        fingerprint: the fingerprint to record instead of that of ``rows`` (which hold the features and the
            target alone): the rows as the user's table holds them (:func:`fingerprint_of`), so an EVALUATE of
            that table is an evaluation of the same rows.

    Raises:
        the errors of EVALUATE (``invalid_target``, ``not_a_number`` ...).
    """
    table = f"__msql_rows_{id(rows):x}"
    session.duck.register(table, rows)
    hook, session.progress = session.progress, None  # the statement reports its own progress, not this PREDICT's
    try:
        node = EvaluateModel(this=ModelRef(this=exp.to_identifier(name), version=exp.Literal.number(version),
                                           pipeline=kind == "pipeline"),
                             source=exp.Subquery(this=exp.select("*").from_(exp.to_identifier(table, quoted=True))),
                             target=exp.to_identifier(target, quoted=True))
        node.meta["called_as"] = called_as
        bound = bind_evaluate(node, session, [])
        done = measure(node, bound, session, [])
    finally:
        session.progress = hook
        session.duck.unregister(table)
    metrics = {k: v for k, v in done.metrics.items() if k != "positive_class"}
    with catalog_write(session) as catalog:
        return catalog.evaluations.add(EvaluationRow(kind, name, version, bound.task, target, input_text,
                                                     fingerprint or done.fingerprint, done.rows, metrics,
                                                     dict(options)))
