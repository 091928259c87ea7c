"""The class labels a converted classifier predicts, read from its graph: the ``classlabels_int64s``,
``classlabels_ints`` or ``classlabels_strings`` attribute of ONNX-ML's classifier nodes (``LinearClassifier``, ``TreeEnsembleClassifier``,
``SVMClassifier``, ``ZipMap``), in the order of the classifier's probability columns (scikit-learn's
``classes_``: skl2onnx writes them so)."""

from __future__ import annotations

from typing import Any, Optional

import onnx

__all__ = ["class_labels", "label_table"]

_CLASSIFIERS = ("LinearClassifier", "TreeEnsembleClassifier", "SVMClassifier", "ZipMap")


def class_labels(model: onnx.ModelProto) -> Optional[list[Any]]:
    """The labels of the last classifier node of the main graph, or None when it has none (a network, an
    unconverted estimator, a regressor). Strings are decoded from UTF-8."""
    found: Optional[list[Any]] = None
    for node in model.graph.node:
        if node.op_type not in _CLASSIFIERS:
            continue
        for attribute in node.attribute:
            if attribute.name in ("classlabels_int64s", "classlabels_ints") and attribute.ints:
                found = [int(v) for v in attribute.ints]
            elif attribute.name == "classlabels_strings" and attribute.strings:
                found = [v.decode("utf-8") for v in attribute.strings]
    return found


def label_table(model: onnx.ModelProto) -> Optional[str]:
    """The initializer a network's ``label`` output is gathered from by an ``ArgMax`` of its scores (modelsql's
    and skl2onnx's linear heads, TUNE's classifiers of text or boolean labels): the classes in the scores'
    order, or None when there is no such ``Gather``."""
    argmax = {out for node in model.graph.node if node.op_type == "ArgMax" for out in node.output}
    initializers = {t.name for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in initializers \
                and node.input[1] in argmax:
            return str(node.input[0])
    return None
