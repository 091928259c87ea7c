"""One round of a study as a plan: its targets in the stage tree and, after
:func:`~modelsql.engine.tune.stage_tree.tune_stage_tree`, the stages and tasks that train them (Hippo).

"Stage" here is Hippo's: consecutive epochs of one trial trained from one checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from modelsql.tuning.stage_tree import Node, StageTree


@dataclass(frozen=True)
class StagePlan:
    """One stage of a study's round: train ``nodes`` (consecutive epochs) from ``start``'s state.

    Attributes:
        id: its number within the round's plan.
        start: the stage-tree node training starts from (the root: from scratch; else it has a checkpoint).
        nodes: the epochs to train, in order; the state after the last one is checkpointed.
        recomputed: how many of ``nodes`` were trained before, inside a stage whose checkpoint is not there.
    """

    id: int
    start: "Node"
    nodes: tuple["Node", ...]
    recomputed: int = 0


@dataclass(frozen=True)
class StageTask:
    """Stages one worker trains one after the other (each starts from the previous one's end).

    Attributes:
        id: its number within the round.
        stages: the stages, in order.
        after: the task whose last stage this one's first stage starts from (None: it can start at once).
        critical: epochs on the longest chain of tasks starting with this one (Hippo's critical path).
    """

    id: int
    stages: tuple[StagePlan, ...]
    after: Optional[int]
    critical: int


@dataclass(frozen=True)
class RoundPlan:
    """One round of a study: the trials' requests as targets in a stage tree, and (after rule
    ``tune_stage_tree``) the tasks that train them.

    Attributes:
        tree: the :class:`~modelsql.tuning.stage_tree.StageTree` the targets are in.
        targets: the node of each request's last epoch.
        change_points: epochs after which the search space may change a hyper-parameter (checkpointed).
        tasks: the tasks in critical-path order (empty before the rule runs, or when all is trained).
        reused_epochs: requested epochs that were already trained.
    """

    tree: "StageTree"
    targets: tuple["Node", ...]
    change_points: frozenset = frozenset()
    tasks: tuple[StageTask, ...] = ()
    reused_epochs: int = 0
