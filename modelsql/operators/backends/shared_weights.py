"""Identical weights loaded once per process and shared by every ONNX Runtime session.

PRETZEL's Object Store (Lee et al., "PRETZEL: Opening the Black Box of Machine
Learning Prediction Serving Systems", OSDI 2018, section 4.1) keeps one copy of
each parameter however many pipelines use it. modelsql's blob store already keeps
one *file* per distinct tensor (named by the SHA-256 of its raw little-endian
elements, docs/architecture.md); this module keeps one *mapping* per distinct tensor
in memory and gives it to every session that uses it:

* :class:`WeightPool` (one per process: :data:`WEIGHTS`) maps a blob file read-only
  (``np.memmap``), verifies its digest once, and wraps the mapping with
  ``ort.OrtValue.ortvalue_from_numpy`` (no copy). Entries are held weakly: a
  session keeps its values alive (:attr:`OrtModel.initializers`), and when the last
  session using a tensor is dropped (evicted from
  :data:`~modelsql.operators.backends.SESSIONS`), the mapping is unmapped.
* :func:`shared_model` builds an :class:`OrtModel` whose large main-graph
  initializers come from the pool through ``SessionOptions.add_initializer``
  (zero copy; ``add_external_initializers`` copies in onnxruntime 1.32), with
  ``session.disable_prepacking = 1`` (MatMul/Gemm/Conv would otherwise pack a
  per-session copy of the weight), the process-wide arena
  (``session.use_env_allocators = 1``), one intra-op thread and no spinning.

In the model given to ONNX Runtime a shared initializer is never embedded (an
embedded initializer is parsed even when ``add_initializer`` overrides it: a
transient full copy per load). It is an ordinary ONNX external-data reference to
its own blob file (a blob of a numeric tensor is exactly the external-data
layout), resolved against ``session.model_external_initializers_file_folder_path``
(the blobs' common folder), so nothing depends on the current directory. ONNX
Runtime checks that the file exists and otherwise does not read it, except where
a graph optimizer needs the values before the session is built: then it reads
the true values from the file. (A 0-byte placeholder file, the other way to
satisfy the check, makes those optimizers fail: ``NchwcTransformer`` on a Conv
weight raises "External initializer: W ... given file_length: 0".) Such an
optimizer makes its own per-session initializer (e.g. Conv weights reordered to
NCHWc under ``ORT_ENABLE_ALL``); ``disabled_optimizers`` can keep those shared too.

Memory (measured on the project's 2-core machine, onnxruntime 1.32, ``RssAnon``
after ``gc.collect()`` + ``malloc_trim(0)``): 50 sessions of models sharing one
20 MiB ``MatMul`` weight cost 0.09 MiB of anonymous memory each and 0.65 ms to
create, against 40 MiB and ~80 ms for an ordinary session (ORT's own copy plus the
model bytes its Python ``InferenceSession`` keeps); with prepacking left on, each
still costs 20 MiB (the packed copy). The shared data is file-backed page cache
(``RssFile``, shared with other processes mapping the same blob). Each live
mapping holds one file descriptor (Python's ``mmap`` keeps a duplicate), hence
:data:`SHARE_MIN_BYTES`.

Backends never import ``modelsql.storage``: the caller passes ``path_of(digest)
-> pathlib.Path`` (the planner passes ``BlobStore.path``).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import threading
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import onnxruntime as ort

from modelsql.errors import DataError
from modelsql.onnxformat.shareable import shareable_initializers, with_external_locations
from modelsql.onnxformat.split import join_model, stored_tensors
from modelsql.operators.backends import SESSIONS
from modelsql.operators.backends.onnxruntime import OrtModel

__all__ = [
    "WeightPool",
    "PoolStats",
    "WEIGHTS",
    "SHARE_MIN_BYTES",
    "external_locations",
    "shared_model",
    "get_shared_model",
]

SHARE_MIN_BYTES = 16 * 1024
"""Initializers smaller than this (bytes) are joined back inline instead of shared: sharing saves
at most this much per session, and each mapping costs a file descriptor and a 4 KiB page."""

PathOf = Callable[[str], Path]
"""``digest -> pathlib.Path`` of the blob file holding that tensor's raw elements."""


@dataclass(frozen=True)
class PoolStats:
    """What a :class:`WeightPool` holds now.

    Attributes:
        tensors: live mappings (one per distinct ``(digest, dtype, dims)``).
        bytes: their total size in bytes (file-backed, not anonymous memory).
    """

    tensors: int
    bytes: int


class WeightPool:
    """Read-only memory maps of tensor blobs, one per tensor, shared by every session that uses it.

    Entries are weak: :meth:`get` returns an ``ort.OrtValue`` that the caller keeps as long
    as its session; when no one holds it any more, the entry leaves the pool and the file
    is unmapped. Safe to use from several threads.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a weakref callback may run inside a locked section
        self._entries: dict[tuple, tuple[weakref.ref, int]] = {}

    def get(self, digest: str, dtype: np.dtype, dims: tuple[int, ...], path_of: PathOf) -> ort.OrtValue:
        """The shared value of the blob ``digest``, mapped (and its digest verified) on first use.

        Args:
            digest: SHA-256 hex digest of the tensor's raw little-endian elements.
            dtype: numpy element dtype; dims: the shape (``prod(dims) * itemsize`` bytes, > 0).
            path_of: where the blob file is.

        Returns:
            An ``ort.OrtValue`` on CPU whose buffer is the read-only mapping (``data_ptr()``
            is the mapping's address: ``OrtValue.ortvalue_from_numpy`` does not copy).

        Raises:
            DataError: code ``"blob_missing"`` (no file) or ``"blob_corrupt"`` (wrong size, or its
                bytes do not hash to ``digest``), naming the digest.
        """
        key = (digest, np.dtype(dtype).str, tuple(dims))
        with self._lock:
            entry = self._entries.get(key)
            value = entry[0]() if entry is not None else None
            if value is None:
                array = _map_verified(path_of(digest), digest, np.dtype(dtype), tuple(dims))
                value = ort.OrtValue.ortvalue_from_numpy(array)
                ref = weakref.ref(value, functools.partial(self._forget, key))
                self._entries[key] = (ref, array.nbytes)
            return value

    def _forget(self, key: tuple, ref: weakref.ref) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]

    def stats(self) -> PoolStats:
        """Live mappings and their bytes."""
        with self._lock:
            live = [n for ref, n in self._entries.values() if ref() is not None]
        return PoolStats(len(live), sum(live))

    def __contains__(self, digest: object) -> bool:
        """Whether a blob with this digest is mapped now."""
        with self._lock:
            return any(k[0] == digest and ref() is not None for k, (ref, _) in self._entries.items())


WEIGHTS = WeightPool()
"""The process-wide pool."""

_ARRAYS: "weakref.WeakValueDictionary[tuple, np.ndarray]" = weakref.WeakValueDictionary()
_ARRAYS_LOCK = threading.Lock()


def mapped_array(digest: str, dtype: np.dtype, dims: tuple[int, ...], path_of: PathOf) -> np.ndarray:
    """The blob ``digest`` as a read-only ``np.memmap`` of ``dims`` (verified on first map, shared while
    anyone holds it): weights fed to a session as inputs (a session shared by models of one
    structure) without a copy in anonymous memory.

    Raises:
        DataError: ``blob_missing`` / ``blob_corrupt``, naming the digest.
    """
    key = (digest, np.dtype(dtype).str, tuple(dims))
    with _ARRAYS_LOCK:
        array = _ARRAYS.get(key)
        if array is None:
            array = _map_verified(path_of(digest), digest, np.dtype(dtype), tuple(dims))
            _ARRAYS[key] = array
        return array


def _map_verified(path: Path, digest: str, dtype: np.dtype, dims: tuple[int, ...]) -> np.ndarray:
    """``np.memmap`` of ``path`` (mode ``"r"``: shared, read-only) shaped ``dims``, after checking size and digest."""
    expected = math.prod(dims) * dtype.itemsize
    try:
        size = path.stat().st_size
    except (FileNotFoundError, NotADirectoryError):
        raise DataError(f"blob {digest} is missing from the store (no file {path})", code="blob_missing") from None
    if size != expected:
        raise DataError(f"blob {digest} is corrupt: it has {size} bytes, expected {expected}", code="blob_corrupt")
    flat = np.memmap(path, dtype=dtype, mode="r", shape=(math.prod(dims),))
    actual = hashlib.sha256(flat.view(np.uint8).data).hexdigest()
    if actual != digest:
        raise DataError(f"blob {digest} is corrupt: its {size} bytes hash to {actual}", code="blob_corrupt")
    return flat.reshape(dims)


def external_locations(paths: Mapping[str, Path]) -> tuple[str, dict[str, str]]:
    """``(folder, name -> location)``: the blob files' common folder and each file relative to it.

    ONNX Runtime resolves the external-data ``location`` of a model loaded from bytes against
    ``session.model_external_initializers_file_folder_path`` and refuses absolute locations and
    ones that leave that folder; real paths are used so a symbolic link in the store's path
    cannot make a location look like it leaves.
    """
    real = {name: os.path.realpath(path) for name, path in paths.items()}
    folder = os.path.commonpath([os.path.dirname(r) for r in real.values()])
    return folder, {name: os.path.relpath(r, folder) for name, r in real.items()}


# --------------------------------------------------------------------------------------
# sessions
# --------------------------------------------------------------------------------------


def shared_model(
    graph: bytes,
    fetch: Callable[[str], bytes],
    label: str,
    *,
    path_of: PathOf,
    pool: WeightPool = WEIGHTS,
    intra_op_threads: int = 1,
    min_bytes: int = SHARE_MIN_BYTES,
    transform: Optional[Callable[[bytes], bytes]] = None,
    prepack: bool = False,
    disabled_optimizers: Sequence[str] = (),
) -> OrtModel:
    """An :class:`OrtModel` of a stored model whose large initializers are shared through ``pool``.

    Args:
        graph: the stripped graph blob (:func:`modelsql.onnxformat.split_model`'s first output).
        fetch: ``digest -> payload bytes`` (verified by the caller, e.g. ``BlobStore.get``) for
            every tensor that is not shared: small, string, subgraph and attribute tensors.
        label: ``'model "m" version v'`` for error messages.
        path_of: ``digest -> Path`` of a blob file (``BlobStore.path``).
        pool: where shared tensors are mapped (default: the process-wide :data:`WEIGHTS`).
        intra_op_threads: threads per run (default 1: many small sessions share the cores).
        min_bytes: the smallest initializer (bytes) to share (:data:`SHARE_MIN_BYTES`).
        transform: a rewrite of the serialized model applied before loading
            (e.g. :func:`modelsql.onnxformat.column_major.column_major_inputs`); the shared
            initializers stay external references through it.
        prepack: keep ONNX Runtime's weight prepacking: each session then holds its own packed
            copy of its MatMul/Gemm/Conv weights, but runs faster (measured on a [2560, 2048]
            MatMul+Add, fused to Gemm: 1.3-1.6x faster at 1 and at 64 rows).
        disabled_optimizers: ONNX Runtime graph transformers to skip (``InferenceSession``'s
            ``disabled_optimizers``), e.g. ``("NchwcTransformer",)`` so Conv weights stay shared
            instead of each session keeping an NCHWc-reordered copy (this changes Conv's kernel,
            so its rounding).

    Returns:
        The session. Its outputs are bit-identical to an ordinary :class:`OrtModel` of the joined
        model with the same prepacking, thread and optimizer settings (checked for MatMul, Gemm,
        Gather and Conv). Disabling prepacking itself changes float rounding in MatMul/Gemm
        (MLAS then takes another kernel, e.g. GEMV at one row): a few ulp, so not bit-identical
        to a prepacked session; Gemm without prepacking also rounds differently on 1 and 2 threads.

    Raises:
        DataError: a shared blob is missing or corrupt (codes ``"blob_missing"`` / ``"blob_corrupt"``,
            naming the model, the tensor and the digest); ONNX Runtime rejects the model (``"invalid_onnx"``).
    """
    shared = shareable_initializers(graph, min_bytes)
    values = _values(shared, pool, path_of, label)
    folder, locations = external_locations({t.name: path_of(t.digest) for t in shared}) if shared else (None, {})
    model = with_external_locations(graph, locations)
    payloads = {s.digest: fetch(s.digest) for s in stored_tensors(model)}
    data = join_model(model, payloads).SerializeToString()
    if transform is not None:
        data = transform(data)
    return OrtModel(
        data, label, intra_op_threads=intra_op_threads, initializers=values, disable_prepacking=not prepack,
        shared_allocator=True, external_data_folder=folder, disabled_optimizers=disabled_optimizers,
    )


def _values(shared, pool: WeightPool, path_of: PathOf, label: str) -> dict[str, ort.OrtValue]:
    """Initializer name -> the pool's value, for each :class:`~modelsql.onnxformat.shareable.ShareableTensor`."""
    values = {}
    for t in shared:
        try:
            values[t.name] = pool.get(t.digest, t.dtype, t.dims, path_of)
        except DataError as exc:
            raise DataError(f'{label}: tensor "{t.name}" is unreadable from the store: {exc}', code=exc.code) from exc
    return values


def get_shared_model(
    key,
    graph: Callable[[], bytes],
    fetch: Callable[[str], bytes],
    label: str,
    *,
    path_of: PathOf,
    intra_op_threads: int = 1,
    transform: Optional[Callable[[bytes], bytes]] = None,
    prepack: bool = False,
    disabled_optimizers: Sequence[str] = (),
) -> OrtModel:
    """The cached shared-weight session of ``key`` (a :class:`~modelsql.operators.backends.SessionKey`),
    made by :func:`shared_model` from ``graph()`` on a miss. The key's options get
    ``("shared_weights", True)``, the thread count, the prepacking setting and the disabled optimizers, so
    it never meets an ordinary session's entry."""
    options = key.options + (("intra_op_threads", intra_op_threads), ("prepack", prepack), ("shared_weights", True),
                             ("disabled_optimizers", tuple(disabled_optimizers)))
    full = replace(key, options=tuple(sorted(options)))
    model = SESSIONS.get(
        full,
        lambda: shared_model(graph(), fetch, label, path_of=path_of, intra_op_threads=intra_op_threads,
                             transform=transform, prepack=prepack, disabled_optimizers=disabled_optimizers),
    )
    assert isinstance(model, OrtModel)  # what this key's entry was made as
    return model
