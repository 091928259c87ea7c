"""The physical operator protocol: the contract between the operators and the planner's physical lowering.

A physical operator is what the planner (:mod:`modelsql.engine.query.physical`) builds from a logical plan
node to run it. Each gives its output schema, its children, ``execute()`` producing Arrow record batches,
and the fields EXPLAIN prints (EXPLAIN ANALYZE adds the measured ones); a PREDICT operator also exposes the
function that runs its model, its input, and how it runs (:class:`Operator`). Lowering wires each PREDICT one
of two ways, and each way is a protocol of its own: a :class:`StreamOperator` registers a function on
DuckDB's connection and is read through the SQL it gives; a :class:`BatchOperator` runs to completion first
and registers its result. ``modelsql.engine.query.physical`` is typed against these protocols (not against
the classes of :mod:`modelsql.operators.scan`), so mypy checks every call lowering makes.

The operators package never imports the engine: the logical node an operator runs is the protocol's type
parameter (the planner's ``PredictScan``).
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Protocol, Sequence, TypeVar, Union

import pyarrow as pa

from modelsql.operators.predict import PredictFunction

__all__ = ["Operator", "StreamOperator", "BatchOperator"]

ScanT_co = TypeVar("ScanT_co", covariant=True)
"""The logical node an operator runs (the planner's ``PredictScan``)."""


class Operator(Protocol[ScanT_co]):
    """One physical operator.

    Attributes:
        name: the operator's name as EXPLAIN prints it (``StreamPredict``, ``BatchPredict``).
        input_sql: its input relation as DuckDB SQL (``$1..$m`` parameters; inner PREDICTs lowered).
        params: the values of those parameters.
    """

    name: str
    input_sql: str
    params: list[object]

    @property
    def scan(self) -> ScanT_co:
        """The logical node it runs."""
        ...

    @property
    def schema(self) -> Sequence[tuple[str, str]]:
        """``(column name, DuckDB type)`` of every output column, in order."""
        ...

    @property
    def children(self) -> Sequence["Operator[object]"]:
        """The operators whose rows it reads (inner PREDICTs of its input)."""
        ...

    @property
    def function(self) -> PredictFunction:
        """The function that runs the model: its counters, the error it kept (the planner turns it into the
        user's error), its progress meter (set by the planner for each execution)."""
        ...

    @property
    def execution(self) -> str:
        """How it runs, as EXPLAIN prints it (``stream``, ``batch``, ``batch (column-major input)``)."""
        ...

    def execute(self) -> Iterator[pa.RecordBatch]:
        """Its rows, as Arrow record batches."""
        ...

    def explain(self) -> dict[str, str]:
        """Fields EXPLAIN prints for it (planned ones), in order."""
        ...

    def measured(self) -> dict[str, str]:
        """Fields EXPLAIN ANALYZE adds once it ran: rows and time."""
        ...


class StreamOperator(Operator[ScanT_co], Protocol[ScanT_co]):
    """An operator DuckDB runs inside the statement's pipeline, chunk by chunk, through a function
    registered on its connection (:class:`~modelsql.operators.scan.StreamPredict`).

    Attributes:
        param_numbers: the statement's parameter numbers behind :attr:`params` (a cached plan's next
            execution takes their new values, :meth:`reset`).
    """

    param_numbers: list[int]

    def register(self) -> str:
        """Register the function on the connection; its name (whoever holds the plan unregisters it)."""
        ...

    def call_sql(self) -> str:
        """The function call over the input's columns (several operators sharing one scan call theirs in it)."""
        ...

    def sql(self, source_sql: str) -> str:
        """The operator as a DuckDB subquery over ``source_sql`` (a table name or a parenthesised query)."""
        ...

    def reset(self, params: list[object]) -> None:
        """Before another execution of a cached plan: new input parameter values, counters from zero."""
        ...


class BatchOperator(Operator[ScanT_co], Protocol[ScanT_co]):
    """An operator run to completion before the statement, which then reads its registered result
    (:class:`~modelsql.operators.scan.BatchPredict`).

    Attributes:
        read_once: the statement reads the result exactly once (the planner knows): registered as a stream.
    """

    read_once: bool

    def run(self, register: Callable[[str, Union[pa.Table, pa.RecordBatchReader]], None],
            dry: bool = False) -> Optional[str]:
        """Run (``dry``: on no rows) and ``register`` the result under a name; the SQL that reads it, or None
        when it gave up (the planner streams the PREDICT instead)."""
        ...
