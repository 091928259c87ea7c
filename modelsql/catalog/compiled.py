"""Compiled artifacts of backends other than ONNX Runtime (``modelsql.compiled``; see
:mod:`modelsql.catalog.schema`): per model version, compiler target, batch bucket and compiler version,
the compiled library's blob and the check against ONNX Runtime that decides whether it may run.

A row is ``checked`` (its outputs agreed with ONNX Runtime within the backend's tolerance on sample
inputs) or ``declined`` (import or compile failed, or the outputs disagreed: ``reason`` says which),
so a model TVM computes wrongly is never served, and the reason is a table anyone can read.
:class:`Compiled` is reached as ``Catalog.compiled``; it runs its SQL through :meth:`Catalog.query`
and never begins or commits.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Optional

__all__ = ["Compiled", "CompiledArtifact"]


@dataclass(frozen=True)
class CompiledArtifact:
    """One row of ``modelsql.compiled``.

    Attributes:
        model, version: the catalog model version compiled.
        backend: ``"tvm"``.
        target: the compiler target as canonical JSON.
        batch_size: rows per run it was compiled for; 0 for any batch.
        tvm_version, ffi_version: the compiler's versions (an upgrade invalidates the artifact).
        status: ``"checked"`` or ``"declined"``; ``reason``: why declined (None when checked).
        digest, nbytes: the library's blob and size (None when nothing was compiled).
        max_abs_diff, max_rel_diff: the check's largest differences to ONNX Runtime.
        tune_trials: MetaSchedule trials spent (0: untuned); compile_s: seconds spent.
    """

    model: str
    version: int
    backend: str
    target: str
    batch_size: int
    tvm_version: str
    ffi_version: str
    status: str
    reason: Optional[str]
    digest: Optional[str]
    nbytes: Optional[int]
    max_abs_diff: Optional[float]
    max_rel_diff: Optional[float]
    tune_trials: int
    compile_s: float

    @property
    def usable(self) -> bool:
        """Whether the artifact passed its check."""
        return self.status == "checked" and self.digest is not None


_COLUMNS = ("model, version, backend, target, batch_size, tvm_version, ffi_version, status, reason, digest, nbytes, "
            "max_abs_diff, max_rel_diff, tune_trials, compile_s")


class Compiled:
    """The compiled artifacts of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog) -> None:
        self._catalog = catalog

    def put(self, artifact: CompiledArtifact) -> None:
        """Record ``artifact``, replacing the row of the same key (model, version, backend, target, batch,
        compiler versions)."""
        self._catalog.check_writable()
        a = artifact
        self._catalog.query(
            "DELETE FROM {s}.compiled WHERE model = ? AND version = ? AND backend = ? AND target = ? "
            "AND batch_size = ? AND tvm_version = ? AND ffi_version = ?",
            [a.model, a.version, a.backend, a.target, a.batch_size, a.tvm_version, a.ffi_version])
        self._catalog.query(
            f"INSERT INTO {{s}}.compiled ({_COLUMNS}, created_at) VALUES ({', '.join('?' * 16)})",
            [a.model, a.version, a.backend, a.target, a.batch_size, a.tvm_version, a.ffi_version, a.status,
             a.reason, a.digest, a.nbytes, a.max_abs_diff, a.max_rel_diff, a.tune_trials, a.compile_s,
             _dt.datetime.now(_dt.timezone.utc)])

    def find(self, model: str, version: int, backend: str, target: str, tvm_version: str,
             ffi_version: str) -> list[CompiledArtifact]:
        """The artifacts of one model version for one target and compiler, by batch size (0, any batch, first)."""
        rows = self._catalog.query(
            f"SELECT {_COLUMNS} FROM {{s}}.compiled WHERE model = ? AND version = ? AND backend = ? AND target = ? "
            "AND tvm_version = ? AND ffi_version = ? ORDER BY batch_size",
            [model, version, backend, target, tvm_version, ffi_version])
        return [CompiledArtifact(*r) for r in rows]

    def of_model(self, model: str, version: Optional[int] = None) -> list[CompiledArtifact]:
        """Every artifact of ``model`` (one version, or all), any target."""
        where, params = ("model = ?", [model]) if version is None else ("model = ? AND version = ?", [model, version])
        rows = self._catalog.query(f"SELECT {_COLUMNS} FROM {{s}}.compiled WHERE {where} "
                                   "ORDER BY version, target, batch_size", params)
        return [CompiledArtifact(*r) for r in rows]

    def forget_model(self, model: str, version: Optional[int] = None) -> None:
        """Delete the rows of a dropped model (or version); their blobs go at the next VACUUM MODELS."""
        where, params = ("model = ?", [model]) if version is None else ("model = ? AND version = ?", [model, version])
        self._catalog.query(f"DELETE FROM {{s}}.compiled WHERE {where}", params)

    def digests(self) -> set[str]:
        """Blobs the artifacts reference (kept by VACUUM MODELS)."""
        return {r[0] for r in self._catalog.query("SELECT digest FROM {s}.compiled WHERE digest IS NOT NULL")}
