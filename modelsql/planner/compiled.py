"""Compiled artifacts of a catalog model version (TVM): compiling, checking, recording, loading.

:func:`compile_version` compiles a version with TVM Relax for a target (untuned with a symbolic batch,
or, with ``trials``, tuned by MetaSchedule for one fixed batch), checks the library against ONNX
Runtime on sample inputs (:func:`~modelsql.operators.backends.tvm_check.check_against_onnxruntime`),
stores a library that passed in the blob store and records the result either way in
``modelsql.compiled``: ``checked``, or ``declined`` with the reason (TVM could not import an operator,
or its outputs differed), so a model TVM computes wrongly is never run. Artifacts are keyed by
(model version, target with its CPU, batch bucket, TVM and tvm-ffi versions): an upgraded TVM or
another CPU finds none and compiles again.

:func:`tvm_session` is what ``PREDICT(..., backend = 'tvm')`` runs: the checked artifact for the
PREDICT's batch size (or the any-batch one), loaded once per process and cached like an ONNX Runtime
session (:data:`~modelsql.operators.backends.SESSIONS`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..catalog.compiled import CompiledArtifact
from ..errors import NotSupportedError
from ..operators.backends import SESSIONS, SessionKey
from .artifacts import default_threads, load_model_bytes

__all__ = ["TvmTarget", "tvm_target", "compile_version", "require_artifact", "tvm_session", "checked_artifacts"]


@dataclass(frozen=True)
class TvmTarget:
    """A TVM target as the catalog keys it: ``spec`` (the JSON target), ``key`` (its canonical text) and the
    compiler versions."""

    kind: str
    spec: dict
    key: str
    tvm_version: str
    ffi_version: str


def _backend():
    from ..operators.backends import tvm as tvm_backend  # TVM is an optional extra: import it when used

    reason = tvm_backend.unavailable_reason()
    if reason is not None:
        raise NotSupportedError(f"The TVM backend is not available: {reason}", code="tvm_unavailable")
    return tvm_backend


def tvm_target(kind: str = "llvm", threads: Optional[int] = None) -> TvmTarget:
    """The target ``kind`` (``"llvm"``: this machine's CPU, named by LLVM; ``"cuda"``) for ``threads`` cores.

    Raises:
        NotSupportedError: ``tvm_unavailable`` (TVM not installed, or a tvm-ffi that segfaults);
            ``device_not_available`` for ``cuda`` without a CUDA device; ``invalid_target`` for another kind.
    """
    tvm_backend = _backend()
    kind = kind.lower()
    if kind == "llvm":
        spec = tvm_backend.cpu_target(threads or default_threads())
    elif kind == "cuda":
        tvm = tvm_backend.load_tvm()
        if not tvm.cuda(0).exist:
            raise NotSupportedError("COMPILE ... FOR 'cuda': this machine has no CUDA device TVM can use",
                                    code="device_not_available")
        spec = {"kind": "cuda", "arch": "sm_" + tvm.cuda(0).compute_version.replace(".", "")}
    else:
        raise NotSupportedError(f"COMPILE ... FOR '{kind}': targets are 'llvm' (this CPU) and 'cuda'",
                                code="invalid_target")
    v = tvm_backend.versions()
    return TvmTarget(kind, spec, tvm_backend.target_key(spec), v["tvm"], v["tvm_ffi"])


def checked_artifacts(catalog, mv, target: TvmTarget) -> list[CompiledArtifact]:
    """The rows of ``modelsql.compiled`` for ``mv`` on ``target`` with this compiler (any status)."""
    return catalog.compiled.find(mv.name, mv.version, "tvm", target.key, target.tvm_version, target.ffi_version)


def tuning_dir(store, mv, target: TvmTarget, batch_size: int) -> Path:
    """Where a MetaSchedule job keeps its database (beside the blob store: a rerun resumes from it)."""
    key = hashlib.sha256(f"{mv.content_digest or mv.graph_digest}|{target.key}|{batch_size}|"
                         f"{target.tvm_version}|{target.ffi_version}".encode()).hexdigest()[:24]
    return Path(store.root) / "tvm-tuning" / key


def compile_version(session, mv, target: TvmTarget, *, batch_size: Optional[int] = None, trials: int = 0,
                    progress: Optional[Callable[[int, int], None]] = None) -> CompiledArtifact:
    """Compile, check, store and record ``mv`` for ``target`` (module docstring); the recorded row.

    A failed import or check is not an error: the row is ``declined`` with the reason.

    Raises:
        NotSupportedError: ``tvm_unavailable``; ``fixed_batch`` for a batch size the model's fixed batch
            contradicts.
    """
    tvm_backend = _backend()
    from ..operators.backends import tvm_check, tvm_tune

    data = load_model_bytes(session.store, mv)
    start = time.perf_counter()
    lib, reason, check = None, None, None
    try:
        if trials:
            lib = tvm_tune.tune(data, target=target.spec, batch_size=batch_size, trials=trials,
                                work_dir=str(tuning_dir(session.store, mv, target, batch_size)), progress=progress)
        else:
            lib = tvm_backend.compile_onnx(data, target=target.spec, batch_size=batch_size)
    except NotSupportedError as exc:
        if exc.code != "tvm_import_failed":
            raise
        reason = str(exc)
    if lib is not None:
        model = tvm_backend.load_library(lib, tvm_backend.Signature.from_onnx(data, batch_size), mv.label)
        check = tvm_check.check_against_onnxruntime(data, model)
        reason = None if check.ok else f"outputs differ from ONNX Runtime: {check.reason}"
    digest = session.store.put(lib) if lib is not None and reason is None else None
    return CompiledArtifact(
        mv.name, mv.version, "tvm", target.key, batch_size or 0, target.tvm_version, target.ffi_version,
        "checked" if reason is None else "declined", reason, digest, len(lib) if digest else None,
        check.max_abs if check else None, check.max_rel if check else None, trials, time.perf_counter() - start)


def _pick(rows: list[CompiledArtifact], batch_size: Optional[int]) -> Optional[CompiledArtifact]:
    """The artifact a PREDICT runs: the one tuned for its batch size, else the any-batch one, else the best
    tuned one (fed in slices of its batch)."""
    usable = [r for r in rows if r.usable]
    exact = [r for r in usable if batch_size and r.batch_size == batch_size]
    anyb = [r for r in usable if r.batch_size == 0]
    tuned = sorted((r for r in usable if r.tune_trials), key=lambda r: -r.tune_trials)
    return (exact or anyb or tuned or [None])[0]


def require_artifact(session, mv, batch_size: Optional[int] = None) -> CompiledArtifact:
    """The checked artifact ``PREDICT(..., backend = 'tvm')`` of ``mv`` runs on this CPU (checked when the
    statement is planned, before anything runs).

    Raises:
        NotSupportedError: ``tvm_unavailable``; ``backend_not_supported`` for a pipeline or a set of models;
            ``tvm_declined`` naming the reason when every artifact was declined; ``tvm_not_compiled`` when
            there is none (COMPILE MODEL first).
    """
    if mv.kind in ("pipeline", "models"):
        raise NotSupportedError(f"backend = 'tvm' runs one model; {mv.label} is a {mv.kind}: predict with "
                                "backend = 'onnxruntime'", code="backend_not_supported")
    target = tvm_target("llvm")
    rows = checked_artifacts(session.catalog, mv, target)
    chosen = _pick(rows, batch_size)
    if chosen is None:
        declined = [r for r in rows if r.status == "declined"]
        if declined:
            raise NotSupportedError(f"TVM declined {mv.label}: {declined[0].reason}", code="tvm_declined")
        raise NotSupportedError(
            f"{mv.label} has no TVM artifact for this CPU ({target.key}, TVM {target.tvm_version}): run COMPILE "
            f"MODEL {mv.name} VERSION {mv.version} FOR 'llvm' first", code="tvm_not_compiled")
    return chosen


def alternative(session, mv) -> tuple[Optional[CompiledArtifact], Optional[str]]:
    """``(checked artifact, None)`` or ``(None, why declined)`` of ``mv`` for this CPU, for the cost function to
    weigh against ONNX Runtime; ``(None, None)`` when nothing was compiled (TVM is not even imported then)."""
    if mv.kind in ("pipeline", "models") or not session.catalog.present:
        return None, None
    if not session.catalog.compiled.of_model(mv.name, mv.version):
        return None, None
    try:
        rows = checked_artifacts(session.catalog, mv, tvm_target("llvm"))
    except NotSupportedError:  # TVM no longer importable: ONNX Runtime alone
        return None, None
    chosen = _pick(rows, None)
    declined = next((r.reason for r in rows if r.status == "declined"), None)
    return chosen, (declined if chosen is None else None)


def tvm_session(session, mv, *, intra: int, batch_size: Optional[int] = None):
    """The cached :class:`~modelsql.operators.backends.tvm.TvmModel` of :func:`require_artifact`.

    Raises:
        NotSupportedError: as :func:`require_artifact`.
    """
    chosen = require_artifact(session, mv, batch_size)
    tvm_backend = _backend()
    key = SessionKey(chosen.digest, "tvm", "cpu", (("threads", intra),))

    def load():  # on a miss only: the signature needs the whole model read from the store
        signature = tvm_backend.Signature.from_onnx(load_model_bytes(session.store, mv), chosen.batch_size or None)
        return tvm_backend.load_library(session.store.get(chosen.digest), signature, mv.label, intra_op_threads=intra)

    return SESSIONS.get(key, load)
