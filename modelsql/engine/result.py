"""What one statement leaves behind for the cursor, and the resources it must give back.

A :class:`Result` owns everything a statement registered on the DuckDB
connection: the PREDICT functions of its stream operators, the Arrow tables of
its batch operators, and the transaction opened so that a batch operator's input
and the statement read one snapshot. :meth:`Result.release` gives them back once
the cursor has read the rows (or dropped them); :meth:`Result.rollback` after a
failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import duckdb

from modelsql.duckdb_errors import translate
from modelsql.errors import Error


@dataclass
class Result:
    """One statement's result.

    Attributes:
        description: PEP 249 ``cursor.description`` (None: no rows).
        rowcount: rows changed (INSERT/UPDATE/DELETE), else -1.
        rows: the rows, when built in Python (SHOW, VACUUM, EXPLAIN); None when streaming.
        table: the rows as a ``pyarrow.Table``, when the query was run for Arrow
            (:func:`~modelsql.engine.query_handler.run_query` with ``arrow``).
        streaming: DuckDB's connection holds a pending result to fetch from.
        operators: the physical operators of the statement (EXPLAIN ANALYZE reads their counters).
        functions: names of the Python functions registered on the connection.
        sources: names of the Arrow tables registered on the connection.
        own_snapshot: a transaction begun for this statement alone, committed on release.
        translate: turns an exception raised while fetching into the modelsql error (set by the query).
    """

    duck: Optional[duckdb.DuckDBPyConnection] = None
    description: Optional[list[tuple]] = None
    rowcount: int = -1
    rows: Optional[list[tuple]] = None
    table: Any = None
    streaming: bool = False
    operators: list = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    own_snapshot: bool = False
    translate: Optional[Callable[[BaseException], Error]] = None

    def adopt(self, other: "Result") -> None:
        """Take over what ``other`` registered (a statement's pieces gathered while planning)."""
        self.operators += other.operators
        self.functions += other.functions
        self.sources += other.sources
        self.own_snapshot = self.own_snapshot or other.own_snapshot
        other.operators, other.functions, other.sources, other.own_snapshot = [], [], [], False

    def release(self) -> None:
        """Unregister functions and tables; commit a transaction begun for this statement; send each PREDICT's
        final progress message (last: what a progress hook raises leaves nothing registered)."""
        try:
            self._give_back()
        finally:
            self._end_progress(ok=True)

    def _give_back(self) -> None:
        duck = self.duck
        if duck is None:
            return
        for name in self.functions:
            try:
                duck.remove_function(name)
            except Exception:
                pass
        for name in self.sources:
            try:
                duck.unregister(name)
            except Exception:
                pass
        self.functions, self.sources = [], []
        if self.own_snapshot:
            self.own_snapshot = False
            try:
                duck.execute("COMMIT")
            except Exception:
                try:
                    duck.execute("ROLLBACK")
                except Exception:
                    pass

    def rollback(self) -> None:
        """Release after a failure: a transaction begun for this statement is rolled back, not committed."""
        self._end_progress(ok=False)
        if self.own_snapshot and self.duck is not None:
            self.own_snapshot = False
            try:
                self.duck.execute("ROLLBACK")
            except Exception:
                pass
        self.release()

    def _end_progress(self, ok: bool) -> None:
        """Each PREDICT's final progress message (:mod:`modelsql.progress`): the statement's rows are read."""
        for op in self.operators:
            op.function.end_progress(ok)

    def error(self, exc: BaseException) -> Error:
        """The modelsql error for ``exc`` raised while this result was fetched."""
        return self.translate(exc) if self.translate is not None else translate(exc)
