"""A Python program as one ONNX graph, kept only if a safety gate says the graph computes what the program does.

JANUS (Jeong et al., NSDI 2019) converts imperative programs into symbolic graphs speculatively, behind
guards; an exporter that drops a guard answers wrongly without saying so. Measured with torch 2.13 on ten
small programs: the legacy ONNX tracer was silently wrong on 7, the dynamo exporter on 3 (strings baked
into a model with no inputs, module state frozen, a batch-size branch whose ``range_constraints`` the ONNX
file drops). So the graph is made by ``torch.export.export(strict=True)`` with a dynamic batch dimension,
then ``torch.onnx.export(exported_program, dynamo=True)`` (never the legacy tracer), and kept only when
every rule of :func:`whole_graph` holds, in order:

1. ``non_tensor_input``: every input is a tensor (a list of str would be baked into the graph);
2. ``export_failed``: strict export succeeds (data-dependent control flow fails here; the suggestion is a
   ``torch.cond`` rewrite);
3. ``batch_range``: the exported program's ``range_constraints`` on the batch dimension are not narrower
   than the declared batch range [1, ∞) (torch's 0/1 specialisation makes every dynamic dimension start
   at 2; batch 1 is covered by the differential test);
4. ``mutates_state``: ``graph_signature.buffers_to_mutate`` is empty and no module attribute, buffer or
   parameter changes across two eager calls (the graph would freeze it);
5. ``onnx_export_failed``: the dynamo ONNX exporter succeeds;
6. ``differential_test``: ONNX Runtime agrees with eager PyTorch (within
   :data:`~modelsql.converters.python_program.RTOL` / ``ATOL``) at batches 1, 7, 8, 32 and 1000 drawn from
   the example, on the example scaled by 10 and negated, on integer inputs moved below and above the
   example's range (where eager raises, ONNX Runtime must refuse too: ONNX's Gather takes a negative
   index that PyTorch refuses), and on the user's sample rows when given.

torch and onnxscript are imported lazily (the ``torch`` extra).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from modelsql.errors import DataError
from modelsql.converters.graph_edit import BATCH_DIM
from modelsql.converters.python_program import Program, as_tuple, call, close, first_line, quiet, to_numpy

__all__ = ["GateResult", "whole_graph", "differential_test", "cases", "DIFFERENTIAL_BATCHES", "RULES"]

DIFFERENTIAL_BATCHES = (1, 7, 8, 32, 1000)
"""Batch sizes of the differential test (the issue's; 7 and 8 straddle a typical size branch)."""

RULES = ("non_tensor_input", "export_failed", "batch_range", "mutates_state", "onnx_export_failed",
         "differential_test")
"""The gate's rules, in the order they are checked."""


@dataclass(frozen=True)
class GateResult:
    """What the gate decided.

    Attributes:
        proto: the ONNX ModelProto when every rule held, else None.
        rule: the first rule that failed (one of :data:`RULES`), or None.
        reason: what failed, in words (or what passed).
        suggestion: a rewrite that would make the program exportable (``torch.cond`` for a data-dependent
            branch), or None.
    """

    proto: Any
    rule: Optional[str]
    reason: str
    suggestion: Optional[str] = None


def _refuse(rule: str, reason: str, suggestion: Optional[str] = None) -> GateResult:
    return GateResult(None, rule, reason, suggestion)


def whole_graph(prog: Program, samples: Sequence[tuple] = (), seed: int = 0) -> GateResult:
    """Export ``prog`` as one ONNX graph and run the safety gate (rules in the module docstring).

    ``samples``: the user's sample batches (argument tuples) for the differential test. The user's module
    is never touched: export and the state check run on copies.
    """
    import torch

    loose = [s.name for s, a in zip(prog.inputs, prog.example) if not isinstance(a, torch.Tensor)]
    if loose:
        return _refuse("non_tensor_input", f'input "{loose[0]}" is not a tensor (a list of str or of tensors): a '
                       "graph would bake its example values in.")
    args = _exportable_example(prog.example)
    try:
        ep = _export(copy.deepcopy(prog.module), args)
    except Exception as exc:  # torch.export's refusals are many classes; each is a reason to fall back
        return _refuse("export_failed", f"torch.export (strict) failed: {first_line(exc)}", _suggestion(exc))
    narrow = _narrow_batch(ep)
    if narrow is not None:
        return _refuse("batch_range", narrow, "branch on the batch size outside forward, or make both branches "
                       "compute the same function")
    mutated = _mutation(ep, prog)
    if mutated is not None:
        return _refuse("mutates_state", mutated)
    try:
        proto = _to_onnx(ep, prog)
    except Exception as exc:
        return _refuse("onnx_export_failed", f"the dynamo ONNX exporter failed: {_onnx_failure(exc)}")
    wrong = differential_test(prog, proto, samples, seed)
    if wrong is not None:
        return _refuse("differential_test", wrong)
    return GateResult(proto, None, "whole graph: strict torch.export, every gate rule held")


def _exportable_example(example: tuple) -> tuple:
    """The example with at least 2 rows (a dynamic dimension of size 1 is specialised away)."""
    return tuple(a.repeat(2, *([1] * (a.ndim - 1))) if a.shape[0] < 2 else a for a in example)


def _export(module, args: tuple):
    import torch
    from torch.export import Dim

    module.eval()
    with quiet():
        return torch.export.export(module, args, dynamic_shapes=tuple({0: Dim.DYNAMIC} for _ in args), strict=True)


def _onnx_failure(exc: Exception) -> str:
    """The line of the dynamo exporter's report that names the operator it could not translate."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    found = re.search(r"No ONNX function found for <OpOverload\(op='([^']+)'", text)
    if found:
        return f"no ONNX function for operator {found.group(1)}"
    return first_line(exc)


def _suggestion(exc: Exception) -> Optional[str]:
    text = str(exc).lower()
    if "data-dependent" in text or "data dependent" in text:
        return ("rewrite the branch on a tensor value with torch.cond(pred, true_fn, false_fn, (x,)) (both "
                "branches become an ONNX If) or a loop with torch.where masks")
    return None


def _narrow_batch(ep) -> Optional[str]:
    """Why the exported program's batch range is narrower than [1, ∞), or None."""
    from torch.utils._sympy.numbers import int_oo

    for spec in ep.graph_signature.input_specs:
        if spec.kind.name != "USER_INPUT":
            continue
        node = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == spec.arg.name)
        dim = node.meta["val"].shape[0]
        if isinstance(dim, int):
            return f"the exported graph fixes the batch dimension of {spec.arg.name} to {dim}"
        for symbol, bounds in ep.range_constraints.items():
            if str(symbol) == str(dim.node.expr):
                lower, upper = int(bounds.lower), bounds.upper
                if lower > 2 or upper != int_oo:
                    return (f"torch.export guards the batch dimension to [{lower}, {upper}] (a branch on the batch "
                            "size); the ONNX file would drop that guard and run one branch at every batch size")
    return None


def _mutation(ep, prog: Program) -> Optional[str]:
    mutated = dict(ep.graph_signature.buffers_to_mutate)
    if mutated:
        return f"forward mutates buffer {sorted(mutated.values())[0]}: the graph would freeze it"
    module = copy.deepcopy(prog.module)
    before = _state(module)
    call(module, prog.example, "the program")
    call(module, prog.example, "the program")
    after = _state(module)
    for key in sorted(set(before) | set(after)):
        if not _equal(before.get(key, _MISSING), after.get(key, _MISSING)):
            return f"forward changes module state {key} across calls: the graph would freeze it"
    return None


_MISSING = object()


def _module_internals() -> set:
    """The attributes every ``nn.Module`` has (its registries and flags), which are not the program's state."""
    import torch

    return set(vars(torch.nn.Module())) | {"training"}


def _state(module) -> dict:
    """Every parameter, buffer and public attribute of ``module`` and its submodules, copied."""
    out = {f"{k} (tensor)": v.detach().clone() for k, v in module.state_dict(keep_vars=True).items()}
    internal = _module_internals()
    for prefix, sub in module.named_modules():
        for k, v in vars(sub).items():
            if k not in internal:
                try:
                    out[f"{prefix + '.' if prefix else ''}{k}"] = copy.deepcopy(v)
                except Exception:  # an attribute that cannot be copied is compared by identity
                    out[f"{prefix + '.' if prefix else ''}{k}"] = v
    return out


def _equal(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(
            torch.equal(a, b))
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else bool(np.array_equal(a, b))
    except Exception:
        return a is b


def _to_onnx(ep, prog: Program):
    import torch

    with quiet():
        onnx_program = torch.onnx.export(ep, dynamo=True, input_names=prog.input_names,
                                         output_names=prog.output_names, verbose=False)
    assert onnx_program is not None, "torch.onnx.export(dynamo=True) returns its ONNXProgram"
    proto = onnx_program.model_proto
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims) and dims[0].dim_param:
            dims[0].dim_param = BATCH_DIM
    return proto


def differential_test(prog: Program, proto, samples: Sequence[tuple] = (), seed: int = 0) -> Optional[str]:
    """What differs between ONNX Runtime running ``proto`` and eager ``prog`` (None when they agree) on
    the batches of :data:`DIFFERENTIAL_BATCHES` drawn from the example, the example scaled and negated,
    and ``samples``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for what, args in cases(prog, samples, seed):
        try:
            expected = to_numpy(call(copy.deepcopy(prog.module), args, "the program"))
        except DataError:
            expected = None  # eager refuses these values: the graph must refuse them too
        try:
            got = session.run(prog.output_names, {n: a.numpy() for n, a in zip(prog.input_names, args)})
        except Exception as exc:  # ONNX Runtime refused an input the program took
            if expected is None:
                continue
            return f"ONNX Runtime failed on {what}: {first_line(exc)}"
        if expected is None:
            return f"eager PyTorch raises on {what} but ONNX Runtime answers (the graph would answer where the program refuses)"
        diff = close(list(got), expected)
        if diff is not None:
            return f"ONNX Runtime and eager PyTorch disagree on {what}: {diff}"
    return None


def cases(prog: Program, samples: Sequence[tuple] = (), seed: int = 0):
    """(what, argument tuple) pairs: batches of :data:`DIFFERENTIAL_BATCHES` rows drawn from the example with
    noise, the example scaled by 10 and negated, then ``samples``."""
    rng = np.random.default_rng(seed)
    n = prog.rows()
    for batch in DIFFERENTIAL_BATCHES:
        idx = rng.integers(0, n, batch)
        yield f"a batch of {batch} rows", tuple(_jitter(_pick(a, idx), rng) for a in prog.example)
    yield "the example scaled by 10", tuple(_scaled(a, 10) for a in prog.example)
    yield "the example negated", tuple(_scaled(a, -1) for a in prog.example)
    if any(_is_int(a) for a in prog.example):
        yield "integers below the example's range", tuple(a - (a.max() - a.min() + 1) if _is_int(a) else a
                                                         for a in prog.example)
        yield "integers above the example's range", tuple(a + (a.max() - a.min() + 1) if _is_int(a) else a
                                                         for a in prog.example)
    for k, args in enumerate(samples):
        yield f"sample batch {k + 1}", as_tuple(args)


def _pick(a, idx: np.ndarray):
    """Rows ``idx`` of a tensor or of a list of str."""
    import torch

    return [a[i] for i in idx] if isinstance(a, list) else a[torch.from_numpy(idx)]


def _is_int(a) -> bool:
    import torch

    return isinstance(a, torch.Tensor) and a.numel() > 0 and a.dtype in (torch.int8, torch.int16, torch.int32,
                                                                           torch.int64, torch.uint8)


def _scaled(a, factor: float):
    return a * factor if hasattr(a, "is_floating_point") and a.is_floating_point() else a


def _jitter(a, rng):
    """Rows drawn from the example, float values moved by noise of the example's own spread."""
    import torch

    if not hasattr(a, "is_floating_point") or not a.is_floating_point() or a.shape[0] == 0:
        return a
    scale = float(a.std()) if a.numel() > 1 else 1.0
    noise = torch.from_numpy(rng.standard_normal(tuple(a.shape)).astype(np.float32)).to(a.dtype)
    return a + noise * (scale or 1.0) * 0.5
