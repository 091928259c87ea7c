"""The logical plan: frozen nodes for what a statement asks of models.

A query's relational part stays a sqlglot tree that DuckDB will run; each
``PREDICT(...)`` in it becomes a :class:`PredictScan` node and leaves a
:class:`ScanRef` marker where its rows are read. A scan's input is a
:class:`Relation` node: a sqlglot tree too, in which a PREDICT nested in the
input is again a :class:`ScanRef` to an inner scan. The whole statement is one
:class:`QueryPlan`, so a rule (:mod:`modelsql.engine.query.rules`) sees every
PREDICT of the statement at once.

Model and pipeline statements bind to their own small frozen nodes
(:mod:`modelsql.engine.models.plans`, :mod:`modelsql.engine.pipelines.plans`), a
study's rounds to :mod:`modelsql.engine.tune.round_plan`.

Flow: text -> :func:`modelsql.sql.parse` (sqlglot trees) -> binding
(:mod:`modelsql.engine.query.bind_statement`: :class:`QueryPlan`) -> rules (plan -> plan)
-> physical operators (:mod:`modelsql.engine.query.physical`, chosen by
:mod:`modelsql.engine.query.cost`) -> :class:`~modelsql.engine.result.Result`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sqlglot import exp

from modelsql.engine.query.bind_predict import Binding, Column, PredictModel, PredictOptions
from modelsql.engine.query.learned_costs import NO_COSTS, Costs

if TYPE_CHECKING:
    from modelsql.catalog.compiled import CompiledArtifact
    from modelsql.engine.query.rules.pipeline_share_steps import SharedSteps
    from modelsql.operators.predict import OutputCol


class ScanRef(exp.Expression):
    """Marker in a sqlglot tree: the rows of :class:`PredictScan` number ``this`` are read here."""

    arg_types = {"this": True}

    @property
    def scan_id(self) -> int:
        return int(self.this.this if isinstance(self.this, exp.Expression) else self.this)


@dataclass(frozen=True, eq=False)
class Relation:
    """A PREDICT's input relation.

    Attributes:
        tree: a ``SELECT`` over the input (DuckDB's dialect, the statement's ``$k``
            parameters kept, the CTEs it may name attached); a PREDICT inside it is a
            :class:`ScanRef`.
        source: the input as written in the statement (``exp.Table`` or ``exp.Subquery``), which a
            streaming PREDICT reads in place (so CTE names resolve as the statement's).
        inner: ids of the scans it reads through those markers.
        table: the table name when the input was written ``TABLE t`` (else None).
        sql: DuckDB SQL of ``tree`` with inner scans stood in by typed empty relations
            (what binding describes and rules compare), parameters renumbered ``$1..$m``.
        params: the statement's parameter numbers behind ``$1..$m`` of ``sql``.
    """

    tree: exp.Expression
    source: exp.Expression
    inner: tuple[int, ...]
    table: Optional[str]
    sql: str
    params: tuple[int, ...]

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        """Two relations with equal keys give the same rows (same text, same parameters)."""
        return (self.sql, self.params)


@dataclass(frozen=True)
class Placement:
    """Where a PREDICT sits in its statement (what the cost function and the rules need to know).

    Attributes:
        top_level_from: the statement's own top-level FROM reads it: all of it is consumed.
        row_dependent: the statement has a filter, limit or join
            outside PREDICT inputs, which may stop a streaming PREDICT early or push into its input.
        in_main_body: it is a FROM or JOIN item of the statement's top-level SELECT itself (no
            subquery or CTE around it).
        kept_columns: the input columns the statement may read (all when that is unknown): what a
            batch operator passes through.
        arrow_unsafe: those of them whose type an Arrow round trip changes.
        renamed: its columns are renamed by position (``AS p(a, b)``), so which outputs are read is unknown.
    """

    top_level_from: bool = False
    row_dependent: bool = True
    in_main_body: bool = False
    kept_columns: tuple[Column, ...] = ()
    arrow_unsafe: tuple[Column, ...] = ()
    renamed: bool = False


@dataclass(frozen=True)
class RoutePlan:
    """How a routed PREDICT (``MODELS (...) ROUTE BY c``) runs its members (rule ``predict_merge_family``).

    Attributes:
        merge: run the family as one NetFuse-merged graph (per batch, when the batch's routing pays).
        layout: the merged graph's input layout (``"stacked"``: each member its own rows).
        dense: how per-instance dense layers are written (``"matmul"`` or ``"conv"``).
        reason: the decision in words (EXPLAIN prints it).
    """

    merge: bool
    layout: str = "stacked"
    dense: str = "matmul"
    reason: str = ""


@dataclass(frozen=True)
class PredictScan:
    """One ``PREDICT(MODEL m, <input> [, options])``: run a model over every row of its input.

    Attributes:
        id: its number in the statement (the :class:`ScanRef` markers carry it).
        model: the catalog entry of the model version, pipeline version or routed models (immutable: keyed by
            their digests).
        input: the input relation.
        binding: how columns feed inputs and which outputs come back (see :mod:`modelsql.engine.query.bind_predict`).
        options: the PREDICT's options.
        used: lower-cased names the statement may read its columns by (None: unknown, e.g. ``*``).
        placement: where it sits in the statement.
        estimated_rows: DuckDB's estimate of the input's rows (None when it gives none).
        shared: the id of the :class:`ShareGroup` it belongs to (rule ``predict_share_input``), or None.
        route: for a routed PREDICT, how its members run (rule ``predict_merge_family``); None: separately.
        tvm: the model's checked TVM artifact for this CPU (``modelsql.compiled``), when the PREDICT names no
            backend and there is one: the cost function may choose it.
        tvm_declined: why TVM declined the model, when it did and the PREDICT names no backend.
        label: ``model "m" version v``.
    """

    id: int
    model: PredictModel
    input: Relation
    binding: Binding
    options: PredictOptions
    used: Optional[frozenset[str]] = None
    placement: Placement = field(default_factory=Placement)
    estimated_rows: Optional[int] = None
    shared: Optional[int] = None
    route: Optional[RoutePlan] = None
    tvm: Optional[CompiledArtifact] = None
    tvm_declined: Optional[str] = None

    @property
    def label(self) -> str:
        return self.model.label

    @property
    def outputs(self) -> tuple[OutputCol, ...]:
        return self.binding.outputs


@dataclass(frozen=True)
class ShareGroup:
    """PREDICTs of one statement over one input relation, run together on the same batches.

    Attributes:
        id: the group's number.
        members: ids of the scans, in statement order.
        input: the relation they share (read once).
    """

    id: int
    members: tuple[int, ...]
    input: Relation


@dataclass(frozen=True)
class StepShare:
    """Pipelines of one :class:`ShareGroup` that share steps (rule ``pipeline_share_steps``).

    Attributes:
        group: the share group's id.
        shared: the distinct-step graph of its members
            (:class:`~modelsql.engine.query.rules.pipeline_share_steps.SharedSteps`).
    """

    group: int
    shared: "SharedSteps"


@dataclass(frozen=True)
class FamilyShare:
    """PREDICTs of one :class:`ShareGroup` over models of one family (rule ``predict_merge_family``):
    each chunk runs one NetFuse-merged graph with a shared input for all of them.

    Attributes:
        group: the share group's id.
        members: the scans' ids, in merge order.
        merge: whether the merged graph runs (False: the rule looked and declined; ``reason`` says why).
        dense: how per-instance dense layers are written (``"matmul"`` or ``"conv"``).
        reason: the decision in words (EXPLAIN prints it).
    """

    group: int
    members: tuple[int, ...]
    merge: bool
    dense: str = "matmul"
    reason: str = ""


@dataclass(frozen=True, eq=False)
class QueryPlan:
    """A whole statement: its relational tree with :class:`ScanRef` markers and every PREDICT in it.

    Attributes:
        tree: the statement (``$k`` parameters kept).
        scans: every PREDICT, innermost and CTE bodies first (a scan comes after those it reads).
        kind: what the result is: ``SELECT`` (rows), ``INSERT``/``UPDATE``/``DELETE``/``MERGE_INTO``
            (a count), ``CREATE``.
        groups: PREDICTs that share their input (rule ``predict_share_input``).
        materialized: names of CTEs holding a PREDICT that the statement reads more than once,
            computed once (rule ``predict_share_input``).
        step_shares: share groups whose pipelines compute their common steps once per chunk
            (rule ``pipeline_share_steps``).
        family_shares: share groups of one model family run as one merged graph (rule
            ``predict_merge_family``).
        notes: one line per rule that looked at the plan and declined, saying why (EXPLAIN prints them).
        costs: the learned cost model the cost function and the rules ask (:data:`NO_COSTS`: none yet).
    """

    tree: exp.Expression
    scans: tuple[PredictScan, ...]
    kind: str = "SELECT"
    groups: tuple[ShareGroup, ...] = ()
    materialized: tuple[str, ...] = ()
    step_shares: tuple[StepShare, ...] = ()
    family_shares: tuple[FamilyShare, ...] = ()
    notes: tuple[str, ...] = ()
    costs: Costs = NO_COSTS

    def scan(self, scan_id: int) -> PredictScan:
        return next(s for s in self.scans if s.id == scan_id)
