"""The physical operator protocol.

A physical operator is what the planner (:mod:`modelsql.engine.query.physical`)
builds from a logical plan node to run it. Each gives its output schema, its
children, ``execute()`` producing Arrow record batches, and the fields EXPLAIN
prints (EXPLAIN ANALYZE adds the measured ones).
"""

from __future__ import annotations

from typing import Iterator, Protocol, Sequence

import pyarrow as pa


class Operator(Protocol):
    """One physical operator.

    Attributes:
        name: the operator's name as EXPLAIN prints it (``StreamPredict``, ``BatchPredict``).
        schema: ``(column name, DuckDB type)`` of every output column, in order.
        children: the operators whose rows it reads (inner PREDICTs of its input).
    """

    name: str
    schema: Sequence[tuple[str, str]]
    children: Sequence["Operator"]

    def execute(self) -> Iterator[pa.RecordBatch]:
        """Its rows, as Arrow record batches."""
        ...

    def explain(self) -> dict[str, str]:
        """Fields EXPLAIN prints for it (planned ones), in order."""
        ...

    def measured(self) -> dict[str, str]:
        """Fields EXPLAIN ANALYZE adds once it ran: rows and time."""
        ...
