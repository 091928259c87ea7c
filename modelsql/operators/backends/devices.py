"""Devices: which a plan may run on, how a ``device`` option is read, and ONNX Runtime's providers for each.

A device is ``"cpu"`` or ``"cuda:N"`` (N: the CUDA ordinal). Statements take a ``device`` option whose value
is ``'auto'`` (the cost function chooses), ``'cpu'``, ``'cuda'`` (``cuda:0``) or ``'cuda:N'``.

CUDA is present when onnxruntime-gpu provides ``CUDAExecutionProvider`` after
``onnxruntime.preload_dlls()`` (how onnxruntime-gpu documents finding the CUDA and cuDNN libraries that
come as Python wheels, e.g. with torch) and the driver reports a device. The environment variable
``MODELSQL_DEVICES`` (a comma list such as ``cpu`` or ``cpu,cuda:0``; ``auto``: all) narrows what is detected (the CPU stays): tests
and users hide a GPU with ``MODELSQL_DEVICES=cpu``.

Without a GPU nothing changes: every plan runs on ``cpu``, and asking for ``cuda`` is
``NotSupportedError`` with code ``device_not_available``.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Optional

from modelsql.errors import NotSupportedError, OperationalError, ProgrammingError

__all__ = ["CPU", "DEVICE_CHOICES", "available", "cuda_available", "parse", "require", "ort_providers",
           "cuda_ordinal"]

CPU = "cpu"
DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")
"""What a ``device`` option may say (N: a CUDA ordinal)."""
_PATTERN = re.compile(r"^(auto|cpu|cuda)(?::([0-9]+))?$")


def parse(value: object, where: str) -> str:
    """The normalised device of a ``device`` option: ``"auto"``, ``"cpu"`` or ``"cuda:N"``.

    Args:
        value: the option's value (``'cuda'`` means ``cuda:0``); None (SQL NULL) is refused.
        where: what the option belongs to, for the message (``"PREDICT(MODEL m)"``).

    Raises:
        ProgrammingError: code ``"invalid_option"`` for anything else, listing the choices.
    """
    text = str(value).strip().lower()
    m = _PATTERN.match(text) if value is not None else None
    if not m or (m.group(2) is not None and m.group(1) != "cuda"):
        raise ProgrammingError(f"{where}: device must be one of {', '.join(repr(c) for c in DEVICE_CHOICES)}, "
                               f"not {_sql_text(value)}.", code="invalid_option")
    if m.group(1) == "cuda":
        return f"cuda:{int(m.group(2) or 0)}"
    return m.group(1)


def _sql_text(value: object) -> str:
    """A value as SQL writes it (NULL, TRUE, 'text', 3)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value).upper()
    return repr(value)


@functools.lru_cache(maxsize=1)
def _detected() -> tuple[str, ...]:
    devices = [CPU]
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - onnxruntime is a core dependency
        return tuple(devices)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return tuple(devices)
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        try:
            preload()
        except Exception:  # noqa: BLE001 - libraries absent: the provider will not load, so no CUDA
            return tuple(devices)
    devices += [f"cuda:{i}" for i in range(_cuda_count())]
    return tuple(devices)


def _cuda_count() -> int:
    """CUDA devices the driver reports (torch when importable; else the CUDA runtime's count via ctypes)."""
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - torch absent or without CUDA: ask the runtime library directly
        pass
    import ctypes

    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        return count.value if lib.cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0
    return 0


def available() -> tuple[str, ...]:
    """The devices plans may use, ``"cpu"`` first and always there. ``MODELSQL_DEVICES`` narrows what is
    detected to the devices it names (``auto`` in it: every device detected).

    Raises:
        OperationalError: code ``"bad_environment"`` when ``MODELSQL_DEVICES`` names something that is not a
            device (every statement then says so, whatever device it asks for).
    """
    override = os.environ.get("MODELSQL_DEVICES")
    detected = _detected()
    if not override or not override.strip(" ,"):
        return detected
    try:
        named = {parse(d, "MODELSQL_DEVICES") for d in override.split(",") if d.strip()}
    except ProgrammingError as exc:
        raise OperationalError(f"the environment variable {exc} (it is {override!r})", code="bad_environment") from None
    if "auto" in named:
        return detected
    return tuple(d for d in detected if d == CPU or d in named)


def cuda_available() -> bool:
    """Whether any ``cuda:N`` device is available."""
    return any(d.startswith("cuda") for d in available())


def require(device: str, where: str) -> str:
    """``device`` itself when plans may use it (``"auto"`` passes).

    Raises:
        NotSupportedError: code ``"device_not_available"``, naming the devices there are.
    """
    if device == "auto" or device in available():
        return device
    raise NotSupportedError(f"{where}: device '{device}' is not available on this machine; available: "
                            f"{', '.join(available())}" + ("" if cuda_available() else
                                                           " (CUDA needs onnxruntime-gpu and an NVIDIA driver)")
                            + ".", code="device_not_available")


def cuda_ordinal(device: str) -> Optional[int]:
    """N of ``"cuda:N"``; None for the CPU."""
    return int(device.split(":", 1)[1]) if device.startswith("cuda:") else None


def ort_providers(device: str, *, cuda_graph: bool = False) -> list:
    """ONNX Runtime's ``providers`` argument for a session on ``device``: the CPU provider alone for ``cpu``;
    the CUDA provider on that ordinal (``enable_cuda_graph`` when asked), then the CPU provider, for ``cuda:N``.
    """
    ordinal = cuda_ordinal(device)
    if ordinal is None:
        return ["CPUExecutionProvider"]
    options = {"device_id": str(ordinal)}
    if cuda_graph:
        options["enable_cuda_graph"] = "1"
    return [("CUDAExecutionProvider", options), "CPUExecutionProvider"]
