"""What the query package may read of the statement's session: :class:`PlanningContext`, for binding, the
rules' inputs and physical lowering. Attributes only: the package calls no method of the session (the
catalog entries a statement names are looked up by :mod:`.catalog_entries`, the learned costs loaded by
:func:`.learned_costs.costs_for`), so nothing in it calls back up into the statement loop.

The query package never imports the session (``tests/engine/test_layout.py``): it is handed an object
that satisfies this protocol (:class:`modelsql.engine.session.Session` does, and mypy checks the query
package against it, not against the session's other members). A planning context is also the
:class:`~modelsql.engine.artifacts.context.ArtifactContext` binding and lowering hand to the artifacts package
(a Python program's source and a TVM library checked for trust, sessions loaded, merged graphs built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from modelsql.engine.artifacts.context import ArtifactContext

if TYPE_CHECKING:
    import duckdb


__all__ = ["PlanningContext"]


class PlanningContext(ArtifactContext, Protocol):
    """What binding and lowering read: the DuckDB connection, the catalog and the store (and whether stored
    code may load: :class:`ArtifactContext`), the models a statement names, the learned costs, and how to
    point an error at the statement's text."""

    duck: "duckdb.DuckDBPyConnection"
    optimize: bool
    """Whether the rewrite rules run (``Connection.optimize``)."""
    qmark_style: bool
    """Whether the statement's parameters were written as ``?`` (numbered ``$k`` internally)."""
    in_transaction: bool
    progress: Optional[Callable[[dict[str, Any]], Any]]
    """The connection's progress hook (:mod:`modelsql.progress`), or None."""
    text: str
    """The statement's text (``?`` numbered): errors point into it (:func:`~.catalog_entries.pointed`)."""

    database_key: str
    """What names the database process-wide: the learned costs and cached plans are kept per database."""
