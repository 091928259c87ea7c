"""A PyTorch program and its example batch, as ``CREATE MODEL m FROM PYTHON 'pkg.mod:obj'`` imports it.

A program is a ``torch.nn.Module`` whose ``forward`` takes one batch: each positional parameter is one
input, a tensor with the batch on dimension 0 (float, integer or boolean) or a list of ``str`` (one text
per row). Its signature is read from the example batch: input ``p`` of ``forward(self, p)`` is a
:class:`~modelsql.catalog.entries.TensorSpec` named ``p`` of the example's element type with dimension 0
symbolic (``"N"``), so PREDICT binds it to a column named ``p`` (or, for a single input, to the feature
columns) exactly as it binds an ONNX model's inputs.

PREDICT's answer is a function of each row; batching is only an optimisation. So a program is checked
for **row independence** on the example (and on a larger batch drawn from it): eager outputs of the whole
batch against eager outputs of each row alone. A program whose rows depend on their batch (an ``if`` on
the batch's mean, a branch on the batch size) is run one row per call, which is what it computes for a
row on its own; the catalog says so (``batch_dependence``).

torch is imported lazily (the ``torch`` extra).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from modelsql.catalog.entries import TensorSpec
from modelsql.errors import DataError, ProgrammingError

__all__ = ["Program", "program", "forward_inputs", "as_tuple", "call", "take", "to_args", "to_feeds", "to_numpy", "outputs_of", "row_dependence",
           "close", "quiet", "first_line", "is_ragged", "RAGGED", "RTOL", "ATOL", "ELEM_TYPES", "NUMPY_TYPES"]

ELEM_TYPES = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "FLOAT16", "int64": "INT64", "int32": "INT32",
              "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}
"""NumPy / torch dtype name -> the ONNX element type a column carries it as."""
NUMPY_TYPES = {v: k for k, v in ELEM_TYPES.items()}
"""ONNX element type -> NumPy dtype name (the inverse of :data:`ELEM_TYPES`)."""

RAGGED = "ragged"
"""The name of an input's dimension 1 when its rows have different lengths (a tree's nodes): the input is a
list of tensors, one per row, and PREDICT feeds it from a list column whose rows differ in length."""

RTOL, ATOL = 1e-4, 1e-5
"""Tolerance of every comparison of a program's outputs (float32 kernels reorder sums by batch size)."""


@dataclass(frozen=True)
class Program:
    """A program ready to import.

    Attributes:
        module: the ``torch.nn.Module`` (in eval mode).
        example: the example batch, one value per input (tensors, or a list of str).
        inputs: one spec per input, named after ``forward``'s parameters, dimension 0 ``"N"``.
        outputs: one spec per output (``output`` for one, else ``output0`` ... or the names given).
    """

    module: Any
    example: tuple
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def rows(self) -> int:
        """Rows of the example batch."""
        return _rows(self.example[0])


def _rows(value) -> int:
    return len(value) if isinstance(value, (list, tuple)) else int(value.shape[0])


def forward_inputs(module) -> list[str]:
    """The names of ``module.forward``'s positional parameters, in order."""
    return [p.name for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _parameters(module, count: int, label: str) -> list[str]:
    params = forward_inputs(module)
    if len(params) < count:
        raise ProgrammingError(f"{label}: forward takes {len(params)} positional inputs but the example has {count}.",
                               code="input_count_mismatch")
    return params[:count]


def _spec(name: str, value, label: str) -> TensorSpec:
    import torch

    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return TensorSpec(name, "STRING", ("N",))
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) and v.ndim >= 1 for v in value):
        first = value[0]
        elem = ELEM_TYPES.get(str(first.dtype).replace("torch.", ""))
        if elem is None or any(v.dtype != first.dtype or v.shape[1:] != first.shape[1:] for v in value):
            raise ProgrammingError(f'{label}: example input "{name}" is a list of tensors of different dtypes or '
                                   "inner shapes; a ragged input's rows differ only in their first dimension.",
                                   code="unsupported_input")
        return TensorSpec(name, elem, ("N", RAGGED) + tuple(int(d) for d in first.shape[1:]))
    if not isinstance(value, torch.Tensor) or value.ndim == 0:
        raise ProgrammingError(
            f'{label}: example input "{name}" is a {type(value).__name__}; an input is a tensor with the batch on '
            "dimension 0 or a list of str (one text per row).", code="unsupported_input")
    elem = ELEM_TYPES.get(str(value.dtype).replace("torch.", ""))
    if elem is None:
        raise ProgrammingError(f'{label}: example input "{name}" has dtype {value.dtype}, which no column carries.',
                               code="unsupported_input")
    return TensorSpec(name, elem, ("N",) + tuple(int(d) for d in value.shape[1:]))


def as_tuple(example) -> tuple:
    """The example batch as one value per input: a tuple stays, a list of str is one input."""
    if isinstance(example, tuple):
        return example
    if isinstance(example, list) and not all(isinstance(v, str) for v in example):
        return tuple(example)
    return (example,)


def program(module, example, *, output_names: Optional[Sequence[str]] = None, input_names: Optional[Sequence[str]] = None,
            label: str = "the program") -> Program:
    """Describe ``module`` from its example batch (run once, eagerly, under ``no_grad``); inputs are named after
    ``forward``'s parameters unless ``input_names`` are given.

    Raises:
        ProgrammingError: ``unsupported_input`` (an input that is not a batch tensor or a list of str),
            ``input_count_mismatch``, ``unsupported_output`` (an output that is not a tensor with one row
            per input row), ``invalid_option`` (``output_names`` of the wrong length, or a name used twice).
        DataError: ``program_failed`` (the program raised on its own example).
    """
    import torch

    module.eval()
    args = tuple(torch.as_tensor(a) if isinstance(a, np.ndarray) else a for a in as_tuple(example))
    names = list(input_names) if input_names else _parameters(module, len(args), label)
    inputs = tuple(_spec(n, a, label) for n, a in zip(names, args))
    rows = {_rows(a) for a in args}
    if len(rows) != 1:
        raise ProgrammingError(f"{label}: the example's inputs have different batch sizes {sorted(rows)}.",
                               code="unsupported_input")
    outs = outputs_of(call(module, args, label))
    n = rows.pop()
    if n == 0:
        raise ProgrammingError(f"{label}: the example has no rows", code="example_missing")
    for k, o in enumerate(outs):
        if not isinstance(o, torch.Tensor) or o.ndim == 0 or o.shape[0] != n:
            raise ProgrammingError(
                f"{label}: output {k} is {type(o).__name__}{'' if not hasattr(o, 'shape') else ' ' + str(list(o.shape))};"
                f" an output is a tensor with one row per input row ({n}).", code="unsupported_output")
    names_out = list(output_names) if output_names else (["output"] if len(outs) == 1 else
                                                         [f"output{k}" for k in range(len(outs))])
    if len(names_out) != len(outs):
        raise ProgrammingError(f"{label}: {len(names_out)} output names for {len(outs)} outputs.", code="invalid_option")
    clash = [nm for k, nm in enumerate(names_out) if nm.lower() in {x.lower() for x in names_out[:k]} or
             nm.lower() in {x.lower() for x in names}]
    if clash:
        raise ProgrammingError(f'{label}: output name "{clash[0]}" is used twice (an output or an input has it).',
                               code="invalid_option")
    outputs = tuple(_spec(nm, o, label) for nm, o in zip(names_out, outs))
    return Program(module, args, inputs, outputs)


def call(module, args: tuple, label: str):
    """``module(*args)`` under ``no_grad``; a failure is a DataError ``program_failed`` naming ``label``."""
    import torch

    try:
        with torch.no_grad():
            return module(*args)
    except Exception as exc:  # the user's program: any error is its own
        raise DataError(f"{label} failed: {first_line(exc, None)}", code="program_failed") from exc


def outputs_of(result) -> list:
    """A program's result as a list of outputs (a tensor is one; a tuple or list is several)."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


def to_args(feeds: dict, inputs: Sequence[TensorSpec]) -> tuple:
    """PREDICT's NumPy feeds (input name -> array, rows on axis 0) as the program's arguments."""
    import torch

    out: list[Any] = []
    for spec in inputs:
        value = feeds[spec.name]
        if spec.elem_type == "STRING":
            out.append([str(v) for v in value])
        elif is_ragged(spec):
            out.append([torch.from_numpy(np.array(v, dtype=NUMPY_TYPES[spec.elem_type])) for v in value])
        else:
            array = np.ascontiguousarray(value, dtype=NUMPY_TYPES[spec.elem_type])
            out.append(torch.from_numpy(array if array.flags.writeable else array.copy()))
    return tuple(out)


def to_feeds(args: tuple, inputs: Sequence[TensorSpec]) -> dict:
    """The program's arguments as PREDICT's NumPy feeds (the inverse of :func:`to_args`)."""
    out = {}
    for s, a in zip(inputs, args):
        if s.elem_type == "STRING":
            out[s.name] = np.array(a, dtype=object)
        elif is_ragged(s):
            out[s.name] = np.empty(len(a), dtype=object)
            out[s.name][:] = [v.detach().numpy() for v in a]
        else:
            out[s.name] = a.detach().numpy()
    return out


def is_ragged(spec: TensorSpec) -> bool:
    """True for an input whose rows differ in length (dimension 1 named :data:`RAGGED`)."""
    return spec.shape is not None and len(spec.shape) > 1 and spec.shape[1] == RAGGED


def to_numpy(result) -> list[np.ndarray]:
    """A program's outputs as NumPy arrays."""
    return [o.detach().cpu().numpy() if hasattr(o, "detach") else np.asarray(o) for o in outputs_of(result)]


def take(args: tuple, rows: slice) -> tuple:
    """The rows ``rows`` of each argument (a tensor or a list of str)."""
    return tuple(a[rows] for a in args)


def close(a: list[np.ndarray], b: list[np.ndarray]) -> Optional[str]:
    """None when the two output lists agree within (:data:`RTOL`, :data:`ATOL`), else what differs."""
    if len(a) != len(b):
        return f"{len(a)} outputs against {len(b)}"
    for k, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return f"output {k} has shape {list(x.shape)} against {list(y.shape)}"
        if x.dtype.kind in "fc":
            if not np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True):
                return f"output {k} differs by up to {float(np.nanmax(np.abs(x.astype(float) - y.astype(float)))):.3g}"
        elif not np.array_equal(x, y):
            return f"output {k} differs in {int((x != y).sum())} values"
    return None


def row_dependence(prog: Program, batches: Sequence[tuple]) -> Optional[str]:
    """Why a row's outputs depend on the other rows of its batch, or None: each batch of ``batches``
    (argument tuples) run whole against its rows run one at a time (eagerly); a batch the program raises on
    is skipped."""
    for args in batches:
        try:
            whole = to_numpy(call(prog.module, args, "the program"))
        except DataError:
            continue  # values the program refuses (an index out of its range): not a batch it can be given
        rows = [to_numpy(call(prog.module, take(args, slice(i, i + 1)), "the program")) for i in range(_rows(args[0]))]
        try:
            alone = [np.concatenate([r[k] for r in rows]) for k in range(len(whole))]
        except ValueError:
            return f"a batch of {_rows(args[0])} rows: its rows alone give outputs of different shapes"
        diff = close(whole, alone)
        if diff is not None:
            return f"a batch of {_rows(args[0])} rows against each row alone: {diff}"
    return None


@contextlib.contextmanager
def quiet():
    """Silence the exporters' progress prints, warnings and log lines (the gate reports what matters)."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._dynamo", "torch.export", "torch._export",
                                              "torch.fx.experimental.symbolic_shapes", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def first_line(exc: Exception, limit: Optional[int] = 300) -> str:
    """``"<exception class>: <first line of its message>"``, cut at ``limit`` characters (None: not cut)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:limit]
