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

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from . import BackendModel

__all__ = ["StepPlan", "PipelineModel"]


@dataclass(frozen=True)
class StepPlan:
    """One step to run.

    Attributes:
        name: the step name (for messages).
        model: its loaded session.
        feeds: ``(step input name, source)`` pairs, where source is ``(None, pipeline input name)``
            or ``(earlier step position, output name)``.
        outputs: the step outputs later steps or the caller need, in the model's order.
    """

    name: str
    model: BackendModel
    feeds: tuple[tuple[str, tuple[Optional[int], str]], ...]
    outputs: tuple[str, ...]


class PipelineModel:
    """Runs the steps of one pipeline version in order, each output feeding the steps that name it.

    Args:
        steps: the steps, in order (positions are indexes in this list).
        input_shapes: pipeline input name -> its dims (as the first step reading it declares them).
        output_names: the pipeline's outputs (outputs of the last step), in order.
        label: ``'pipeline "p" version 1'`` for messages.

    Every step keeps the batch axis first (row ``i`` of each output belongs to input row ``i``),
    as PREDICT requires of any model; ``fixed_batch`` is None (a step with a fixed batch slices
    its own runs).
    """

    fixed_batch = None

    def __init__(self, steps: Sequence[StepPlan], input_shapes: dict, output_names: Sequence[str], label: str):
        self.steps = tuple(steps)
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
            for name, arr in zip(names, step.model.run(step_feeds, names)):
                values[(i, name)] = arr
        return [values[(last, name)] for name in wanted]
