"""Length-prefixed pickled messages between the study's process and its local training workers
(:mod:`modelsql.tuning.worker`)."""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any, Optional

__all__ = ["write_message", "read_message"]

_HEADER = struct.Struct("!Q")
def write_message(stream: IO[bytes], message: Any) -> None:
    """Write one length-prefixed pickled message and flush."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def read_message(stream: IO[bytes]) -> Optional[Any]:
    """Read one message; None at end of stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return pickle.loads(payload)
