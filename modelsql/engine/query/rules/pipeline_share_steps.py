"""Rule ``pipeline_share_steps``: pipelines run over one input compute each identical step once.

Rewrite: the steps of several pipelines (and single models, as one-step
pipelines) that run over the same input become one graph of *distinct* steps:
two steps are one node when they compute the same thing (equal content digest,
:func:`modelsql.onnxformat.identity.content_digest`) from the same sources (the
same pipeline input, or the same output of the same node). So the common
prefix of the pipelines (a featurizer they share, a scaler and a PCA) is
computed once per batch, and each pipeline's own steps only on its own rows.

This is PRETZEL's sub-plan materialization (Lee et al., "PRETZEL: Opening the
Black Box of Machine Learning Prediction Serving Systems", OSDI 2018, section
4.2), generalised from prefixes to any shared sub-graph; ``predict_share_input``
is its special case for the scan feeding several models. The server
(:mod:`modelsql.engine.serve.statements`) groups requests by the graph their pipelines
share, so requests for different pipelines batch together.

The result is logical (:class:`SharedSteps`): nodes name model versions; the
physical :class:`~modelsql.operators.step_graph.StepGraph` gets their sessions.

In a query, the rule looks at each :class:`~modelsql.engine.query.plan.ShareGroup`
(PREDICTs over one input, run on the same chunks): when two or more of its
pipelines share a step, the plan records a :class:`~modelsql.engine.query.plan.StepShare`,
and the members' operators compute each shared step once per chunk (a memo
keyed by the step, checked against the chunk's inputs), every member still
getting exactly its own answer. Identical steps always share one loaded
session (sessions are keyed by content digest), with or without the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from modelsql.catalog.entries import ModelVersion, PipelineVersion
from modelsql.engine.artifacts.sessions import step_key
from modelsql.engine.query.plan import QueryPlan, StepShare

__all__ = ["SharedNode", "SharedSteps", "share_steps", "pipeline_share_steps"]

Source = tuple[Optional[int], str]
"""What feeds a step input: ``(node index, output)``, or ``(None, pipeline input name)``."""
NodeOutput = tuple[int, str]
"""An output of a node: ``(node index, output name)``."""


@dataclass(frozen=True)
class SharedNode:
    """One distinct step: its model version, what feeds it, who needs it.

    Attributes:
        key: digest of what it computes and from what (equal keys are one node).
        name: the first member's step name.
        model: the model version it runs.
        feeds: ``(step input, source)``; a source is ``(node index, output)`` or ``(None, input name)``.
        outputs: the outputs later nodes or members read.
        members: the members (pipeline names) that need it.
    """

    key: str
    name: str
    model: ModelVersion
    feeds: tuple[tuple[str, Source], ...]
    outputs: tuple[str, ...]
    members: frozenset[str]


@dataclass(frozen=True)
class SharedSteps:
    """The distinct steps of some pipelines and, per member, where its outputs come from.

    Attributes:
        nodes: in an order where every node comes after the nodes feeding it.
        member_outputs: member -> ``(output name, the node output it is)`` in the pipeline's output order.
        steps_total: the steps of all members counted separately.
    """

    nodes: tuple[SharedNode, ...]
    member_outputs: dict[str, tuple[tuple[str, NodeOutput], ...]]
    steps_total: int

    @property
    def shared(self) -> tuple[SharedNode, ...]:
        """Nodes that more than one member needs."""
        return tuple(n for n in self.nodes if len(n.members) > 1)

    def bytes_saved(self) -> int:
        """Stored bytes not loaded again: each shared node's model size times (members - 1)."""
        return sum(n.model.logical_bytes * (len(n.members) - 1) for n in self.shared)


@dataclass
class _Node:
    """A :class:`SharedNode` while :func:`share_steps` collects the members that need it and the outputs they read."""

    key: str
    name: str
    model: ModelVersion
    feeds: tuple[tuple[str, Source], ...]
    outputs: list[str] = field(default_factory=list)
    members: set[str] = field(default_factory=set)


def share_steps(members: Sequence[tuple[str, PipelineVersion]]) -> SharedSteps:
    """The distinct-step graph of ``members`` (``(member name, pipeline version)`` pairs; see module docstring)."""
    keys: list[str] = []
    index: dict[str, int] = {}  # key -> node index
    nodes: list[_Node] = []
    outputs: dict[str, tuple[tuple[str, NodeOutput], ...]] = {}
    total = 0
    for member, pv in members:
        local: dict[int, int] = {}  # step position -> node index
        for step in pv.steps:
            total += 1
            feeds = tuple((f.input, (None if f.from_step is None else local[f.from_step], f.from_name))
                          for f in step.feeds)
            k = step_key(step.model, feeds, keys)
            if k not in index:
                index[k] = len(keys)
                keys.append(k)
                nodes.append(_Node(k, step.name, step.model, feeds))
            local[step.position] = index[k]
        last = local[pv.steps[-1].position]
        outputs[member] = tuple((o.name, (last, o.name)) for o in pv.outputs)
        _mark(nodes, member, last, [o.name for o in pv.outputs])
    return SharedSteps(
        nodes=tuple(SharedNode(n.key, n.name, n.model, n.feeds, tuple(n.outputs), frozenset(n.members))
                    for n in nodes),
        member_outputs=outputs, steps_total=total,
    )


def _mark(nodes: list[_Node], member: str, last: int, wanted: list[str]) -> None:
    """Record that ``member`` needs node ``last`` (its outputs ``wanted``) and every node feeding it."""
    stack = [(last, wanted)]
    while stack:
        i, names = stack.pop()
        node = nodes[i]
        node.members.add(member)
        for name in names:
            if name not in node.outputs:
                node.outputs.append(name)
        for _, (src, out) in node.feeds:
            if src is not None:
                stack.append((src, [out]))


def pipeline_share_steps(plan: QueryPlan) -> QueryPlan:
    """Record the share groups whose pipelines share steps (see module docstring); notes say which."""
    shares, notes = list(plan.step_shares), list(plan.notes)
    for g in plan.groups:
        pipelines = [(f"#{s.id}", s.model) for s in (plan.scan(m) for m in g.members)
                     if isinstance(s.model, PipelineVersion)]
        if len(pipelines) < 2:
            continue
        shared = share_steps(pipelines)
        if not shared.shared:
            notes.append(f"pipeline_share_steps: the pipelines of shared input #{g.id} have no step in common")
            continue
        shares.append(StepShare(g.id, shared))
    if len(shares) == len(plan.step_shares):
        return plan if len(notes) == len(plan.notes) else replace(plan, notes=tuple(notes))
    return replace(plan, step_shares=tuple(shares), notes=tuple(notes))
