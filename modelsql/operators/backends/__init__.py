"""Backends: what runs a model's graph, behind one protocol, with one session cache.

A backend turns a self-contained ONNX model (bytes) into a loaded
:class:`BackendModel` that the PREDICT operators call. ONNX Runtime
(:mod:`.onnxruntime`) is the only backend today; TVM-compiled artifacts and GPU
devices come later as further backends, cached by the same key.

Sessions are cached process-wide by :class:`SessionKey` ``(artifact digest,
backend, device, options)``: the artifact digest names the exact bytes loaded
(a catalog model version's graph and tensors, or a rewritten graph such as a
transposed-input copy, a merged family or a compiled artifact), so two versions,
two rewrites or two thread settings never share a session, and one artifact is
loaded once however many statements use it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

__all__ = ["BackendModel", "SessionKey", "SessionCache", "SESSIONS"]


class BackendModel(Protocol):
    """A loaded model a PREDICT operator runs.

    Attributes:
        input_names: the graph's inputs, in order.
        input_shapes: input name -> its dims (ints, or names / None for symbolic dims).
        fixed_batch: the fixed leading dimension of the inputs (rows per run), or None.
        intra_op_threads: threads one run uses.
    """

    input_names: list
    input_shapes: dict
    fixed_batch: Optional[int]
    intra_op_threads: int

    def run(self, feeds: dict[str, np.ndarray], outputs: Optional[Sequence[str]] = None) -> list[np.ndarray]:
        """Run on ``feeds`` (input name -> array with the batch axis first); the named outputs, in order.

        Raises:
            DataError: the backend refused the input (code ``"model_run_failed"``).
        """
        ...


@dataclass(frozen=True)
class SessionKey:
    """What identifies a loaded session.

    Attributes:
        artifact: digest of the exact model bytes the session is built from (hex).
        backend: ``"onnxruntime"``.
        device: ``"cpu"`` (or ``"cuda:0"`` once GPU devices are planned).
        options: backend options that change the session (sorted ``(name, value)`` pairs:
            threads, transposed inputs).
    """

    artifact: str
    backend: str
    device: str
    options: tuple = ()


class SessionCache:
    """A bounded LRU of loaded sessions, shared by every connection of the process.

    Args:
        size: the most sessions kept (least recently used ones are dropped).
    """

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._entries: "OrderedDict[SessionKey, BackendModel]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: SessionKey, load: Callable[[], BackendModel]) -> BackendModel:
        """The session for ``key``, made by ``load()`` on a miss (outside the lock: loading may take seconds)."""
        with self._lock:
            model = self._entries.get(key)
            if model is not None:
                self._entries.move_to_end(key)
                return model
        model = load()
        with self._lock:
            self._entries[key] = model
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return model

    def items(self) -> list[tuple[SessionKey, BackendModel]]:
        """The cached ``(key, session)`` pairs, least recently used first."""
        with self._lock:
            return list(self._entries.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        """Drop every session (tests use it; a dropped model's sessions just age out)."""
        with self._lock:
            self._entries.clear()


SESSIONS = SessionCache()
"""The process-wide session cache."""
