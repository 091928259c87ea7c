"""The learned cost model: latency of an inference run predicted from the model's static features and the
run's configuration (Mantis, Chun et al. 2010; nn-Meter, Zhang et al. 2021).

* :mod:`.features`: :class:`Config`, :func:`model_features` (static features of an ONNX model at a batch
  size), :func:`row` (one run's feature dict, in :data:`FEATURES` order);
* :mod:`.mantis`: :class:`CostModel` (``fit``, ``predict`` in ms, ``terms``, JSON and ONNX export);
* :mod:`.evaluate`: :func:`within`, :func:`noise_ceiling`, the splits (random share, leave-models-out);
* :mod:`.zoo`: the benchmark's and tests' model zoo (imports torch and scikit-learn; not imported here).

A lower layer: it imports the graph analyses (``analyses/``; the zoo also the converters and NetFuse), never the
planner, catalog or SQL layers.
"""

from modelsql.costmodel.evaluate import group_folds, median_relative_error, noise_ceiling, random_splits, within
from modelsql.costmodel.features import BACKENDS, DEVICES, FEATURE_DOCS, FEATURES, TARGETS, Config, matrix, model_features, row
from modelsql.costmodel.mantis import CostModel

__all__ = ["BACKENDS", "DEVICES", "FEATURES", "FEATURE_DOCS", "TARGETS", "Config", "CostModel", "group_folds",
           "matrix", "median_relative_error", "model_features", "noise_ceiling", "random_splits", "row", "within"]
