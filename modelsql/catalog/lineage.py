"""Where model versions came from (``modelsql.model_origins`` and the ``modelsql.lineage`` view; see
:mod:`modelsql.catalog.schema`), as MLflow's registry keeps the run that produced a version. :class:`Lineage` is
reached as ``Catalog.lineage``; it runs its SQL through :meth:`Catalog.query` and never begins or commits."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["Origin", "Lineage", "ORIGINS"]

ORIGINS = ("file", "bytes", "object", "python", "query", "study", "finetune", "cost_model")
"""What a version can come from (the table's CHECK)."""


@dataclass(frozen=True)
class Origin:
    """Where one version came from.

    Attributes:
        origin: one of :data:`ORIGINS`.
        source: the file path, the object's class (``sklearn:Pipeline``), the Python reference, the training
            query, or the statement that made it.
        digest: ``sha256:<hex>`` of the file or bytes read, ``rows:<count>:<hash>`` of a query's rows; or None.
        study, trial: the study and trial a version made FROM STUDY comes from.
        parent_kind, parent_name, parent_version: the catalog object it was made from (FINETUNE's pipeline).
    """

    origin: str
    source: str
    digest: Optional[str] = None
    study: Optional[str] = None
    trial: Optional[int] = None
    parent_kind: Optional[str] = None
    parent_name: Optional[str] = None
    parent_version: Optional[int] = None


class Lineage:
    """The origins of one :class:`~modelsql.catalog.Catalog`'s model versions."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def add(self, name: str, version: int, origin: Origin) -> None:
        """Record the origin of a new version. Runs in the caller's transaction (the version's own)."""
        self._catalog.check_writable()
        self._catalog.query(
            "INSERT INTO {s}.model_origins VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [name, version, origin.origin, origin.source, origin.digest, origin.study, origin.trial,
             origin.parent_kind, origin.parent_name, origin.parent_version, _dt.datetime.now(_dt.timezone.utc)])

    def of(self, name: str, version: int) -> Optional[Origin]:
        """The origin recorded for that version (None for one made before catalog schema 11)."""
        rows = self._catalog.query(
            "SELECT origin, source, digest, study, trial, parent_kind, parent_name, parent_version "
            "FROM {s}.model_origins WHERE name = ? AND version = ?", [name, version])
        return Origin(*rows[0]) if rows else None

    def forget(self, name: str, version: Optional[int] = None) -> None:
        """Delete the origins of a dropped model (every version, or ``version``)."""
        where, params = ("", []) if version is None else (" AND version = ?", [version])
        self._catalog.query("DELETE FROM {s}.model_origins WHERE name = ?" + where, [name, *params])
