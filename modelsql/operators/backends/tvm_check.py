"""Checking a TVM-compiled model against ONNX Runtime before trusting it.

TVM's ONNX frontend imports some operators into code that runs and gives wrong answers, with no
error or warning. Measured with apache-tvm 0.27 on the onnx package's own node test cases
(``onnx.backend.test.case.node``): ``test_spacetodepth_crd_mode_example`` (values wrong),
``test_expand_dim_changed`` (shape [2, 1, 6] instead of [2, 3, 6]),
``test_convtranspose_output_shape`` ([1, 2, 9, 7] instead of [1, 2, 10, 8]) and every
``test_layer_normalization_*`` case with the optional Mean / InvStdDev outputs (scalars instead of
the reduced shape). So :func:`check_against_onnxruntime` runs both on the same sample inputs.

Tolerances (ONNX Runtime is the reference ``b``, TVM the candidate ``a``):

* float outputs: ``|a - b| <= ATOL + RTOL * |b|`` element-wise with ``ATOL = 1e-4`` and
  ``RTOL = 1e-3`` (float32 kernels that sum in another order differ by ~1e-7 relative; the onnx node
  tests use rtol 1e-3), NaN where the other is NaN, infinities equal;
* integer and bool outputs: exactly equal;
* every output: the same shape and dtype.

On CUDA (``device="cuda:N"``) the reference is ONNX Runtime's CUDA provider on that GPU, with TF32 off
(``use_tf32 = 0``: by default its matrix products and convolutions round their inputs to 10 mantissa bits,
a ~1e-3 relative error that would hide nothing and flag everything), and the absolute part of the float
tolerance is scaled by the output's largest magnitude: ``|a - b| <= ATOL * max(1, max|b|) + RTOL * |b|``
(:data:`CUDA_SCALED_ATOL`). GPU kernels sum in parallel and cuDNN may pick Winograd or FFT convolutions,
whose error is relative to the size of the summed terms rather than to the (possibly cancelled) result; a
miscompiled operator is still off by the order of the output itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from modelsql.errors import DataError, NotSupportedError
from modelsql.operators.backends.onnxruntime import OrtModel
from modelsql.operators.backends.profiling import synthetic_feeds

__all__ = ["ATOL", "RTOL", "CUDA_SCALED_ATOL", "CheckResult", "check_against_onnxruntime", "compare"]

ATOL = 1e-4
"""Absolute tolerance on float outputs."""

RTOL = 1e-3
"""Relative tolerance on float outputs (times the ONNX Runtime value's magnitude)."""

CUDA_SCALED_ATOL = True
"""On CUDA the absolute tolerance is ``ATOL`` times ``max(1, max|ONNX Runtime output|)`` (module docstring)."""

_VARIANTS = (("random", 1.0), ("scaled x100", 100.0), ("negated", -1.0))
_ORT_REFUSED = "ONNX Runtime failed"


@dataclass(frozen=True)
class CheckResult:
    """What :func:`check_against_onnxruntime` found.

    Attributes:
        ok: every output of every run within tolerance (see the module docstring).
        max_abs: the largest ``|tvm - ort|`` over the compared float and integer elements.
        max_rel: the largest ``|tvm - ort| / max(|ort|, ATOL)``.
        reason: None when ok; else the first failure: the output, the batch, the inputs and the
            worst difference (or the shape, dtype or run failure).
        batches: the batch sizes run.
    """

    ok: bool
    max_abs: float
    max_rel: float
    reason: Optional[str]
    batches: tuple


def check_against_onnxruntime(model_bytes: bytes, tvm_model, *, batch_sizes: Sequence[int] = (1, 7, 32),
                              seed: int = 0, dims: Optional[Mapping[str, int]] = None,
                              device: str = "cpu") -> CheckResult:
    """Run ``tvm_model`` and ONNX Runtime on the same inputs and compare every output.

    Args:
        model_bytes: the ONNX model ``tvm_model`` was compiled from.
        tvm_model: a :class:`~.tvm.TvmModel` (any BackendModel with ``output_names``).
        batch_sizes: rows per run; a model with a fixed batch (the ONNX model's or the compiled one's)
            is checked at that batch only.
        seed: seed of the inputs: per batch, standard normal floats of each input's own dtype and shape
            and zeros for integers and booleans (:func:`.profiling.synthetic_feeds`), then the same
            floats times 100 and negated, and, for a model with integer or boolean inputs, the floats
            with small random integers (1 to 3) and random booleans. A variant ONNX Runtime itself
            refuses (a division by a zero integer, an index out of range) is skipped; if it refuses
            every variant of a batch, the check fails naming the first refusal.
        dims: sizes of symbolic non-batch dimensions (name -> size), if the model has any.
        device: where the reference runs, ``"cpu"`` or ``"cuda:N"`` (ONNX Runtime's CUDA provider, TF32 off, and
            the CUDA tolerance: module docstring); ``tvm_model`` should run on the same device.

    Returns:
        A :class:`CheckResult`; it stops at the first failure.

    Raises:
        DataError: ONNX Runtime cannot load the model (``"invalid_onnx"``), or on ``cuda:N`` it did not place
            the model on its CUDA provider (``"device_not_used"``).
        NotSupportedError: inputs cannot be synthesized (``"symbolic_dimension"``, ``"unsupported_type"``).
    """
    session = _reference(model_bytes, device)
    scaled = device != "cpu" and CUDA_SCALED_ATOL
    batches = _batches(session, tvm_model, batch_sizes)
    worst = [0.0, 0.0]
    for b in batches:
        refused = []
        variants = _variants(synthetic_feeds(session, b, seed=seed, dims=dims), seed)
        for variant, feeds in variants:
            reason = _compare_run(session, tvm_model, feeds, f"batch {b} ({variant} inputs)", worst, scaled)
            if reason is not None and reason.startswith(_ORT_REFUSED):
                refused.append(reason)
            elif reason is not None:
                return CheckResult(False, worst[0], worst[1], reason, tuple(batches))
        if len(refused) == len(variants):
            return CheckResult(False, worst[0], worst[1], refused[0], tuple(batches))
    return CheckResult(True, worst[0], worst[1], None, tuple(batches))


def _reference(model_bytes: bytes, device: str):
    """The ONNX Runtime session the check compares with: on the CPU, or on ``cuda:N`` with TF32 off."""
    session = OrtModel(model_bytes, "the reference model", intra_op_threads=1, device=device).session
    if device == "cpu":
        return session
    if session.get_providers()[0] != "CUDAExecutionProvider":
        raise DataError(f"ONNX Runtime did not place the reference model on {device} (providers: "
                        f"{', '.join(session.get_providers())})", code="device_not_used")
    cuda = {"device_id": device.partition(":")[2] or "0", "use_tf32": "0"}
    try:
        session.set_providers(["CUDAExecutionProvider", "CPUExecutionProvider"], [cuda, {}])
    except Exception as exc:  # onnxruntime's own exception classes: the check cannot run as documented
        raise DataError(f"ONNX Runtime's CUDA provider refused use_tf32 = 0: {str(exc).strip()[:200]}",
                        code="device_not_used") from exc
    return session


def _variants(base: dict, seed: int) -> list[tuple[str, dict]]:
    """The input sets of one batch (see :func:`check_against_onnxruntime`)."""
    out = [(name, {k: (v * v.dtype.type(factor) if v.dtype.kind == "f" else v) for k, v in base.items()})
           for name, factor in _VARIANTS]
    if any(v.dtype.kind in "iub" for v in base.values()):
        rng = np.random.default_rng(seed + 1)
        out.append(("small integer", {k: (rng.integers(1, 4, v.shape).astype(v.dtype) if v.dtype.kind in "iu" else
                                          rng.random(v.shape) < 0.5 if v.dtype.kind == "b" else v)
                                      for k, v in base.items()}))
    return out


def _batches(session, tvm_model, batch_sizes: Sequence[int]) -> list[int]:
    fixed = {s.shape[0] for s in session.get_inputs() if s.shape and isinstance(s.shape[0], int) and s.shape[0] > 0}
    if getattr(tvm_model, "fixed_batch", None):
        fixed.add(tvm_model.fixed_batch)
    if len(fixed) > 1:
        raise NotSupportedError(f"inputs have different fixed batches {sorted(fixed)}", code="fixed_batch")
    return sorted(fixed) if fixed else list(batch_sizes)


def _compare_run(session, tvm_model, feeds: dict, where: str, worst: list, scaled: bool = False) -> Optional[str]:
    """None when every output agrees, else the reason; ``worst`` is updated with [max_abs, max_rel]."""
    names = [o.name for o in session.get_outputs()]
    try:
        expected = session.run(names, feeds)
    except Exception as exc:  # onnxruntime's own exception classes
        return f"{_ORT_REFUSED} at {where}, so TVM cannot be checked: {str(exc).strip().splitlines()[0][:300]}"
    try:
        got = tvm_model.run(feeds, names)
    except DataError as exc:
        return f"TVM failed at {where}: {exc.message}"
    for name, a, b in zip(names, got, expected):
        reason = compare(np.asarray(a), np.asarray(b), worst, scaled=scaled)
        if reason is not None:
            return f'output "{name}" at {where}: {reason}'
    return None


def compare(a: np.ndarray, b: np.ndarray, worst: Optional[list] = None, *, scaled: bool = False) -> Optional[str]:
    """None when output ``a`` (TVM) matches ``b`` (ONNX Runtime) within the tolerance of the module docstring,
    else what differs (one sentence).

    Args:
        a, b: one output of each, any shape and dtype.
        worst: ``[max_abs, max_rel]``, raised in place to this output's largest differences (optional).
        scaled: the CUDA tolerance (``ATOL`` times ``max(1, max|b|)``) instead of the CPU one.
    """
    worst = worst if worst is not None else [0.0, 0.0]
    if a.shape != b.shape:
        return f"TVM shape {list(a.shape)}, ONNX Runtime shape {list(b.shape)}"
    if a.dtype != b.dtype:
        return f"TVM dtype {a.dtype}, ONNX Runtime dtype {b.dtype}"
    if a.size == 0:
        return None
    if b.dtype.kind == "f":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))  # equal infinities and NaN pairs
        diff = np.where(same, 0.0, np.abs(a64 - b64))
        diff = np.where(np.isnan(diff), np.inf, diff)
        atol = ATOL * max(1.0, float(np.max(np.abs(b64[np.isfinite(b64)]), initial=0.0))) if scaled else ATOL
        bad = diff > atol + RTOL * np.abs(np.nan_to_num(b64))
    else:
        atol = 0.0
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        bad = a != b
    rel = diff / np.maximum(np.abs(np.nan_to_num(b.astype(np.float64))), ATOL)
    worst[0], worst[1] = max(worst[0], float(diff.max())), max(worst[1], float(rel.max()))
    if not bad.any():
        return None
    i = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), diff.shape)
    return (f"{int(bad.sum())} of {bad.size} elements differ; worst at index {list(map(int, i))}: TVM {a[i].item()!r}, "
            f"ONNX Runtime {b[i].item()!r} (|difference| {diff[i]:.3g}, allowed {atol:.3g} + {RTOL:g} * |ONNX Runtime|)")
