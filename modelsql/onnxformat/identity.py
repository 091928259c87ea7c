"""Content identity of a stored model: one digest for graphs that compute the same thing.

Two conversions of one fitted scikit-learn step are not byte-identical:
skl2onnx writes a random uuid4 into ``graph.name``; producers stamp their
version; node names and doc strings are free text. None of that changes what a
graph computes. :func:`content_digest` hashes the *whole* stripped graph (see
:mod:`modelsql.onnxformat.split`: nodes, attributes, types and shapes, and each
initializer's SHA-256 in place of its data) with those free-text fields set to
constants, so identical steps of different pipelines get one digest and are
recognised as identical: stored, loaded and computed once (PRETZEL, Lee et al.,
OSDI 2018, section 4: the Object Store and sub-plan materialization).

Hashing initializers alone would be wrong: a TF-IDF vocabulary lives in node
attributes (``pool_strings``, ``ngram_indexes``), not initializers, so two
featurizers with different vocabularies and equal idf weights would collide.
Value names (inputs, outputs, intermediates) are kept: the pipeline wiring
refers to them.
"""

from __future__ import annotations

import hashlib

from onnx import ModelProto, TensorProto

__all__ = ["content_digest", "normalized", "lift_weights", "architecture_fingerprint"]

_PRODUCER = "modelsql"


def normalized(graph_bytes: bytes) -> ModelProto:
    """The stripped model of ``graph_bytes`` with its free-text fields set to constants.

    Cleared: ``graph.name`` (``"graph"``), every ``doc_string`` (model, graph, nodes,
    values, initializers), ``producer_name`` / ``producer_version``, ``domain``,
    ``model_version``, ``metadata_props``; node names become ``n0, n1, ...`` in graph
    order (subgraphs of control-flow nodes included), and a tensor attribute's name (the store
    names a stripped attribute after its node) ``n<i>.<attribute>``.
    """
    m = ModelProto()
    m.ParseFromString(graph_bytes)
    m.producer_name, m.producer_version, m.domain, m.doc_string = _PRODUCER, "", "", ""
    m.model_version = 0
    del m.metadata_props[:]
    _normalize_graph(m.graph, "graph")
    for f in m.functions:
        f.doc_string = ""
    return m


def _normalize_graph(g, name: str) -> None:
    g.name, g.doc_string = name, ""
    for v in (*g.input, *g.output, *g.value_info, *g.initializer):
        v.doc_string = ""
    for i, node in enumerate(g.node):
        node.name, node.doc_string = f"n{i}", ""
        for attr in node.attribute:
            attr.doc_string = ""
            if attr.HasField("t"):  # a stripped attribute's placeholder is named after its node
                attr.t.name, attr.t.doc_string = f"n{i}.{attr.name}", ""
            if attr.HasField("g"):
                _normalize_graph(attr.g, f"{name}.n{i}.{attr.name}")
            for k, sub in enumerate(attr.graphs):
                _normalize_graph(sub, f"{name}.n{i}.{attr.name}{k}")


def content_digest(graph_bytes: bytes) -> str:
    """SHA-256 (hex) of :func:`normalized` ``graph_bytes``, serialized deterministically.

    Args:
        graph_bytes: a serialized stripped ModelProto, as :func:`~modelsql.onnxformat.split.split_model`
            gives (initializer data replaced by digests).

    Raises:
        google.protobuf.message.DecodeError: the bytes are not a ModelProto (callers pass
            what the store verified).
    """
    return hashlib.sha256(normalized(graph_bytes).SerializeToString(deterministic=True)).hexdigest()


def lift_weights(graph_bytes: bytes):
    """The graph with its floating-point initializers turned into graph inputs, for sessions shared by
    every model of one structure (PRETZEL's physical stages: one implementation, many parameters).

    Args:
        graph_bytes: a stripped graph (:func:`~modelsql.onnxformat.split.split_model`).

    Returns:
        ``(fingerprint, lifted graph bytes, lifted tensors)``: the content digest of the lifted graph
        (equal for models that differ only in the lifted values: the remaining initializers, e.g.
        class labels, count by their digests), the serialized stripped graph whose inputs now
        include the lifted tensors, and the :class:`~modelsql.onnxformat.shareable.ShareableTensor` of
        each lifted tensor (to be fed from its blob). None when there is nothing to lift.
    """
    from modelsql.onnxformat.shareable import shareable_initializers

    lifted = [t for t in shareable_initializers(graph_bytes, 1) if t.dtype.kind == "f"]
    if not lifted:
        return None
    m = ModelProto()
    m.ParseFromString(graph_bytes)
    names = {t.name for t in lifted}
    kept = [i for i in m.graph.initializer if i.name not in names]
    moved = [i for i in m.graph.initializer if i.name in names]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    from onnx import helper

    for i in moved:
        m.graph.input.append(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)))
    data = m.SerializeToString(deterministic=True)
    return content_digest(data), data, lifted


def architecture_fingerprint(graph_bytes: bytes) -> str:
    """SHA-256 (hex) of a stripped graph's architecture: what :func:`content_digest` hashes, with
    the values of floating-point initializers left out (their names, element types and shapes
    kept) and every intermediate value and initializer renamed by first use (``v0, v1, ...``;
    graph inputs and outputs keep their names, which columns bind to).

    Models with equal fingerprints are copies of one architecture that differ only in their
    weights (fine-tuned copies): NetFuse's mergeable family (Jeong et al., 2020). Integer and
    other non-float initializers (shapes, axes, indices, vocabularies) and every attribute are
    structure and count by value.

    Args:
        graph_bytes: a serialized stripped ModelProto (:func:`~modelsql.onnxformat.split.split_model`).
    """
    m = normalized(graph_bytes)
    g = m.graph
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
    for t in g.initializer:
        if t.data_type in floats:
            _drop_value(t)
    keep = {v.name for v in (*g.input, *g.output)} - {t.name for t in g.initializer}
    names: dict[str, str] = {}

    def canon(x: str) -> str:
        if not x or x in keep:
            return x
        return names.setdefault(x, f"v{len(names)}")

    for node in g.node:
        node.input[:] = [canon(x) for x in node.input]
        node.output[:] = [canon(x) for x in node.output]
    for v in (*g.input, *g.output, *g.value_info, *g.initializer):
        v.name = canon(v.name)
    init_order = sorted(g.initializer, key=lambda t: t.name)
    del g.initializer[:]
    g.initializer.extend(init_order)
    del g.value_info[:]  # shape annotations are derived, not architecture
    return hashlib.sha256(m.SerializeToString(deterministic=True)).hexdigest()


def _drop_value(t) -> None:
    """Clear a stripped initializer's pointer to its data (digest, length, location)."""
    for f in ("raw_data", "float_data", "double_data", "int32_data", "int64_data"):
        t.ClearField(f)
    del t.external_data[:]
