"""What the GPU benchmarks (``gpu_predict.py``, ``gpu_latency.py``) share: progress lines, error texts kept in
the results, and the host they ran on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
import traceback
from typing import Callable


def logger(name: str) -> Callable[[str], None]:
    """``log(msg)`` printing ``[name HH:MM:SS] msg``, flushed (the GPU run's log is read as it comes)."""
    def log(msg: str) -> None:
        print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", flush=True)
    return log


def error_text(exc: BaseException) -> str:
    """An error as the results keep it: its type and message, then the end of its traceback."""
    return f"{type(exc).__name__}: {exc}"[:1500] + "\n" + traceback.format_exc()[-1500:]


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - no driver tools: nothing to name
        return None


def host_info() -> dict:
    """Cores, Python, platform, the GPU (torch's name for it, else nvidia-smi's), nvidia-smi's line, the devices
    modelsql sees and ONNX Runtime's providers."""
    import onnxruntime as ort

    from modelsql.operators.backends import devices

    info = {"cores": len(os.sched_getaffinity(0)), "python": sys.version.split()[0], "platform": platform.platform(),
            "gpu": None}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - torch absent or without CUDA
        pass
    info["gpu"] = info["gpu"] or _nvidia_smi("name")
    info["nvidia_smi"] = _nvidia_smi("name,memory.total,driver_version")
    info["modelsql_devices"] = list(devices.available())
    info["ort_providers"] = ort.get_available_providers()
    return info
