"""A pipeline's ONNX steps as one differentiable torch program (neural translation of classical pipelines).

Neural translation (Fernandez et al., 2019 and Hummingbird, OSDI 2020) turns a fitted pipeline into a
tensor program so that all its steps can be fine-tuned together by gradient descent. modelsql translates
what its catalog holds, the ONNX graph of each step (skl2onnx's ``ai.onnx.ml`` operators and the standard
ones modelsql's own converters write), node by node: :data:`OPS` maps ``(domain, op_type)`` to a builder.
Every float initializer and every learnable attribute (a scaler's offset and scale, a linear head's
coefficients, a tree's thresholds and leaf values) becomes an ``nn.Parameter``; integer constants (class
labels, shapes, indices) are buffers. Tree ensembles are :class:`~modelsql.finetune.trees.GemmTrees`:
hard (exactly the ensemble) until :meth:`PipelineNet.set_temperature` makes them soft.

:class:`PipelineNet` chains the steps by the pipeline's feeds. Its hard form must agree with ONNX Runtime
running the original steps (:func:`modelsql.engine.finetune.statement` checks it before training: a translation
that is not exact is refused, never fine-tuned).

Raises (every builder): NotSupportedError ``not_supported`` naming the step and the operator.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence, cast

import numpy as np
import torch
from onnx import helper, numpy_helper
from torch import nn

from modelsql.errors import NotSupportedError
from modelsql.finetune.trees import GemmTrees, tree_ensemble

__all__ = ["StepNet", "PipelineNet", "OPS"]

OPS: dict[tuple[str, str], Callable] = {}
"""``(domain, op_type)`` -> ``builder(net, node) -> run(env)``; ``env`` maps value names to tensors."""

_TORCH_TYPES = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool, 11: torch.float64}


def _op(*names: str, domain: str = ""):
    def register(fn):
        for name in names:
            OPS[(domain, name)] = fn
        return fn
    return register


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class StepNet(nn.Module):
    """One step's ONNX graph as a torch module: ``forward(feeds: dict name -> tensor) -> dict name -> tensor``.

    Args:
        proto: the step's self-contained ModelProto.
        label: how errors name the step.
    """

    def __init__(self, proto, label: str) -> None:
        super().__init__()
        self.label = label
        self.params = nn.ParameterDict()
        self.trees = nn.ModuleList()
        self.names: dict[str, str] = {}
        self.classes: dict[str, list] = {}
        """Output name -> the class labels, in probability-column order, of a label output."""
        for init in proto.graph.initializer:
            self._constant(init.name, numpy_helper.to_array(init))
        self.input_names = [i.name for i in proto.graph.input if i.name not in self.names]
        self.output_names = [o.name for o in proto.graph.output]
        self.ops = []
        for node in proto.graph.node:
            build = OPS.get((node.domain or "", node.op_type))
            if build is None:
                raise NotSupportedError(f"{label}: operator {node.domain + '.' if node.domain else ''}{node.op_type} "
                                        "is not translated to torch, so this pipeline cannot be fine-tuned",
                                        code="not_supported")
            self.ops.append(build(self, node))

    def _key(self, name: str) -> str:
        return "p" + str(len(self.names)) + "_" + re.sub(r"\W", "_", name)[:40]

    def _constant(self, name: str, value: np.ndarray) -> None:
        if np.asarray(value).dtype.kind in "OSU":
            raise NotSupportedError(f"{self.label}: constant {name!r} holds text (text class labels): not translated "
                                    "to torch, so this pipeline cannot be fine-tuned", code="not_supported")
        key = self._key(name)
        self.names[name] = key
        tensor = torch.from_numpy(np.array(value))
        if tensor.is_floating_point() and not (tensor.numel() == 1 and float(tensor.reshape(-1)[0]) in (0.0, 1.0)):
            self.params[key] = nn.Parameter(tensor.float())
        else:
            self.register_buffer(key, tensor)

    def learnable(self, name: str, value) -> str:
        """Register an attribute's value as a parameter; the name to read it by."""
        self._constant(name, np.asarray(value, np.float32))
        return name

    def value(self, env: dict, name: str):
        if name in self.names:
            key = self.names[name]
            return self.params[key] if key in self.params else getattr(self, key)
        return env[name]

    def forward(self, feeds: dict) -> dict:
        env = dict(feeds)
        for run in self.ops:
            run(env)
        return {name: env[name] for name in self.output_names}


def _unary(fn):
    def build(net, node):
        def run(env):
            env[node.output[0]] = fn(net.value(env, node.input[0]))
        return run
    return build


for _name, _fn in {"Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
                   "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Abs": torch.abs, "Neg": torch.neg}.items():
    OPS[("", _name)] = _unary(_fn)

def _binary(fn):
    def build(net, node):
        def run(env):
            env[node.output[0]] = fn(net.value(env, node.input[0]), net.value(env, node.input[1]))
        return run
    return build


_BINARY: dict[str, Callable[..., Any]] = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div, "MatMul": torch.matmul,
    "Greater": torch.gt, "Less": torch.lt, "GreaterOrEqual": torch.ge, "LessOrEqual": torch.le, "Equal": torch.eq,
}
for _name, _fn in _BINARY.items():
    OPS[("", _name)] = _binary(_fn)


@_op("Identity")
def _identity(net, node):
    if node.input[0] in net.classes:
        net.classes[node.output[0]] = net.classes[node.input[0]]

    def run(env):
        env[node.output[0]] = net.value(env, node.input[0])
    return run


@_op("Constant")
def _constant_op(net, node):
    a = node.attribute[0]
    if a.name != "value":
        raise NotSupportedError(f"{net.label}: Constant with {a.name} is not translated", code="not_supported")
    net._constant(node.output[0], numpy_helper.to_array(a.t))
    return lambda env: None


@_op("Shape")
def _shape(net, node):
    def run(env):
        env[node.output[0]] = torch._shape_as_tensor(net.value(env, node.input[0]))  # traced as a Shape node
    return run


@_op("Unsqueeze", "Squeeze")
def _squeeze(net, node):
    def run(env):
        x = net.value(env, node.input[0])
        axes = net.value(env, node.input[1]).tolist() if len(node.input) > 1 else _attrs(node).get("axes", [])
        if node.op_type == "Unsqueeze":
            for ax in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
                x = x.unsqueeze(ax)
        else:
            x = x.squeeze(tuple(int(a) for a in axes)) if axes else x.squeeze()
        env[node.output[0]] = x
    return run


@_op("Gemm")
def _gemm(net, node):
    a = _attrs(node)

    def run(env):
        x, w = net.value(env, node.input[0]), net.value(env, node.input[1])
        x = x.t() if a.get("transA") else x
        w = w.t() if a.get("transB") else w
        out = a.get("alpha", 1.0) * (x @ w)
        if len(node.input) > 2 and node.input[2]:
            out = out + a.get("beta", 1.0) * net.value(env, node.input[2])
        env[node.output[0]] = out
    return run


@_op("Softmax")
def _softmax(net, node):
    axis = _attrs(node).get("axis", -1)

    def run(env):
        env[node.output[0]] = torch.softmax(net.value(env, node.input[0]), dim=axis)
    return run


@_op("ArgMax")
def _argmax(net, node):
    a = _attrs(node)

    def run(env):
        env[node.output[0]] = torch.argmax(net.value(env, node.input[0]), dim=a.get("axis", 0),
                                           keepdim=bool(a.get("keepdims", 1)))
    return run


@_op("Gather")
def _gather(net, node):
    axis = _attrs(node).get("axis", 0)
    if node.input[0] in net.names and axis == 0:  # classes[argmax(probabilities)]: a label output
        table = net.value({}, node.input[0])
        if not table.is_floating_point() and table.ndim == 1:
            net.classes[node.output[0]] = table.tolist()

    def run(env):
        data, idx = net.value(env, node.input[0]), net.value(env, node.input[1]).long()
        env[node.output[0]] = torch.index_select(data, axis, idx.reshape(-1)).reshape(
            data.shape[:axis] + idx.shape + data.shape[axis + 1:])
    return run


@_op("Cast")
def _cast(net, node):
    to = _TORCH_TYPES.get(_attrs(node)["to"])
    if node.input[0] in net.classes:
        net.classes[node.output[0]] = net.classes[node.input[0]]
    if to is None:
        raise NotSupportedError(f"{net.label}: Cast to ONNX type {_attrs(node)['to']} is not translated",
                                code="not_supported")

    def run(env):
        env[node.output[0]] = net.value(env, node.input[0]).to(to)
    return run


@_op("Reshape")
def _reshape(net, node):
    if node.input[0] in net.classes:  # a label output reshaped keeps its classes
        net.classes[node.output[0]] = net.classes[node.input[0]]

    def run(env):
        x = net.value(env, node.input[0])
        shape = [int(d) for d in net.value(env, node.input[1]).tolist()]
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        if shape and x.ndim and shape[0] == x.shape[0] and -1 not in shape:
            shape[0] = -1  # the batch axis stays the batch axis at every size (and traces so)
        env[node.output[0]] = x.reshape(shape)
    return run


@_op("Flatten")
def _flatten(net, node):
    axis = _attrs(node).get("axis", 1)

    def run(env):
        x = net.value(env, node.input[0])
        env[node.output[0]] = x.reshape(int(np.prod(x.shape[:axis])), -1)
    return run


@_op("Concat")
def _concat(net, node):
    axis = _attrs(node)["axis"]

    def run(env):
        env[node.output[0]] = torch.cat([net.value(env, n) for n in node.input], dim=axis)
    return run


@_op("Scaler", domain="ai.onnx.ml")
def _scaler(net, node):
    a = _attrs(node)
    offset = net.learnable(node.output[0] + "/offset", a.get("offset", [0.0]))
    scale = net.learnable(node.output[0] + "/scale", a.get("scale", [1.0]))

    def run(env):
        env[node.output[0]] = (net.value(env, node.input[0]).float() - net.value(env, offset)) * net.value(env, scale)
    return run


@_op("TreeEnsembleClassifier", "TreeEnsembleRegressor", domain="ai.onnx.ml")
def _trees(net, node):
    module, extra = tree_ensemble(node, n_features=0)
    if extra["classifier"] and not all(isinstance(v, (int, np.integer)) for v in extra["classlabels"]):
        raise NotSupportedError(f"{net.label}: a tree classifier with text labels is not translated",
                                code="not_supported")
    net.trees.append(module)
    labels = torch.as_tensor(extra["classlabels"] or [0], dtype=torch.int64)
    if extra["classifier"]:
        net.classes[node.output[0]] = list(extra["classlabels"])
    post = extra["post_transform"]
    if post not in ("NONE", "SOFTMAX", "LOGISTIC"):
        raise NotSupportedError(f"{net.label}: post_transform {post} is not translated", code="not_supported")

    positive_only = module.leaf_values.shape[1] == 1 and extra["n_outputs"] == 2  # one column: the positive class

    def run(env):
        scores = module(net.value(env, node.input[0]).float())
        if not extra["classifier"]:
            env[node.output[0]] = torch.sigmoid(scores) if post == "LOGISTIC" else scores
            return
        if positive_only:
            p = torch.sigmoid(scores) if post == "LOGISTIC" else scores
            probs = torch.cat([1 - p, p], dim=1)
        else:
            probs = {"SOFTMAX": lambda s: torch.softmax(s, dim=1), "LOGISTIC": torch.sigmoid}.get(post, lambda s: s)(
                scores)
        env[node.output[0]] = labels.to(probs.device)[torch.argmax(probs, dim=1)]
        env[node.output[1]] = probs
    return run


class PipelineNet(nn.Module):
    """A pipeline version's steps chained by its feeds: ``forward(*inputs)`` -> the last step's outputs (tuple,
    in the pipeline's output order).

    Args:
        pipeline: a :class:`~modelsql.catalog.entries.PipelineVersion`.
        protos: each step's ModelProto, in step order.
    """

    def __init__(self, pipeline, protos: Sequence) -> None:
        super().__init__()
        self.steps = nn.ModuleList(StepNet(p, f'pipeline "{pipeline.name}" step "{s.name}"')
                                   for s, p in zip(pipeline.steps, protos))
        self.feeds = [tuple((f.input, f.from_step, f.from_name) for f in s.feeds) for s in pipeline.steps]
        self.input_names = [i.name for i in pipeline.inputs]
        self.output_names = [o.name for o in pipeline.outputs]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        given = dict(zip(self.input_names, inputs))
        outs: list[dict] = []
        for step, feeds in zip(self.steps, self.feeds):
            outs.append(step({inp: given[name] if src is None else outs[src][name] for inp, src, name in feeds}))
        return tuple(outs[-1][name] for name in self.output_names)

    def classes(self) -> list:
        """The class labels in the order of the probabilities' columns (from the last step's label output).

        Raises:
            NotSupportedError: ``not_supported`` when no output of the last step is a label of known classes.
        """
        last = self.step_nets()[-1]
        for name in self.output_names:
            if name in last.classes:
                return last.classes[name]
        raise NotSupportedError("the pipeline's last step has no label output of known classes (a classifier's "
                                "label computed from its probabilities)", code="not_supported")

    def tree_modules(self) -> list[GemmTrees]:
        return [cast(GemmTrees, t) for s in self.step_nets() for t in s.trees]

    def step_nets(self) -> list[StepNet]:
        """The steps (``self.steps`` is an ``nn.ModuleList``, whose items are typed as plain modules)."""
        return [cast(StepNet, s) for s in self.steps]

    def set_temperature(self, temperature: float) -> None:
        """0: hard trees (the original function); > 0: soft trees at that temperature."""
        for t in self.tree_modules():
            t.temperature = float(temperature)

    def calibrate(self, *inputs) -> None:
        """Each tree ensemble's feature spreads from the training rows, as they reach it (hard forward)."""
        hooks = [t.register_forward_pre_hook(lambda m, args: m.calibrate(args[0])) for t in self.tree_modules()]
        try:
            with torch.no_grad():
                self(*inputs)
        finally:
            for h in hooks:
                h.remove()
