"""Arrow columns as NumPy arrays without importing pandas.

pyarrow's ``to_numpy`` imports pandas on its first call in a process (0.27 s on a 2-core machine), and a
study in a fresh process pays it before anything trains; a study's columns are plain numbers, booleans or
text, which convert from their Arrow buffers directly. The arrays equal ``column.to_numpy(zero_copy_only=False)``
value for value and dtype for dtype; decimals and other types go through ``to_numpy`` itself.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["column_numpy"]


def column_numpy(column) -> np.ndarray:
    """``column`` (a ``pa.ChunkedArray`` or ``pa.Array`` without NULLs: the caller checked) as a NumPy array:
    integers and floats in their own dtype, booleans as ``bool``, text as ``object`` (Python ``str``), anything else
    as pyarrow's ``to_numpy`` gives."""
    kind = column.type
    if pa.types.is_boolean(kind):
        return _primitive(pc.cast(column, pa.uint8()), np.dtype(np.uint8)).astype(bool)
    if pa.types.is_integer(kind):
        return _primitive(column, np.dtype(f"{'u' if pa.types.is_unsigned_integer(kind) else ''}int{kind.bit_width}"))
    if pa.types.is_floating(kind):
        return _primitive(column, np.dtype(f"float{kind.bit_width}"))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        out = np.empty(len(column), dtype=object)
        out[:] = column.to_pylist()
        return out
    return column.to_numpy(zero_copy_only=False)


def _primitive(column, dtype: np.dtype) -> np.ndarray:
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [np.frombuffer(chunk.buffers()[1], dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)
             for chunk in chunks if len(chunk)]
    return np.concatenate(parts) if parts else np.empty(0, dtype)
