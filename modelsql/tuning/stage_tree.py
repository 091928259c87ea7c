"""The stage tree of hyper-parameter sequences (Hippo: Shin et al., "Hippo: Taming Hyper-parameter
Optimization of Deep Learning with Stage Trees", VLDB 2022).

A trial is a sequence of per-epoch hyper-parameters (:data:`EpochHP`, one per epoch). Every trial's
sequence is a path from the root of one trie, one :class:`Node` per epoch, keyed by the epoch's
hyper-parameters: two trials share a node exactly when they agree on every epoch up to it, so the
prefix they share is trained once. A node's state (weights, optimizer, RNGs, data order) after its
epoch is what its children start from; it is kept as a checkpoint only where the tree needs one
(branch points, the ends of requests). Nodes are trained in *stages*: chains of epochs from a
checkpoint to the next (``modelsql.stages`` rows).

The tree holds no training code: the planner's rule ``tune_stage_tree`` cuts it into stages and the
executor trains them.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Sequence

__all__ = ["EpochHP", "Node", "StageTree"]

EpochHP = tuple[tuple[str, Any], ...]
"""The hyper-parameters of one epoch: sorted ``(name, value)`` pairs."""


class Node:
    """One epoch of the tree.

    Attributes:
        parent: the previous epoch's node (None for the root).
        hp: this epoch's hyper-parameters (None for the root).
        epoch: the 0-based index of the epoch the node trains; -1 for the root (the untrained model).
        children: ``{hp: Node}`` of the next epoch.
        metrics: ``{"train_loss", "val_loss", ["val_accuracy"]}`` after the epoch, once trained.
        checkpoint: digest of the state after the epoch, when one is stored (the root needs none).
        checkpoint_bytes: its size in bytes.
        stage: the catalog stage that holds the epoch (its last trained copy).
    """

    __slots__ = ("parent", "hp", "epoch", "children", "metrics", "checkpoint", "checkpoint_bytes", "stage")

    def __init__(self, parent: Optional["Node"], hp: Optional[EpochHP]) -> None:
        self.parent = parent
        self.hp = hp
        self.epoch: int = -1 if parent is None else parent.epoch + 1
        self.children: dict[EpochHP, Node] = {}
        self.metrics: Optional[Mapping[str, float]] = None
        self.checkpoint: Optional[str] = None
        self.checkpoint_bytes: Optional[int] = None
        self.stage: Optional[int] = None

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def trained(self) -> bool:
        """The epoch's metrics are known (the root counts as trained)."""
        return self.parent is None or self.metrics is not None

    @property
    def restorable(self) -> bool:
        """Training can start from this node: it is the root or has a checkpoint."""
        return self.parent is None or self.checkpoint is not None

    def path(self) -> list["Node"]:
        """The nodes from the first epoch to this one (the root left out)."""
        out = []
        node: Optional[Node] = self
        while node is not None and node.parent is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def sequence(self) -> tuple[EpochHP, ...]:
        """The hyper-parameters of every epoch up to this node."""
        return tuple(n.hp for n in self.path())  # type: ignore[misc]

    def restorable_ancestor(self) -> "Node":
        """The deepest node at or above this one that training can start from."""
        node = self
        while not node.restorable:
            node = node.parent  # type: ignore[assignment]
        return node

    def __repr__(self) -> str:
        return f"Node(epoch={self.epoch}, trained={self.trained}, checkpoint={self.checkpoint is not None})"


class StageTree:
    """The trie of every trained or requested sequence of one tree key.

    Args:
        key: what training depends on besides the hyper-parameters (see ``modelsql.studies.tree``).
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.root = Node(None, None)
        self.stage_ends: dict[int, Node] = {}
        """``{stage number: the node of its last epoch}`` for the stages recorded in the tree."""

    def insert(self, sequence: Sequence[EpochHP]) -> Node:
        """The node of the last epoch of ``sequence`` (the root for an empty one), created as needed."""
        node = self.root
        for hp in sequence:
            node = _child(node, hp)
        return node

    def find(self, sequence: Sequence[EpochHP]) -> Optional[Node]:
        """The node of ``sequence``'s last epoch, or None when it is not in the tree."""
        node = self.root
        for hp in sequence:
            node = node.children.get(hp)  # type: ignore[assignment]
            if node is None:
                return None
        return node

    def record_stage(self, stage: int, parent: Optional[int], configuration: Sequence[EpochHP],
                     metrics: Sequence[Mapping[str, float]], checkpoint: Optional[str],
                     checkpoint_bytes: Optional[int]) -> Node:
        """Record a trained stage: its epochs follow the end of stage ``parent`` (the root when None).

        Returns the node of its last epoch. Raises KeyError when ``parent`` is not recorded.
        """
        node = self.root if parent is None else self.stage_ends[parent]
        for hp, m in zip(configuration, metrics):
            node = _child(node, hp)
            node.metrics = dict(m)
            node.stage = stage
        if checkpoint is not None:
            node.checkpoint, node.checkpoint_bytes = checkpoint, checkpoint_bytes
        self.stage_ends[stage] = node
        return node

    def nodes(self) -> Iterator[Node]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def trained_epochs(self) -> int:
        """How many distinct epochs (nodes) are trained."""
        return sum(1 for n in self.nodes() if n.trained)

    def stage_of(self, node: Node) -> Optional[int]:
        """The stage number whose end is ``node`` (None for the root or a node that ends no stage)."""
        stage = node.stage
        return stage if stage is not None and self.stage_ends.get(stage) is node else None


def _child(node: Node, hp: EpochHP) -> Node:
    child = node.children.get(hp)
    if child is None:
        child = node.children[hp] = Node(node, hp)
    return child
