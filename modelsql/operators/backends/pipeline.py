"""A pipeline run as a white box: each step is its own loaded session, run in order over one batch.

PRETZEL (Lee et al., OSDI 2018) serves pipelines as white boxes: a step that
several pipelines share is one loaded object (its session, its weights), not
one copy per pipeline. :class:`PipelineModel` implements the
:class:`~modelsql.operators.backends.BackendModel` protocol over the steps'
own sessions, which come from ``SESSIONS`` under each step's content digest,
so two pipelines with an identical featurizer hold one featurizer session.
:class:`StepPlan` names, for each step input, the value that feeds it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from modelsql.operators.backends import BackendModel

__all__ = ["StepPlan", "PipelineModel", "StepMemo"]


@dataclass(frozen=True)
class StepPlan:
    """One step to run.

    Attributes:
        name: the step name (for messages).
        model: its loaded session.
        feeds: ``(step input name, source)`` pairs, where source is ``(None, pipeline input name)``
            or ``(earlier step position, output name)``.
        outputs: the step outputs later steps or the caller need, in the model's order.
        key: digest of what the step computes from what (equal keys, equal values; see
            :func:`modelsql.engine.artifacts.sessions.step_key`), the :class:`StepMemo` key.
    """

    name: str
    model: BackendModel
    feeds: tuple[tuple[str, tuple[Optional[int], str]], ...]
    outputs: tuple[str, ...]
    key: str = ""


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    except TypeError:
        return bool(np.array_equal(a, b))


class StepMemo:
    """Step outputs of the latest chunk, per thread, shared by pipelines that DuckDB runs on the same chunks.

    DuckDB evaluates the PREDICT functions of one shared scan one after another on each chunk, in
    one thread; the first pipeline to run a shared step leaves its outputs here and the next one
    takes them, after checking that its feeds are equal to the ones they were computed from (so
    a different chunk is never answered from the memo: PRETZEL's sub-plan materialization, exact).
    """

    def __init__(self) -> None:
        # Keyed by the OS thread, not threading.local: DuckDB's worker threads may get a fresh Python
        # thread state for every call, which would empty a threading.local between two members' calls.
        self._by_thread: dict[int, dict] = {}
        self._lock = threading.Lock()
        self.hits = 0
        """Steps not run because the memo held their outputs (all threads)."""

    def _entries(self) -> dict:
        ident = threading.get_ident()
        entries = self._by_thread.get(ident)
        if entries is None:
            with self._lock:
                entries = self._by_thread.setdefault(ident, {})
        return entries

    def get(self, key: str, feeds: dict, names: Sequence[str]) -> Optional[list]:
        """The outputs ``names`` of step ``key`` if it last ran (in this thread) on feeds equal to ``feeds``."""
        hit = self._entries().get(key)
        if hit is None or hit[0].keys() != feeds.keys() or any(n not in hit[1] for n in names):
            return None
        if not all(_same(hit[0][k], v) for k, v in feeds.items()):
            return None
        self.hits += 1
        return [hit[1][n] for n in names]

    def put(self, key: str, feeds: dict, names: Sequence[str], outs: Sequence[np.ndarray]) -> None:
        """Remember step ``key``'s outputs on ``feeds`` (replacing an older chunk's)."""
        self._entries()[key] = (dict(feeds), dict(zip(names, outs)))


class PipelineModel:
    """Runs the steps of one pipeline version in order, each output feeding the steps that name it.

    Args:
        steps: the steps, in order (positions are indexes in this list).
        input_shapes: pipeline input name -> its dims (as the first step reading it declares them).
        output_names: the pipeline's outputs (outputs of the last step), in order.
        label: ``'pipeline "p" version 1'`` for messages.
        memo: shared with the other pipelines of a shared scan (see :class:`StepMemo`), or None.

    Every step keeps the batch axis first (row ``i`` of each output belongs to input row ``i``),
    as PREDICT requires of any model; ``fixed_batch`` is None (a step with a fixed batch slices
    its own runs).
    """

    fixed_batch: Optional[int] = None

    def __init__(self, steps: Sequence[StepPlan], input_shapes: dict, output_names: Sequence[str], label: str,
                 memo: Optional[StepMemo] = None):
        self.steps = tuple(steps)
        self.memo = memo
        self.input_names = list(input_shapes)
        self.input_shapes = dict(input_shapes)
        self.output_names = list(output_names)
        self.label = label
        self.intra_op_threads = max((s.model.intra_op_threads for s in self.steps), default=1)

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        """Run every step over ``feeds`` (pipeline input name -> array, batch axis first).

        Returns:
            One array per requested output of the last step (default: all), ``n`` rows each.

        Raises:
            DataError: a step's session fails (its own message names the step's model).
        """
        values: dict[tuple[Optional[int], str], np.ndarray] = {(None, k): v for k, v in feeds.items()}
        last = len(self.steps) - 1
        wanted = list(outputs) if outputs is not None else self.output_names
        for i, step in enumerate(self.steps):
            step_feeds = {name: values[src] for name, src in step.feeds}
            names = list(step.outputs)
            if i == last:
                names = list(dict.fromkeys([*names, *wanted]))
            outs = self.memo.get(step.key, step_feeds, names) if self.memo is not None and step.key else None
            if outs is None:
                outs = step.model.run(step_feeds, names)
                if self.memo is not None and step.key:
                    self.memo.put(step.key, step_feeds, names, outs)
            for name, arr in zip(names, outs):
                values[(i, name)] = arr
        return [values[(last, name)] for name in wanted]
