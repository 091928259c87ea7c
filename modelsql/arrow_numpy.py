"""Arrow columns of fixed-width numbers as NumPy arrays, read from their buffers.

pyarrow's own ``to_numpy`` (and ``pa.array``) first look whether pandas is installed and import it when it is (about
0.2 s on a 2-core machine), which a process that never needs pandas (a TUNE in a fresh process, whose data are numbers)
pays for nothing. A column of fixed-width numbers without NULLs is its values buffer: NumPy views it as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["numbers"]

_FIXED = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
          "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "float": np.float32,
          "double": np.float64, "halffloat": np.float16}
"""Arrow's names of the fixed-width number types NumPy reads as they are."""


def numbers(values: Any) -> np.ndarray:
    """A ``pyarrow.Array`` or ``ChunkedArray`` of fixed-width numbers without NULLs as a NumPy array ``(n,)`` (a
    copy only when there are several chunks); anything else (NULLs, booleans, text, lists, decimals) as pyarrow's
    ``to_numpy(zero_copy_only=False)`` makes it."""
    chunks = values.chunks if hasattr(values, "chunks") else [values]
    dtype = _FIXED.get(str(values.type))
    if dtype is None or any(c.null_count for c in chunks):
        return values.to_numpy() if hasattr(values, "chunks") else values.to_numpy(zero_copy_only=False)
    parts = [np.frombuffer(c.buffers()[1], dtype=dtype, count=len(c) + c.offset)[c.offset:] for c in chunks]
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
