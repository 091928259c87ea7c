"""Several pipelines over one input as one graph of steps, each distinct step run once per batch.

PRETZEL (Lee et al., OSDI 2018, section 4.2) computes the sub-plans that
pipelines share once per batch ("sub-plan materialization"). A
:class:`StepGraph` is the physical form of that plan
(:mod:`modelsql.engine.query.rules.pipeline_share_steps` builds it): nodes are
distinct steps (same computation, same inputs), members are the pipelines
reading outputs from them. :meth:`StepGraph.run` takes one batch made of the
rows of several requests, each for one member, and runs every node once over
exactly the rows of the members that need it: a featurizer all pipelines share
runs on all rows, each pipeline's head on its own rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from modelsql.operators.backends import BackendModel

__all__ = ["GraphNode", "StepGraph"]

Source = tuple[Optional[int], str]  # (node index, output name), or (None, pipeline input name)


@dataclass(frozen=True)
class GraphNode:
    """One distinct step.

    Attributes:
        name: how messages and metrics name it (the first member's step name).
        model: its loaded session.
        feeds: ``(step input name, source)`` pairs.
        outputs: the outputs that later nodes or members read.
        members: the members that need it (directly or through a later node).
    """

    name: str
    model: BackendModel
    feeds: tuple[tuple[str, Source], ...]
    outputs: tuple[str, ...]
    members: frozenset


class StepGraph:
    """Nodes in an order where each comes after the nodes feeding it, and per member its outputs.

    Args:
        nodes: the distinct steps.
        member_outputs: member name -> ``(output name, source)`` pairs, in the member's output order.
        on_step: called as ``on_step(node name, rows, seconds)`` after each node runs (metrics).
    """

    def __init__(self, nodes: Sequence[GraphNode], member_outputs: dict[str, tuple[tuple[str, Source], ...]],
                 on_step: Optional[Callable[[str, int, float], None]] = None):
        self.nodes = tuple(nodes)
        self.member_outputs = dict(member_outputs)
        self.on_step = on_step

    def run(self, feeds: dict[str, np.ndarray], rows_of: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Run the graph over one batch.

        Args:
            feeds: pipeline input name -> array over all ``n`` rows of the batch (batch axis first).
            rows_of: member name -> the (sorted) row indices of the batch that ask for it.

        Returns:
            member name -> output name -> array over that member's rows, in ``rows_of`` order.

        Raises:
            DataError: a step's session fails (its message names the step's model).
        """
        n = len(next(iter(feeds.values()))) if feeds else 0
        every = np.arange(n)
        if len(rows_of) == 1:  # one pipeline asks for every row (a batch of one pipeline's requests)
            (member, rows), = rows_of.items()
            if len(rows) == n:
                rows_of = {member: every}
        values: dict[Source, tuple[np.ndarray, np.ndarray]] = {(None, k): (every, v) for k, v in feeds.items()}
        for i, node in enumerate(self.nodes):
            wanted = [rows_of[m] for m in node.members if m in rows_of]
            if not wanted:
                continue
            rows = wanted[0] if len(wanted) == 1 else np.unique(np.concatenate(wanted))
            step_feeds = {name: _take(values[src], rows) for name, src in node.feeds}
            start = time.perf_counter()
            outs = node.model.run(step_feeds, list(node.outputs))
            if self.on_step is not None:
                self.on_step(node.name, len(rows), time.perf_counter() - start)
            for name, arr in zip(node.outputs, outs):
                values[(i, name)] = (rows, arr)
        return {
            m: {out: _take(values[src], rows) for out, src in self.member_outputs[m]}
            for m, rows in rows_of.items()
        }


def _take(value: tuple[np.ndarray, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` of a value computed over the rows ``have`` (a superset, sorted): a view when
    they are one run of consecutive rows of it (no copy of a wide feature matrix), else a gather."""
    have, arr = value
    if have is rows or (len(have) == len(rows) and np.array_equal(have, rows)):
        return arr
    at = np.searchsorted(have, rows)
    if len(at) and at[-1] - at[0] + 1 == len(at):
        return arr[at[0]: at[-1] + 1]
    return arr[at]
