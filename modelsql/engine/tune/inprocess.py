"""What the studies run in the statement's own process share (a scikit-learn model type's,
:mod:`.estimators`, and a Python objective's, :mod:`.objective`): their input rows and the digest that tells one set
of rows from another, and the claim on the study's name while their trials run."""

from __future__ import annotations

import hashlib
import typing
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from modelsql.catalog.studies import StudyRow
from modelsql.errors import Error, ProgrammingError
from modelsql.engine.handlers import catalog_write
from modelsql.engine.models.training_rows import query_rows

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["claim_study", "input_rows", "rows_digest"]


def input_rows(session: Session, source: exp.Expression, params: list) -> tuple[pa.Table, dict[str, str]]:
    """The rows of a statement's input, ``TABLE t`` or ``(query)`` (:func:`~.training_rows.query_rows`)."""
    query = typing.cast(exp.Expression, exp.select("*").from_(source.copy()) if isinstance(source, exp.Table)
                        else source.unnest().copy())
    return query_rows(session, query, params)


def rows_digest(*tables: pa.Table) -> str:
    """SHA-256 of the tables' schemas and bytes: the rows a study ran on (others make it another study)."""
    digest = hashlib.sha256()
    for table in tables:
        digest.update(str(table.schema).encode())
        for column in table.columns:
            for buffer in column.combine_chunks().buffers():
                if buffer is not None:
                    digest.update(buffer)
    return digest.hexdigest()


def claim_study(session: Session, row: StudyRow) -> None:
    """Write the study's ``running`` row, so another run of the name is refused while its trials run.

    Raises:
        ProgrammingError: ``study_running`` (the name is taken, or another connection claimed it at the same time).
    """
    running = ProgrammingError(f'Study "{row.name}" is running now (when no statement runs it, a run that was killed '
                               f"left it: DROP STUDY {row.name}).", code="study_running")
    try:
        with catalog_write(session) as catalog:
            if catalog.studies.study(row.name) is not None:
                raise running
            catalog.studies.put_study(row)
    except Error as err:
        if err.code in ("constraint_violation", "transaction_error"):  # two claims at once: one commit is refused
            session.rollback()
            raise running from None
        raise
