"""PyTorch modules to ONNX, through ``torch.onnx.export``.

The module is exported in eval mode with constant folding, opset
:data:`DEFAULT_OPSET`, and a symbolic batch axis ``"N"`` (dimension 0 of every
named input and output), so the graph runs for any batch size.

The TorchScript-based exporter (``dynamo=False``) is used: it needs nothing
beyond torch itself. The newer ``torch.export``-based exporter (torch's default
since 2.9) needs the ``onnxscript`` package and is not used. Converting an
imperative program into a symbolic graph by tracing is the baseline that
JANUS (Jeong et al., NSDI 2019) and Terra (Kim et al., NeurIPS 2021) improve
on: data-dependent Python control flow is frozen at the traced path.

torch is imported lazily: it is an optional dependency (``pip install 'modelsql[torch]'``).
"""

from __future__ import annotations

import io
import warnings
from typing import Optional, Any, Sequence

import onnx

from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.converters.graph_edit import BATCH_DIM, dedupe_opsets
from modelsql.onnxformat.load import check_model

__all__ = ["from_torch", "is_torch_module", "DEFAULT_OPSET"]

DEFAULT_OPSET = 17
"""Opset of exported models (supported by onnxruntime >= 1.14 and by torch's TorchScript exporter)."""

_INSTALL_HINT = "pip install 'modelsql[torch]'"


def is_torch_module(obj: Any) -> bool:
    """True for a ``torch.nn.Module`` instance; never imports torch (if torch is not
    imported yet, no object can be a Module)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "nn"):
        return False
    return isinstance(obj, torch.nn.Module)


def _as_args(example_input: Any, torch: Any) -> tuple:
    if isinstance(example_input, list):
        example_input = tuple(example_input)
    if not isinstance(example_input, tuple):
        example_input = (example_input,)
    out = []
    for a in example_input:
        if not isinstance(a, torch.Tensor) and hasattr(a, "__array__"):
            a = torch.as_tensor(a)
        out.append(a)
    return tuple(out)


def from_torch(
    module: Any,
    example_input: Any,
    *,
    input_names: Optional[Sequence[str]] = None,
    output_names: Sequence[str] = ("output",),
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """Export a ``torch.nn.Module`` to ONNX with a dynamic batch axis.

    Args:
        module: the module; put in eval mode for the export and restored afterwards.
        example_input: a tensor (or NumPy array), or a tuple/list of them, one per
            input, with the batch on dimension 0. Used for tracing only.
        input_names, output_names: ONNX names of the graph's inputs and outputs. Inputs default
            to ``("input",)`` for one example input, and for several to the names of
            ``module.forward``'s parameters (so PREDICT binds them to columns of those names),
            else ``input0``, ``input1`` ...
        opset: default-domain opset to export to.

    Returns:
        The checked ModelProto; dimension 0 of every named input and output is ``"N"``.

    Raises:
        NotSupportedError: code ``missing_dependency`` without torch;
            ``conversion_failed`` if ``torch.onnx.export`` fails (unsupported operator,
            data-dependent control flow it cannot trace ...).
        ProgrammingError: code ``unsupported_model`` if ``module`` is not a Module;
            ``input_count_mismatch`` if ``input_names`` and ``example_input`` differ in length.
    """
    try:
        import torch
    except ImportError:
        raise NotSupportedError(
            f"converting PyTorch modules needs torch: {_INSTALL_HINT}", code="missing_dependency"
        ) from None
    if not isinstance(module, torch.nn.Module):
        raise ProgrammingError(
            f"expected a torch.nn.Module, got {type(module).__name__}", code="unsupported_model"
        )
    args = _as_args(example_input, torch)
    if isinstance(input_names, str):
        raise ProgrammingError(
            f"input_names must be a sequence of names, one per example input, not the string {input_names!r}",
            code="input_count_mismatch",
        )
    input_names = list(input_names) if input_names is not None else _default_input_names(module, len(args))
    if len({str(n).lower() for n in input_names}) != len(input_names):
        raise ProgrammingError(f"input_names {input_names} name an input twice", code="duplicate_input_name")
    output_names = list(output_names)
    if len(input_names) != len(args):
        raise ProgrammingError(
            f"{len(input_names)} input names for {len(args)} example inputs", code="input_count_mismatch"
        )
    dynamic_axes = {n: {0: BATCH_DIM} for n in input_names + output_names}
    kwargs: dict[str, Any] = dict(
        export_params=True,
        opset_version=opset,
        do_constant_folding=True,
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=dynamic_axes,
    )
    cls_name = type(module).__name__
    was_training = module.training
    module.eval()
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            # the TorchScript exporter's deprecation notices; TracerWarnings (values
            # frozen into the graph) still reach the user
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            try:
                # torch annotates f as a path, but the TorchScript exporter writes to a file-like object too
                torch.onnx.export(module, args, buf, dynamo=False, **kwargs)  # type: ignore[arg-type]
            except TypeError as exc:
                if "dynamo" not in str(exc):
                    raise
                buf = io.BytesIO()  # torch < 2.5: no `dynamo` argument, TorchScript is the default
                torch.onnx.export(module, args, buf, **kwargs)  # type: ignore[arg-type]  # f: as above
    except Exception as exc:
        text = str(exc).strip()
        msg = text.splitlines()[0] if text else type(exc).__name__
        raise NotSupportedError(
            f"torch.onnx.export cannot export the {cls_name}: {msg}", code="conversion_failed"
        ) from None
    finally:
        module.train(was_training)
    model = onnx.load_model_from_string(buf.getvalue())
    dedupe_opsets(model)
    check_model(model, f"the ONNX graph exported from the {cls_name}")
    return model


def _default_input_names(module: Any, count: int) -> list[str]:
    """``["input"]`` for one input; else ``forward``'s positional parameter names, or ``input0`` ... ``input{n-1}``."""
    if count == 1:
        return ["input"]
    import inspect

    try:
        params = [
            p.name for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    if len(params) >= count and len({n.lower() for n in params[:count]}) == count:
        return params[:count]
    return [f"input{i}" for i in range(count)]
