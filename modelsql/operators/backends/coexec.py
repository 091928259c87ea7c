"""Co-execution of a Python program: dynamo's captured graphs on ONNX Runtime, the Python between them as Python.

Terra (Kim et al., NeurIPS 2021) runs an imperative program's Python side as Python and delegates its
tensor operations to a graph, so every Python feature keeps working; TorchDynamo carries the idea in
today's PyTorch: ``torch.compile`` captures straight-line FX graphs behind guards, breaks the graph where
Python must run (a branch on a tensor value, a NumPy or ``.tolist()`` call), and recompiles when a guard
fails. :class:`OnnxSubgraphs` is the ``torch.compile`` backend: it exports each captured FX graph (safe
to trace: it is straight-line and guarded) to ONNX with torch's TorchScript exporter, checks ONNX Runtime
against the graph on the example inputs dynamo gives, and runs it on ONNX Runtime; where export or the
check fails it runs the FX graph itself. Past ``torch._dynamo.config.recompile_limit`` dynamo silently
runs a frame eagerly: :class:`PythonProgramModel` warns when that happens.

:class:`PythonProgramModel` is the :class:`~modelsql.operators.backends.BackendModel` of a program:
``mode`` ``"coexecute"`` (the compiled module) or ``"eager"`` (the module itself, when co-execution was
slower at import, or once dynamo reached its recompile limit); a batch-dependent program (``row_calls``) is
called one row at a time. On a GPU (``device = "cuda:N"``) the module lives there and runs eagerly (the
co-executed subgraphs are ONNX Runtime CPU sessions: a GPU program would cross to the host at every graph);
each chunk's tensors are copied there and its outputs come back as NumPy arrays. Its answers equal the CPU's
within float32 rounding (kernels differ: cuBLAS and cuDNN sum in other orders), not bit for bit.
"""

from __future__ import annotations

import io
import logging
import threading
import warnings
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from modelsql.errors import DataError
from modelsql.converters.python_program import close, first_line, quiet, take, to_args, to_numpy

__all__ = ["OnnxSubgraphs", "PythonProgramModel", "graph_breaks", "CHUNK_ROWS", "BUCKETS"]

CHUNK_ROWS = 256
"""Rows per call of a row-independent program."""

BUCKETS = (1, 4, 16, 64, CHUNK_ROWS)
"""Co-execution pads a chunk to the next of these sizes, so dynamo compiles at most five static shapes
(each captured graph then exports to ONNX with fixed shapes; ``dynamic=False``)."""


@dataclass
class OnnxSubgraphs:
    """A ``torch.compile`` backend running each captured FX graph on ONNX Runtime.

    Attributes:
        threads: ONNX Runtime intra-op threads per subgraph session.
        graphs: FX graphs dynamo handed over (one per capture and per recompile).
        on_onnx: of those, how many run on ONNX Runtime.
        fallbacks: why the others stayed FX graphs (one line each).
    """

    threads: int = 1
    graphs: int = 0
    on_onnx: int = 0
    fallbacks: list = field(default_factory=list)

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        try:
            run = self._onnx(gm, example_inputs)
        except Exception as exc:  # any failure to export or check: the FX graph runs it, correctly
            self.fallbacks.append(first_line(exc)[:200])
            return gm.forward
        self.on_onnx += 1
        return run

    def _onnx(self, gm, example_inputs):
        import onnxruntime as ort
        import torch

        if not all(isinstance(a, torch.Tensor) for a in example_inputs):
            raise TypeError("a graph input is not a tensor (a symbolic size)")
        names = [f"in{k}" for k in range(len(example_inputs))]
        buf = io.BytesIO()
        with quiet():
            torch.onnx.export(gm, tuple(example_inputs), buf, dynamo=False, input_names=names, opset_version=17)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        session = ort.InferenceSession(buf.getvalue(), options, providers=["CPUExecutionProvider"])
        used = [(i.name, names.index(i.name)) for i in session.get_inputs()]

        def run(*args):
            outs = session.run(None, {name: args[k].detach().numpy() for name, k in used})
            return tuple(torch.from_numpy(o) for o in outs)

        with torch.no_grad():
            diff = close([np.asarray(o) for o in run(*example_inputs)], to_numpy(gm(*example_inputs)))
        if diff is not None:
            raise ValueError(f"ONNX Runtime disagrees with the FX graph: {diff}")
        return run


def graph_breaks(module, args: tuple, limit: int = 3) -> str:
    """Where and why dynamo breaks ``module``'s graph on ``args`` (``torch._dynamo.explain``): ``"2 graphs, 1 graph
    break: <reason> at <file>:<line>; ..."`` (the first ``limit`` reasons)."""
    import copy
    import os

    import torch

    with quiet(), torch.no_grad():
        out = torch._dynamo.explain(copy.deepcopy(module))(*args)
    reasons = []
    for r in out.break_reasons[:limit]:
        where = r.user_stack[-1] if r.user_stack else None
        text = " ".join(str(r.reason).split())[:100]
        text = f"a branch on a tensor value ({text})" if text.startswith("generic_jump") else text
        reasons.append(text + (f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""))
    head = (f"{out.graph_count} graph{'s' if out.graph_count != 1 else ''}, {out.graph_break_count} graph "
            f"break{'s' if out.graph_break_count != 1 else ''}")
    return head + (": " + "; ".join(reasons) if reasons else "")


def _to_device(arg, device: str):
    """An input batch on ``device``: a tensor, or each tensor of a list (a list of strings stays as it is)."""
    if isinstance(arg, list):
        return [_to_device(a, device) for a in arg]
    return arg.to(device) if hasattr(arg, "to") and hasattr(arg, "device") else arg


class _LimitWatch(logging.Handler):
    """Catches dynamo's "hit config.recompile_limit" log line (dynamo then runs that frame eagerly)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "recompile_limit" in text or "cache_size_limit" in text:
            self.hits.append(text.splitlines()[1].strip() if "\n" in text else text)


class PythonProgramModel:
    """A Python program behind the backend protocol.

    Args:
        module: the ``torch.nn.Module``, weights loaded, in eval mode.
        inputs: its input specs (:class:`~modelsql.catalog.entries.TensorSpec`, in ``forward`` order).
        output_names: its outputs, in order.
        mode: ``"coexecute"`` or ``"eager"``.
        row_calls: call one row at a time (a batch-dependent program).
        label: how messages name it (``model "m" version 1``).
        threads: ONNX Runtime threads of each subgraph.
        coexecute_from: in ``"coexecute"`` mode, the fewest rows a chunk needs to be co-executed; smaller chunks
            run eagerly (dynamo's per-call guards cost more than they save on a few rows).
        device: ``"cpu"`` or ``"cuda:N"`` (the module is moved there; on a GPU ``mode`` becomes ``"eager"``).
    """

    def __init__(self, module, inputs, output_names: Sequence[str], *, mode: str, row_calls: bool, label: str,
                 threads: int = 1, coexecute_from: int = 1, device: str = "cpu") -> None:
        import torch

        self.device = device
        if device != "cpu":
            module, mode = module.to(device), "eager"
        self.module = module
        self.inputs = tuple(inputs)
        self.output_names = list(output_names)
        self.mode = mode
        self.row_calls = row_calls
        self.label = label
        self.input_names = [s.name for s in self.inputs]
        self.input_shapes = {s.name: list(s.shape or ()) for s in self.inputs}
        self.fixed_batch: Optional[int] = 1 if row_calls else None
        self.intra_op_threads = threads
        self.backend = OnnxSubgraphs(threads)
        self.callable = torch.compile(module, backend=self.backend, dynamic=False) if mode == "coexecute" else module
        self.coexecute_from = coexecute_from
        self.watch = _LimitWatch()
        self.warned = False
        self._lock = threading.Lock()

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        """Run on ``feeds`` (input name -> array, rows on axis 0): one call per row (``row_calls``) or per
        :data:`CHUNK_ROWS` rows; co-executed chunks are padded to a size of :data:`BUCKETS` by repeating their last
        row (the padding's outputs dropped).

        Raises:
            DataError: ``inference_failed`` naming the model (the program raised; PREDICT's ``on_error`` then
                finds the failing rows).
        """
        names = list(outputs) if outputs is not None else self.output_names
        picks = [self.output_names.index(n) for n in names]
        n = len(next(iter(feeds.values()))) if feeds else 0
        step = 1 if self.row_calls else CHUNK_ROWS
        parts = []
        with self._lock:
            args = to_args(feeds, self.inputs)  # converted once; chunks are views
            for start in range(0, n, step):
                parts.append(self._chunk(take(args, slice(start, start + step))))
        if not parts:
            return [np.zeros((0,), np.float32) for _ in names]
        if len(parts) == 1:
            return [parts[0][k] for k in picks]
        return [np.concatenate([p[k] for p in parts]) for k in picks]

    def _chunk(self, args: tuple) -> list[np.ndarray]:
        import torch

        rows = len(args[0])
        watching = self.mode == "coexecute" and rows >= self.coexecute_from
        pad = next(b for b in BUCKETS if b >= rows) - rows if watching else 0
        if pad:
            args = tuple(a + [a[-1]] * pad if isinstance(a, list) else torch.cat([a, a[-1:].expand(pad, *a.shape[1:])])
                         for a in args)
        run = self.callable if watching else self.module
        if self.device != "cpu":
            args = tuple(_to_device(a, self.device) for a in args)
        logger = logging.getLogger("torch._dynamo.convert_frame")
        if watching:
            logger.addHandler(self.watch)
        try:
            with torch.no_grad():
                result = run(*args)
        except Exception as exc:  # the user's program raised on these rows
            raise DataError(f"{self.label} failed on its input: {first_line(exc, None)}",
                            code="inference_failed") from exc
        finally:
            if watching:
                logger.removeHandler(self.watch)
        self._warn_limit()
        out = to_numpy(result)
        return [o[:rows] for o in out] if pad else out

    def _warn_limit(self) -> None:
        """Past dynamo's recompile limit (its guards keep failing: they test Python values of the input, a tree's
        shape or a string), recompiling costs more than co-execution saves: run eagerly from then on, and say so."""
        if self.watch.hits and not self.warned:
            self.warned = True
            self.callable, self.mode = self.module, "eager"
            warnings.warn(f"{self.label}: torch._dynamo reached its recompile_limit ({self.watch.hits[0]}): its "
                          "guards keep failing on these inputs, so this program now runs eagerly (correct, not "
                          "co-executed).", RuntimeWarning, stacklevel=2)

    def stats(self) -> dict:
        """Graphs captured, how many run on ONNX Runtime, why the rest did not, recompile-limit hits."""
        return {"graphs": self.backend.graphs, "on_onnx": self.backend.on_onnx,
                "fallbacks": list(self.backend.fallbacks), "recompile_limit_hits": len(self.watch.hits)}
