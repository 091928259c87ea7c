"""Recursive models over trees, run by a level-batched executor (EuroSys 2018: recursion executed in parallel).

* :mod:`.trees`: :class:`~.trees.Trees` (parent-index lists, as PREDICT and TUNE carry them), the level
  :func:`~.trees.schedule`, :func:`~.trees.level_batched` and the :func:`~.trees.naive_recursion` baseline;
* :mod:`.treelstm`: the Child-Sum TreeLSTM (Tai et al., ACL 2015) as a cell and as a model.

No planner or catalog imports: TUNE's training and PREDICT's programs both use it.
"""

from modelsql.recursive.trees import Schedule, Trees, level_batched, naive_recursion, schedule

__all__ = ["Trees", "Schedule", "schedule", "level_batched", "naive_recursion"]
