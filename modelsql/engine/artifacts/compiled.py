"""Compiled artifacts of a catalog model version (TVM): compiling, checking, recording, loading.

:func:`compile_version` compiles a version with TVM Relax for a target (untuned with a symbolic batch,
or, with ``trials``, tuned by MetaSchedule for one fixed batch), checks the library against ONNX
Runtime on sample inputs (:func:`~modelsql.operators.backends.tvm_check.check_against_onnxruntime`),
stores a library that passed in the blob store and records the result either way in
``modelsql.compiled``: ``checked``, or ``declined`` with the reason (TVM could not import an operator,
or its outputs differed), so a model TVM computes wrongly is never run. Artifacts are keyed by
(model version, target with its CPU, batch bucket, TVM and tvm-ffi versions): an upgraded TVM or
another CPU finds none and compiles again.

CUDA (``FOR 'cuda'`` or ``'cuda:N'``): where TVM's CUDA runtime, the NVIDIA driver and ONNX Runtime's CUDA
provider are all present (:func:`cuda_missing` lists what is not), the version is built untuned with
DLight's default GPU schedules in a child process under a wall-clock limit
(:func:`~modelsql.operators.backends.tvm_build.build_with_limit`; a build past it is declined), loaded on
the GPU and checked against ONNX Runtime on that GPU (the CUDA tolerance of
:mod:`~modelsql.operators.backends.tvm_check`). The target key names the architecture (``sm_90``), not the
ordinal: the artifact runs on any GPU of that architecture.

:func:`tvm_session` is what ``PREDICT(..., backend = 'tvm')`` runs: the checked artifact for the
PREDICT's batch size (or the any-batch one), loaded once per process and cached like an ONNX Runtime
session (:data:`~modelsql.operators.backends.SESSIONS`). A library is code: it is loaded only when the session
trusts it (:func:`library_code` through :func:`~modelsql.engine.artifacts.trust.require`; ``COMPILE`` signs what it
builds with its user's key), and an untrusted one is no alternative for the cost function.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from modelsql.catalog.compiled import CompiledArtifact
from modelsql.errors import DataError, NotSupportedError, OperationalError
from modelsql.operators.backends import SESSIONS, SessionKey
from modelsql.engine.artifacts import trust
from modelsql.engine.artifacts.sessions import default_threads, load_model_bytes

if TYPE_CHECKING:
    from modelsql.engine.artifacts.context import ArtifactContext

__all__ = ["TvmTarget", "tvm_target", "compile_version", "require_artifact", "tvm_session", "tvm_device",
           "checked_artifacts", "cuda_missing", "schedules_of", "library_code"]

_CUDA = re.compile(r"^cuda(?::(\d+))?$")


@dataclass(frozen=True)
class TvmTarget:
    """A TVM target as the catalog keys it: ``spec`` (the JSON target), ``key`` (its canonical text), the
    compiler versions, and ``device`` (where its code runs: ``"cpu"`` or ``"cuda:N"``; not in the key)."""

    kind: str
    spec: dict
    key: str
    tvm_version: str
    ffi_version: str
    device: str = "cpu"


def _backend():
    from modelsql.operators.backends import tvm as tvm_backend  # TVM is an optional extra: import it when used

    reason = tvm_backend.unavailable_reason()
    if reason is not None:
        raise NotSupportedError(f"The TVM backend is not available: {reason}", code="tvm_unavailable")
    return tvm_backend


def tvm_target(kind: str = "llvm", threads: Optional[int] = None) -> TvmTarget:
    """The target ``kind`` (``"llvm"``: this machine's CPU, named by LLVM; ``"cuda"`` or ``"cuda:N"``: CUDA device
    N, 0 by default) for ``threads`` cores.

    Raises:
        NotSupportedError: ``tvm_unavailable`` (TVM not installed, or a tvm-ffi that segfaults);
            ``device_not_available`` for ``cuda`` where CUDA is missing (the message lists what:
            :func:`cuda_missing`); ``invalid_target`` for another kind.
    """
    kind = kind.strip().lower()
    if kind == "llvm":
        from modelsql.operators.backends import tvm as tvm_backend

        # the CPU's name from an earlier process, if any: weighing an artifact against ONNX Runtime (each
        # PREDICT of a compiled model) then imports neither TVM nor the torch tvm_ffi imports
        spec = tvm_backend.remembered_cpu_target(threads or default_threads())
        if spec is not None and tvm_backend.install_reason() is None:
            v = tvm_backend.versions()
            return TvmTarget("llvm", spec, tvm_backend.target_key(spec), v["tvm"], v["tvm_ffi"], "cpu")
    tvm_backend = _backend()
    cuda = _CUDA.match(kind)
    if kind == "llvm":
        spec, device = tvm_backend.cpu_target(threads or default_threads()), "cpu"
    elif cuda:
        ordinal = int(cuda.group(1) or 0)
        missing = cuda_missing(ordinal)
        if missing:
            raise NotSupportedError(f"COMPILE ... FOR '{kind}': CUDA device {ordinal} is not available here: "
                                    + "; ".join(missing), code="device_not_available")
        spec, device = tvm_backend.cuda_target(ordinal), f"cuda:{ordinal}"
    else:
        raise NotSupportedError(f"COMPILE ... FOR '{kind}': targets are 'llvm' (this CPU), 'cuda' and 'cuda:N'",
                                code="invalid_target")
    v = tvm_backend.versions()
    return TvmTarget(kind.partition(":")[0], spec, tvm_backend.target_key(spec), v["tvm"], v["tvm_ffi"], device)


def cuda_missing(ordinal: int = 0) -> list[str]:
    """What keeps ``cuda:ordinal`` from TVM here (an empty list when nothing): ONNX Runtime's CUDA provider
    (onnxruntime-gpu, the reference of the check), ``MODELSQL_DEVICES`` hiding the device, the NVIDIA driver,
    and TVM's CUDA runtime (:func:`~modelsql.operators.backends.tvm.cuda_unavailable_reason`)."""
    from modelsql.operators.backends import devices  # asked first: its preload loads the CUDA libraries TVM needs

    device, missing = f"cuda:{ordinal}", []
    if device not in devices.available():
        missing.append(_ort_missing(device))
    if not _driver_loads():
        missing.append("no NVIDIA driver (libcuda.so.1 does not load)")
    reason = _backend().cuda_unavailable_reason(ordinal)
    if reason is not None:
        missing.append(reason)
    return missing


def _ort_missing(device: str) -> str:
    import os

    import onnxruntime

    hidden = os.environ.get("MODELSQL_DEVICES")
    if hidden:
        return f"MODELSQL_DEVICES={hidden} does not list {device}"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return "onnxruntime-gpu is absent (ONNX Runtime has no CUDAExecutionProvider, the reference TVM is checked against)"
    return f"ONNX Runtime's CUDA provider sees no {device}"


def _driver_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def schedules_of(target: TvmTarget, trials: int) -> str:
    """How ``COMPILE`` schedules the code for ``target``, as its result's ``schedules`` column says."""
    if trials:
        return f"MetaSchedule, {trials} trials"
    if target.device != "cpu":
        return "DLight default GPU schedules (untuned)"
    return "none (untuned loops)"


def checked_artifacts(catalog, mv, target: TvmTarget) -> list[CompiledArtifact]:
    """The rows of ``modelsql.compiled`` for ``mv`` on ``target`` with this compiler (any status)."""
    return catalog.compiled.find(mv.name, mv.version, "tvm", target.key, target.tvm_version, target.ffi_version)


def tuning_dir(store, mv, target: TvmTarget, batch_size: int) -> Path:
    """Where a MetaSchedule job keeps its database (beside the blob store: a rerun resumes from it)."""
    key = hashlib.sha256(f"{mv.content_digest or mv.graph_digest}|{target.key}|{batch_size}|"
                         f"{target.tvm_version}|{target.ffi_version}".encode()).hexdigest()[:24]
    return Path(store.root) / "tvm-tuning" / key


def compile_version(session: ArtifactContext, mv, target: TvmTarget, *, batch_size: Optional[int] = None,
                    trials: int = 0, progress: Optional[Callable[[int, int], None]] = None) -> CompiledArtifact:
    """Compile, check, store and record ``mv`` for ``target`` (module docstring); the recorded row.

    A failed import or check is not an error: the row is ``declined`` with the reason. On CUDA so is a build
    past its time limit, and a library TVM or ONNX Runtime cannot load on the GPU.

    Raises:
        NotSupportedError: ``tvm_unavailable``; ``fixed_batch`` for a batch size the model's fixed batch
            contradicts; ``invalid_target`` for ``trials`` on CUDA (its MetaSchedule is not wired).
    """
    tvm_backend = _backend()
    data = load_model_bytes(session.store, mv)
    start = time.perf_counter()
    lib, reason, check = None, None, None
    try:
        lib = _build(session, mv, data, target, batch_size, trials, progress)
    except NotSupportedError as exc:
        if exc.code not in ("tvm_import_failed", "tvm_build_timeout"):
            raise
        reason = str(exc)
    if lib is not None:
        check, reason = _check(tvm_backend, data, lib, mv, target, batch_size)
    digest = session.store.put(lib) if lib is not None and reason is None else None
    return CompiledArtifact(
        mv.name, mv.version, "tvm", target.key, batch_size or 0, target.tvm_version, target.ffi_version,
        "checked" if reason is None else "declined", reason, digest, len(lib) if digest and lib is not None else None,
        check.max_abs if check else None, check.max_rel if check else None, trials, time.perf_counter() - start)


def _build(session: ArtifactContext, mv, data: bytes, target: TvmTarget, batch_size: Optional[int], trials: int,
           progress) -> bytes:
    """The library's bytes: tuned by MetaSchedule (CPU), built untuned in-process (CPU), or built in a child
    process under a time limit (CUDA)."""
    from modelsql.operators.backends import tvm_build, tvm_tune

    if target.device != "cpu":
        if trials:
            raise NotSupportedError(f"COMPILE ... FOR '{target.device}' builds with DLight's default GPU schedules; "
                                    "MetaSchedule tuning (tune_trials) runs on the CPU target only",
                                    code="invalid_target")
        return tvm_build.build_with_limit(data, target=target.spec, batch_size=batch_size)
    if trials:
        assert batch_size is not None  # COMPILE refuses tune_trials without batch_size
        return tvm_tune.tune(data, target=target.spec, batch_size=batch_size, trials=trials,
                             work_dir=str(tuning_dir(session.store, mv, target, batch_size)), progress=progress)
    return _backend().compile_onnx(data, target=target.spec, batch_size=batch_size)


def _check(tvm_backend, data: bytes, lib: bytes, mv, target: TvmTarget, batch_size: Optional[int]):
    """``(check, None)`` when the library agrees with ONNX Runtime on the target's device, else
    ``(check or None, reason)``; on CUDA a library or reference that cannot load is a reason too."""
    from modelsql.operators.backends import tvm_check

    where = "" if target.device == "cpu" else f" on {target.device}"
    try:
        model = tvm_backend.load_library(lib, tvm_backend.Signature.from_onnx(data, batch_size), mv.label,
                                         device=target.device)
        check = tvm_check.check_against_onnxruntime(data, model, device=target.device)
    except DataError as exc:
        if target.device == "cpu":
            raise
        return None, f"cannot run on {target.device}: {exc.message}"
    return check, (None if check.ok else f"outputs differ from ONNX Runtime{where}: {check.reason}")


def library_code(row: CompiledArtifact) -> trust.CodeArtifact:
    """The code artifact of a compiled library (its blob), with how to rebuild it here."""
    target = "cuda" if '"kind":"cuda"' in row.target else "llvm"
    assert row.digest is not None  # a usable row: only those have a library to trust
    return trust.CodeArtifact("compiled", row.digest, row.model, row.version,
                              f"the {row.backend.upper()} library compiled for {row.target}",
                              remedy=f"rebuild it here with COMPILE MODEL {row.model} VERSION {row.version} "
                                     f"FOR '{target}'")


def _pick(rows: list[CompiledArtifact], batch_size: Optional[int]) -> Optional[CompiledArtifact]:
    """The artifact a PREDICT runs: the one tuned for its batch size, else the any-batch one, else the best
    tuned one (fed in slices of its batch)."""
    usable = [r for r in rows if r.usable]
    exact = [r for r in usable if batch_size and r.batch_size == batch_size]
    anyb = [r for r in usable if r.batch_size == 0]
    tuned = sorted((r for r in usable if r.tune_trials), key=lambda r: -r.tune_trials)
    for group in (exact, anyb, tuned):
        if group:
            return group[0]
    return None


def require_artifact(session: ArtifactContext, mv, batch_size: Optional[int] = None,
                     device: str = "auto") -> CompiledArtifact:
    """The checked artifact ``PREDICT(..., backend = 'tvm')`` of ``mv`` runs on ``device`` (``"auto"``, ``"cpu"``
    or ``"cuda:N"``; see the module docstring), checked when the statement is planned, before anything runs.

    Raises:
        NotSupportedError: ``tvm_unavailable``; ``backend_not_supported`` for a pipeline or a set of models;
            ``tvm_declined`` naming the reason when every artifact was declined; ``tvm_not_compiled`` when
            there is none (COMPILE MODEL first); ``device_not_available`` for a ``cuda:N`` this machine lacks;
            ``untrusted_code`` when the session does not trust the library (:func:`library_code`).
    """
    return _resolve(session, mv, batch_size, device)[0]


def tvm_device(session: ArtifactContext, mv, batch_size: Optional[int] = None, device: str = "auto") -> str:
    """Where ``PREDICT(..., backend = 'tvm')`` of ``mv`` runs: ``"cpu"`` or ``"cuda:N"`` (what EXPLAIN shows).

    Raises:
        NotSupportedError: as :func:`require_artifact`.
    """
    return _resolve(session, mv, batch_size, device)[1]


def _resolve(session: ArtifactContext, mv, batch_size: Optional[int], device: str) -> tuple[CompiledArtifact, str]:
    """The artifact and the device it runs on: the first target of :func:`_targets` with a usable artifact."""
    if mv.kind in ("pipeline", "models"):
        raise NotSupportedError(f"backend = 'tvm' runs one model; {mv.label} is a {mv.kind}: predict with "
                                "backend = 'onnxruntime'", code="backend_not_supported")
    targets = _targets(session, mv, device)
    declined = []
    for target in targets:
        rows = checked_artifacts(session.catalog, mv, target)
        chosen = _pick(rows, batch_size)
        if chosen is not None:
            trust.require(session, library_code(chosen))  # before anything of it is loaded
            return chosen, target.device
        declined += [r for r in rows if r.status == "declined"]
    if declined:
        raise NotSupportedError(f"TVM declined {mv.label}: {declined[0].reason}", code="tvm_declined")
    target = targets[0]
    where = "this CPU" if target.device == "cpu" else target.device
    raise NotSupportedError(
        f"{mv.label} has no TVM artifact for {where} ({target.key}, TVM {target.tvm_version}): run COMPILE "
        f"MODEL {mv.name} VERSION {mv.version} FOR '{'llvm' if target.device == 'cpu' else target.device}' first",
        code="tvm_not_compiled")


def _targets(session: ArtifactContext, mv, device: str) -> list[TvmTarget]:
    """The targets a PREDICT on ``device`` may run, in order of preference: ``cuda:N`` alone for that device;
    ``cpu`` alone; for ``auto``, CUDA device 0 first where the version has a CUDA artifact and CUDA is
    available here, then this CPU."""
    if device.startswith("cuda"):
        return [tvm_target(device)]
    cpu = [tvm_target("llvm")]
    if device == "cpu" or not any('"kind":"cuda"' in r.target for r in session.catalog.compiled.of_model(
            mv.name, mv.version)):
        return cpu
    try:
        return [tvm_target("cuda")] + cpu
    except NotSupportedError:  # compiled on a GPU machine, planned on one without: the CPU artifact
        return cpu


def alternative(session: ArtifactContext, mv) -> tuple[Optional[CompiledArtifact], Optional[str]]:
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
    if chosen is not None and not _trusted(session, chosen):
        return None, "its library is not trusted here (TRUST MODEL, or COMPILE it again)"
    declined = next((r.reason for r in rows if r.status == "declined"), None)
    return chosen, (declined if chosen is None else None)


def _trusted(session: ArtifactContext, row: CompiledArtifact) -> bool:
    """Whether the session trusts the library; a key file it cannot read trusts nothing (ONNX Runtime runs)."""
    try:
        return trust.trusted(session, library_code(row))
    except OperationalError:
        return False


def tvm_session(session: ArtifactContext, mv, *, intra: int, batch_size: Optional[int] = None, device: str = "auto"):
    """The cached :class:`~modelsql.operators.backends.tvm.TvmModel` of :func:`require_artifact`, loaded on its
    device (:func:`tvm_device`).

    Raises:
        NotSupportedError: as :func:`require_artifact`.
    """
    chosen, where = _resolve(session, mv, batch_size, device)
    tvm_backend = _backend()
    digest = chosen.digest
    assert digest is not None  # _resolve chooses a usable row
    key = SessionKey(digest, "tvm", where, (("threads", intra),))

    def load():  # on a miss only: the signature needs the whole model read from the store
        trust.require_checked(library_code(chosen))  # _resolve passed it
        signature = tvm_backend.Signature.from_onnx(load_model_bytes(session.store, mv), chosen.batch_size or None)
        return tvm_backend.load_library(session.store.get(digest), signature, mv.label,
                                        intra_op_threads=intra, device=where)

    return SESSIONS.get(key, load)
