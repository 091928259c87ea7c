"""The code signatures of a catalog (``modelsql.code_signatures``; see :mod:`modelsql.catalog.schema`).

One row says: the key ``key_id`` signed the code artifact of ``kind`` (``python``, ``trainable`` or
``compiled``) whose SHA-256 is ``digest``. Rows are keyed by content, not by model: a signed program stays
trusted under a new version or name, and a row copied into another file trusts the very same bytes only.
Whether a row verifies is decided by :mod:`modelsql.engine.artifacts.trust` with the user's key; this module only
reads and writes rows. :class:`CodeSignatures` runs its SQL through :meth:`Catalog.query` and never
begins or commits.
"""

from __future__ import annotations

import datetime as _dt

__all__ = ["CodeSignatures", "KINDS"]

KINDS = ("python", "trainable", "compiled")
"""The kinds of code artifact a row may sign."""


class CodeSignatures:
    """The code signatures of one :class:`~modelsql.catalog.Catalog` (``catalog``)."""

    def __init__(self, catalog) -> None:
        self._catalog = catalog

    def of(self, kind: str, digest: str) -> list[tuple[str, str]]:
        """``(key_id, signature)`` of every row for ``kind`` and ``digest`` (empty when the catalog is absent)."""
        if not self._catalog.present:
            return []
        return [(r[0], r[1]) for r in self._catalog.query(
            "SELECT key_id, signature FROM {s}.code_signatures WHERE kind = ? AND digest = ?", [kind, digest])]

    def add(self, kind: str, digest: str, key_id: str, signature: str, subject: str) -> bool:
        """Record a signature unless the same key already signed ``kind`` and ``digest``; whether a row was added.

        Raises:
            OperationalError: ``read_only``.
        """
        self._catalog.check_writable()
        if any(k == key_id and s == signature for k, s in self.of(kind, digest)):
            return False
        self._catalog.query(
            "INSERT INTO {s}.code_signatures (digest, kind, key_id, signature, subject, signed_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [digest, kind, key_id, signature, subject, _dt.datetime.now(_dt.timezone.utc)])
        return True
