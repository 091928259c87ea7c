"""What the studies run in the statement's own process share (a scikit-learn model type's,
:mod:`.estimators`, and a Python objective's, :mod:`.objective`): their input rows and the digest that tells one set
of rows from another, and the claim on the study's name while their trials run."""

from __future__ import annotations

import hashlib
import typing
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from sqlglot import exp

from modelsql.catalog.studies import StudyRow
from modelsql.errors import Error, ProgrammingError
from modelsql.engine.handlers import catalog_write
from modelsql.engine.models.training_rows import query_rows
from modelsql.engine.tune.running import RUNNING, STARTING, owner_fields

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["claim_study", "release_study", "input_rows", "rows_digest"]


def input_rows(session: Session, source: exp.Expression,
               params: list) -> tuple[pa.Table, dict[str, str], np.ndarray]:
    """The rows of a statement's input, ``TABLE t`` or ``(query)``, their types and each row's hash
    (:func:`~.training_rows.query_rows`)."""
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
    """Claim the study's name while its trials run: write its ``running`` row, owned by this process, and note it
    in :data:`~.running.RUNNING` (:func:`release_study` ends the claim). A row of the name that a run left
    ``running`` in a process that died, ``interrupted`` or ``failed`` (such a study keeps nothing to resume) is
    replaced: the study runs again.

    Raises:
        ProgrammingError: ``study_running`` (a live run holds the name, or another connection claimed it at the
            same time).
    """
    running = ProgrammingError(f'Study "{row.name}" is running now.', code="study_running")
    with STARTING:
        if row.name in RUNNING:
            raise running
        try:
            with catalog_write(session) as catalog:
                catalog.studies.mark_interrupted(sorted(RUNNING))  # a dead run's claim: interrupted
                old = catalog.studies.study(row.name)
                if old is not None and old.status == "running":
                    raise running
                if old is not None:
                    catalog.studies.drop_study(row.name)
                catalog.studies.put_study(replace(row, **owner_fields(True)))
        except Error as err:
            if err.code in ("constraint_violation", "transaction_error"):  # two claims at once: one commit refused
                session.rollback()
                raise running from None
            raise
        RUNNING.add(row.name)


def release_study(name: str) -> None:
    """End :func:`claim_study`'s claim in this process (the caller rewrote or dropped the row)."""
    RUNNING.discard(name)
