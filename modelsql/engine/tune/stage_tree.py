"""Rule ``tune_stage_tree``: one round of a study's trials becomes stages of a stage tree, ordered by
critical path.

Rewrite: the round's requests (each a trial's per-epoch hyper-parameters up to the epoch it must
reach) are merged into the tree of every sequence trained before, so a prefix that requests share,
or that an earlier round or an earlier study trained, is trained once; an identical configuration
requested twice costs nothing. The untrained epochs are cut into stages, each training a chain of
epochs from its parent's checkpoint, ending (and checkpointing) where the tree branches, where a
request ends, or at a change point of the search space (a milestone, the end of a warm-up), where a
later request may branch. When the epoch a new branch leaves from has no checkpoint (it was trained
inside an earlier stage), the stage starts from its nearest checkpointed ancestor and trains the
epochs between again (``recomputed``); training is exact, so they come out the same. A chain of
stages with one successor each is one task (one worker trains it without waiting); a task runs
after the task that trains its start. Tasks are ordered by critical path: the epochs on the longest
chain of tasks from each one, longest first, so over W workers the round ends as early as it can.

This is Hippo's stage tree and its critical-path scheduling (Shin et al., "Hippo: Taming
Hyper-parameter Optimization of Deep Learning with Stage Trees", VLDB 2022, sections 3-4; and the
2019 preprint, arXiv:1911.10504). With ``plan.sharing`` false (trial-based execution, the baseline
of Hippo's evaluation and what Ray Tune and Optuna do) the executor gives every trial a tree of its
own, and the same rule then shares nothing between trials.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from modelsql.engine.tune.round_plan import RoundPlan, StagePlan, StageTask
from modelsql.tuning.stage_tree import Node

__all__ = ["tune_stage_tree"]


def tune_stage_tree(plan: RoundPlan) -> RoundPlan:
    """``plan`` with its ``tasks``: the stages that train every target not yet trained."""
    work: dict[int, Node] = {}          # id(node) -> node to train
    starts: dict[int, Node] = {}        # id(start node) -> start node
    targets = {id(t) for t in plan.targets}
    reused = 0
    for target in plan.targets:
        path = target.path()
        untrained = next((i for i, n in enumerate(path) if not n.trained), None)
        if untrained is None:
            reused += len(path)
            continue
        before = path[untrained - 1] if untrained else plan.tree.root
        start = before.restorable_ancestor()
        starts[id(start)] = start
        reused += untrained
        for node in path[len(start.path()):]:
            work[id(node)] = node
    tasks: list[StageTask] = []
    counter = [0]
    for start in sorted(starts.values(), key=_order):
        for child in _work_children(start, work):
            _build_task(child, start, None, work, targets, plan.change_points, tasks, counter)
    return replace(plan, tasks=tuple(_by_critical_path(tasks)), reused_epochs=reused)


def _order(node: Node) -> tuple:
    return (node.epoch, repr(node.sequence()))


def _work_children(node: Node, work: dict[int, Node]) -> list[Node]:
    return sorted((c for c in node.children.values() if id(c) in work), key=lambda c: repr(c.hp))


def _ends_stage(node: Node, work: dict[int, Node], targets: set[int], change_points: frozenset[int]) -> bool:
    """Whether the state after ``node`` is checkpointed: a request ends there, the tree branches there, or
    the search space may change its hyper-parameters after it."""
    return (id(node) in targets or len(_work_children(node, work)) != 1 or len(node.children) > 1
            or (node.epoch + 1) in change_points)


def _build_task(first: Node, start: Node, after: Optional[int], work: dict[int, Node], targets: set[int],
                change_points: frozenset[int], tasks: list[StageTask], counter: list[int]) -> None:
    """Add the task whose first stage trains from ``start`` through ``first`` onwards, and its successors."""
    task_id = len(tasks)
    tasks.append(StageTask(task_id, (), after, 0))  # its place (replaced below), so successors number after it
    stages: list[StagePlan] = []
    node, begin = first, start
    while True:
        chain = [node]
        while not _ends_stage(node, work, targets, change_points):
            node = _work_children(node, work)[0]
            chain.append(node)
        recomputed = sum(1 for n in chain if n.trained)
        stages.append(StagePlan(counter[0], begin, tuple(chain), recomputed))
        counter[0] += 1
        nxt = _work_children(node, work)
        if len(nxt) != 1:
            break
        begin, node = node, nxt[0]
    successors = _work_children(node, work)
    tasks[task_id] = StageTask(task_id, tuple(stages), after, 0)
    for child in successors:
        _build_task(child, node, task_id, work, targets, change_points, tasks, counter)


def _by_critical_path(tasks: list[StageTask]) -> list[StageTask]:
    """Tasks with their critical path (own epochs + the longest successor's), longest first; a task always
    after the one it starts from."""
    critical: dict[int, int] = {}
    for task in reversed(tasks):  # successors are numbered after their predecessor
        own = sum(len(s.nodes) for s in task.stages)
        below = [critical[t.id] for t in tasks if t.after == task.id]
        critical[task.id] = own + max(below, default=0)
    done: list[StageTask] = []
    placed: set[Optional[int]] = {None}
    pending = [replace(t, critical=critical[t.id]) for t in tasks]
    while pending:
        ready = [t for t in pending if t.after in placed]
        best = max(ready, key=lambda t: (t.critical, -t.id))
        done.append(best)
        placed.add(best.id)
        pending.remove(best)
    return done
