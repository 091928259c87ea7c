"""One ONNX model from a pipeline's steps (``EXPORT PIPELINE``).

Each step's graph is renamed under its step name (``onnx.compose.add_prefix``:
``"<step>/"`` before every value, node and initializer name), each step input
is replaced by the value that feeds it, and the last step's outputs are
exposed under their own names by ``Identity`` nodes. Steps whose default-domain
opsets differ are first converted to the highest one
(``onnx.version_converter``); the merged model imports, per domain, the highest
version any step imports.
"""

from __future__ import annotations

from typing import Optional, Sequence

import onnx
from onnx import ModelProto, helper

from modelsql.errors import NotSupportedError

__all__ = ["merge_pipeline", "merge_steps"]

Feed = tuple[str, Optional[int], str]  # (step input, feeding step position or None, feeding value name)


def _opsets(models: Sequence[ModelProto]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in models:
        for o in m.opset_import:
            out[o.domain] = max(out.get(o.domain, 0), o.version)
    return out


def _at_opset(model: ModelProto, version: int, step: str) -> ModelProto:
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), version)
    if current == version:
        return model
    try:
        return onnx.version_converter.convert_version(model, version)
    except Exception as exc:  # the converter raises its own error classes
        raise NotSupportedError(
            f'Step "{step}" imports ONNX opset {current} and another step {version}; converting it failed: '
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            code="opset_mismatch",
        ) from None


def _rename_inputs(graph, mapping: dict[str, str]) -> None:
    """Rename the values ``graph``'s nodes read (subgraphs too: they may read outer values)."""
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in mapping:
                node.input[k] = mapping[name]
        for attr in node.attribute:
            if attr.HasField("g"):
                _rename_inputs(attr.g, mapping)
            for sub in attr.graphs:
                _rename_inputs(sub, mapping)


def merge_pipeline(steps: Sequence[tuple[str, ModelProto, Sequence[Feed]]], name: str) -> ModelProto:
    """The steps as one self-contained model (``EXPORT PIPELINE``).

    Args:
        steps: ``(step name, self-contained model, feeds)`` in order; feeds give, for each step
            input, the step position and output name feeding it, or ``None`` and a pipeline input name.
        name: the pipeline name (the graph's name).

    Returns:
        a checked ModelProto whose inputs are the pipeline inputs (typed as the first step reading
        each declares it) and whose outputs are the last step's, under their own names.

    Raises:
        NotSupportedError: steps at opsets the converter cannot reconcile (``opset_mismatch``).
    """
    last = len(steps) - 1
    return merge_steps(steps, [(last, o.name, o.name) for o in steps[-1][1].graph.output], name)


def merge_steps(steps: Sequence[tuple[str, ModelProto, Sequence[Feed]]], outputs: Sequence[tuple[int, str, str]],
                name: str) -> ModelProto:
    """Steps as one model (a pipeline, or a PRETZEL *stage*: several steps fused into one session).

    Args:
        steps: ``(step name, self-contained model, feeds)`` in order (step names distinct); a feed
            ``(input, None, name)`` reads the merged model's input ``name``, ``(input, k, out)`` the
            output ``out`` of step ``k``.
        outputs: ``(step position, its output name, the merged model's output name)``.
        name: the graph's name.

    Raises:
        NotSupportedError: steps at opsets the converter cannot reconcile (``opset_mismatch``).
    """
    opsets = _opsets([m for _, m, _ in steps])
    default = opsets.get("", opsets.get("ai.onnx"))
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    infos: list[onnx.ValueInfoProto] = []
    inputs: dict[str, onnx.ValueInfoProto] = {}
    functions: dict[tuple[str, str], onnx.FunctionProto] = {}
    for step, model, feeds in steps:
        m = onnx.compose.add_prefix(_at_opset(model, default, step) if default else model, f"{step}/")
        mapping = {}
        original = {i.name: i for i in model.graph.input}
        for inp, src, src_name in feeds:
            mapping[f"{step}/{inp}"] = src_name if src is None else f"{steps[src][0]}/{src_name}"
            if src is None and src_name not in inputs:
                vi = onnx.ValueInfoProto()
                vi.CopyFrom(original[inp])
                vi.name = src_name
                inputs[src_name] = vi
        _rename_inputs(m.graph, mapping)
        nodes.extend(m.graph.node)
        inits.extend(m.graph.initializer)
        infos.extend(m.graph.value_info)
        for f in m.functions:
            functions.setdefault((f.domain, f.name), f)
    outs = []
    for k, out, exposed in outputs:
        step, model = steps[k][0], steps[k][1]
        spec = next(o for o in model.graph.output if o.name == out)
        nodes.append(helper.make_node("Identity", [f"{step}/{out}"], [exposed], name=f"{name}/output/{exposed}"))
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(spec)
        vi.name = exposed
        outs.append(vi)
    graph = helper.make_graph(nodes, name, list(inputs.values()), outs, initializer=inits, value_info=infos)
    merged = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
        functions=list(functions.values()), producer_name="modelsql",
    )
    merged.ir_version = max(m.ir_version for _, m, _ in steps)
    onnx.checker.check_model(merged)
    return merged
