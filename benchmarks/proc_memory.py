"""This process's memory as Linux reports it in ``/proc/self/status``, for the benchmarks' memory figures.

:func:`status` reads named fields (``VmRSS``, ``RssAnon``, ``RssFile``, ``VmHWM`` ...) in bytes;
:func:`settle` first returns freed memory to the system (``gc.collect()`` and glibc's
``malloc_trim(0)``), so a figure measures what is held, not what the allocator kept.
"""

from __future__ import annotations

import ctypes
import gc


def settle() -> None:
    """Collect garbage and hand freed heap pages back to the system (glibc only; elsewhere a no-op)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def status(*fields: str) -> dict[str, int]:
    """``{field: bytes}`` for each named ``/proc/self/status`` field (0 when absent: not Linux)."""
    out = dict.fromkeys(fields, 0)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name = line.split(":", 1)[0]
                if name in out:
                    out[name] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out
