"""What the query package may ask of the statement's session: :class:`PlanningContext` for binding, the
rules' inputs and physical lowering, :class:`QueryRunner` for the query handler that runs the plan.

The query package never imports the session (``tests/engine/test_layout.py``): it is handed an object
that satisfies these protocols (:class:`modelsql.engine.session.Session` does, and mypy checks the query
package against them, not against the session's other members). A planning context is also the
:class:`~modelsql.engine.artifacts.context.ArtifactContext` binding and lowering hand to the artifacts package
(a Python program's source and a TVM library checked for trust, sessions loaded, merged graphs built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence, Union

from modelsql.engine.artifacts.context import ArtifactContext

if TYPE_CHECKING:
    import duckdb
    from sqlglot import exp

    from modelsql.catalog.entries import ModelVersion, PipelineVersion, RoutedModels
    from modelsql.engine.plan_cache import PlanCache
    from modelsql.engine.query.learned_costs import Costs
    from modelsql.engine.result import Result
    from modelsql.errors import Error

__all__ = ["PlanningContext", "QueryRunner"]


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

    def costs(self) -> "Costs":
        """The learned cost model's answers for this database (defaults when there is none)."""
        ...

    def get_model(self, name: str, version: Optional[int], ref: Optional["exp.Expression"] = None, *,
                  pipeline: bool = False) -> Union["ModelVersion", "PipelineVersion"]:
        """A catalog model (or pipeline) version; raises ``model_not_found`` pointed at ``ref``."""
        ...

    def get_model_set(self, node: "exp.Expression") -> "RoutedModels":
        """The members of ``PREDICT(MODELS (...) ROUTE BY c, ...)``, checked to share one signature."""
        ...

    def pointed(self, err: "Error", ref: Optional["exp.Expression"]) -> "Error":
        """``err`` with the position of ``ref`` in the statement's text."""
        ...


class QueryRunner(PlanningContext, Protocol):
    """What the query handler also uses to run a plan and keep it: the statement's text, the plan cache,
    the transaction, and DuckDB's result."""

    text: str
    plans: "PlanCache"
    cache_key: Optional[tuple[object, ...]]

    def generation(self) -> int:
        """The database's generation, which cached plans are valid in."""
        ...

    def begin_if_needed(self) -> None:
        """Open the PEP 249 implicit transaction if one is due."""
        ...

    def run(self, text: str, params: Optional[Sequence[object]],
            on_error: Optional[Callable[[BaseException], "Error"]] = None) -> None:
        """Run SQL on DuckDB, turning its errors into modelsql's."""
        ...

    def duckdb_result(self, stype: str) -> "Result":
        """The result of what :meth:`run` ran, for the cursor."""
        ...
