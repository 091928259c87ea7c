"""Content-addressed storage for tensors, graphs, compiled artifacts and checkpoints.

See docs/architecture.md and :mod:`modelsql.storage.blobstore`.
"""

from modelsql.storage.blobstore import (
    PENDING_GRACE_SECONDS,
    STALE_TEMP_SECONDS,
    TEMP_PREFIX,
    BlobCorruptError,
    BlobMissingError,
    BlobStore,
    for_database,
)

__all__ = [
    "BlobStore",
    "BlobCorruptError",
    "BlobMissingError",
    "for_database",
    "STALE_TEMP_SECONDS",
    "PENDING_GRACE_SECONDS",
    "TEMP_PREFIX",
]
