"""``OrtRepository``: a small reference :class:`~modelsql.serving.repository.Repository` over ONNX Runtime.

One servable (version ``"1"``) and one batching group per model. A batch's
feeds are concatenated along axis 0, run once, and split back per request; if
the batch fails, its requests are rerun one by one so that one bad request does
not fail the others. Each group runs in its own one-thread executor.

The sessions are :class:`modelsql.operators.backends.onnxruntime.OrtModel`
(only ``operators/backends`` imports onnxruntime). ONNX Runtime turns a
``bytes`` element of a string tensor into its ``repr`` (``"b'...'"``), so BYTES
inputs given as bytes (the binary tensor extension) are decoded as UTF-8 first.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Hashable, Optional, Sequence, cast

import numpy as np

from modelsql.operators.backends.onnxruntime import OrtModel
from modelsql.serving.repository import RunResult, TensorMetadata

__all__ = ["OrtServable", "OrtRepository", "ORT_DATATYPES", "text_feed"]

ORT_DATATYPES = {
    "tensor(bool)": "BOOL", "tensor(uint8)": "UINT8", "tensor(uint16)": "UINT16", "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64", "tensor(int8)": "INT8", "tensor(int16)": "INT16", "tensor(int32)": "INT32",
    "tensor(int64)": "INT64", "tensor(float16)": "FP16", "tensor(float)": "FP32", "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}
"""ONNX Runtime's type strings -> OIP datatypes."""


@dataclass(frozen=True)
class OrtServable:
    """A servable ONNX model (see :class:`~modelsql.serving.repository.Servable`)."""

    name: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]
    group: Hashable
    version: str = "1"
    versions: tuple[str, ...] = ("1",)
    platform: str = "onnxruntime_onnx"


class OrtRepository:
    """Serves ONNX models by name, each as version ``"1"``.

    Args:
        models: name -> serialized ONNX ModelProto. Every model starts loaded.

    Raises:
        modelsql.errors.DataError: ONNX Runtime rejects a model.
        ValueError: a model has an input or output that is not a tensor (e.g. a sequence of maps).
    """

    def __init__(self, models: dict[str, bytes]) -> None:
        self._models = {name: OrtModel(data, f'model "{name}"') for name, data in models.items()}
        self._servables = {name: _servable(name, m) for name, m in self._models.items()}
        self._loaded = set(self._models)
        self._executors: dict[Hashable, concurrent.futures.ThreadPoolExecutor] = {}
        self._lock = threading.Lock()

    def get(self, name: str, version: Optional[str] = None) -> OrtServable:
        """The servable ``name``. Raises ``LookupError`` for an unknown or unloaded model or a version but ``"1"``."""
        if name not in self._servables:
            raise LookupError(f'no model "{name}" is served; the models are {", ".join(sorted(self._servables))}')
        if name not in self._loaded:
            raise LookupError(f'model "{name}" is not loaded')
        if version not in (None, "1"):
            raise LookupError(f'model "{name}" has no version "{version}"; its versions are 1')
        return self._servables[name]

    def names(self) -> list[str]:
        """The loaded models' names, sorted."""
        return sorted(self._loaded)

    def ready(self, name: str, version: Optional[str] = None) -> bool:
        """Whether ``name`` is loaded (and ``version`` is None or ``"1"``)."""
        return name in self._loaded and version in (None, "1")

    def index(self) -> list[dict]:
        """Every model with state ``READY`` or ``UNAVAILABLE`` (reason ``"unloaded"``)."""
        return [{"name": n, "version": "1", "state": "READY" if n in self._loaded else "UNAVAILABLE",
                 "reason": "" if n in self._loaded else "unloaded"} for n in sorted(self._servables)]

    def load(self, name: str) -> None:
        """Serve ``name`` again. Raises ``LookupError`` when there is no such model."""
        self._known(name)
        self._loaded.add(name)

    def unload(self, name: str) -> None:
        """Stop serving ``name``. Raises ``LookupError`` when there is no such model."""
        self._known(name)
        self._loaded.discard(name)

    def executor(self, group: Hashable) -> concurrent.futures.Executor:
        """The one-thread executor of ``group``, created on first use."""
        with self._lock:
            if group not in self._executors:
                self._executors[group] = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"ort-{group}")
            return self._executors[group]

    def run_group(self, group: Hashable, items: Sequence[tuple[OrtServable, dict[str, np.ndarray]]]) -> list[RunResult]:
        """Run the items of model ``group`` as one batch; per-item results or exceptions, in order."""
        feeds: list = []
        for _, inputs in items:
            try:
                feeds.append({k: text_feed(k, v) for k, v in inputs.items()})
            except ValueError as exc:
                feeds.append(exc)
        good = [k for k, f in enumerate(feeds) if not isinstance(f, BaseException)]
        results: list = list(feeds)
        model = self._models[cast(str, group)]  # this repository's groups are its model names
        for k, out in zip(good, self._run(model, [feeds[k] for k in good])):
            results[k] = out
        return results

    def close(self) -> None:
        """Shut the executors down (after the server has stopped)."""
        with self._lock:
            for ex in self._executors.values():
                ex.shutdown(wait=True)
            self._executors.clear()

    def _known(self, name: str) -> None:
        if name not in self._models:
            raise LookupError(f'the repository has no model "{name}"')

    def _run(self, model: OrtModel, feeds: list[dict[str, np.ndarray]]) -> list[RunResult]:
        if not feeds:
            return []
        try:
            return _split(model, _concat(feeds), [len(next(iter(f.values()))) for f in feeds])
        except Exception as exc:
            if len(feeds) == 1:
                return [exc]
            return [self._run(model, [f])[0] for f in feeds]  # find which request failed


def _servable(name: str, model: OrtModel) -> OrtServable:
    def meta(arg) -> TensorMetadata:
        if arg.type not in ORT_DATATYPES:
            raise ValueError(f'model "{name}": {arg.name} is a {arg.type}, which cannot be served as a tensor')
        return TensorMetadata(arg.name, ORT_DATATYPES[arg.type], tuple(d if isinstance(d, int) else -1 for d in arg.shape))

    session = model.session
    return OrtServable(name, tuple(map(meta, session.get_inputs())), tuple(map(meta, session.get_outputs())), group=name)


def text_feed(name: str, arr: np.ndarray) -> np.ndarray:
    """BYTES elements that are ``bytes`` become ``str``.

    Raises:
        ValueError: an element is not UTF-8 text (names the input, element and row).
    """
    if arr.dtype != object or not any(isinstance(v, bytes) for v in arr.flat):
        return arr
    values = []
    per_row = max(1, int(np.prod(arr.shape[1:])))
    for i, v in enumerate(arr.flat):
        try:
            values.append(v.decode("utf-8") if isinstance(v, bytes) else v)
        except UnicodeDecodeError as exc:
            raise ValueError(f'input "{name}" element {i} (row {i // per_row}) is not UTF-8 text: {exc.reason} '
                             f"at byte {exc.start}") from None
    out = np.empty(arr.shape, dtype=object)
    out.flat[:] = values
    return out


def _concat(feeds: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(feeds) == 1:
        return feeds[0]
    return {k: np.concatenate([f[k] for f in feeds], axis=0) for k in feeds[0]}


def _split(model: OrtModel, feed: dict[str, np.ndarray], rows: list[int]) -> list[RunResult]:
    outs = model.run(feed)
    total = sum(rows)
    for name, out in zip(model.output_names, outs):
        if np.ndim(out) == 0 or len(out) != total:
            raise ValueError(f'{model.label}: output "{name}" has shape {list(np.shape(out))}, not {total} rows')
    bounds = np.cumsum(rows)[:-1]
    parts = [np.split(out, bounds) for out in outs]
    return [{name: p[k] for name, p in zip(model.output_names, parts)} for k in range(len(rows))]
