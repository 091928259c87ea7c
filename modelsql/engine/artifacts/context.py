"""What the artifacts package may ask of the statement's session: :class:`ArtifactContext`.

The artifacts package never imports the session (``tests/engine/test_layout.py``): it is handed an object
that satisfies this protocol (:class:`modelsql.engine.session.Session` does; so must the query package's
planning context, which passes itself on when it asks for a session, a compiled library or a merged graph).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from modelsql.catalog import Catalog
    from modelsql.storage.blobstore import BlobStore

__all__ = ["ArtifactContext", "PythonPolicy"]


class ArtifactContext(Protocol):
    """The catalog and the store a version's artifacts are read from, and whether code stored in the
    database may be loaded (:mod:`modelsql.engine.artifacts.trust`)."""

    catalog: "Catalog"
    store: "BlobStore"
    trust_code: bool
    """Load every code artifact without a signature (``connect(..., trust_code=True)``)."""
    read_only: bool
    """The connection refuses writes (TRUST MODEL cannot record a signature: the refusal says so)."""


class PythonPolicy(Protocol):
    """Whether statements that name Python code may run (``connect(..., allow_python=False)``)."""

    allow_python: bool
