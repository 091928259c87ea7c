"""Tags on models and versions (``modelsql.model_tags``; see :mod:`modelsql.catalog.schema`), as MLflow's registry
tags: free ``key = 'value'`` notes (``stage = 'staging'``, ``owner = 'ana'``). Version 0 tags the model itself.
:class:`Tags` is reached as ``Catalog.tags``; it runs its SQL through :meth:`Catalog.query` and never begins or
commits."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Optional

__all__ = ["Tags", "MODEL"]

MODEL = 0
"""The version number of a tag on the model rather than on one version."""


class Tags:
    """The tags of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def set(self, name: str, version: int, tag: str, value: str) -> None:
        """Set ``tag`` of model ``name`` (``version`` :data:`MODEL` for the model) to ``value``, replacing it."""
        self._catalog.check_writable()
        self._catalog.query("DELETE FROM {s}.model_tags WHERE name = ? AND version = ? AND tag = ?",
                            [name, version, tag])
        self._catalog.query("INSERT INTO {s}.model_tags VALUES (?, ?, ?, ?, ?)",
                            [name, version, tag, value, _dt.datetime.now(_dt.timezone.utc)])

    def drop(self, name: str, version: int, tag: str) -> bool:
        """Remove ``tag``; whether it was there."""
        self._catalog.check_writable()
        found = tag in self.of(name, version)
        self._catalog.query("DELETE FROM {s}.model_tags WHERE name = ? AND version = ? AND tag = ?",
                            [name, version, tag])
        return found

    def of(self, name: str, version: int) -> dict[str, str]:
        """Tag -> value, of the model (``version`` :data:`MODEL`) or one version."""
        return dict(self._catalog.query("SELECT tag, value FROM {s}.model_tags WHERE name = ? AND version = ? "
                                        "ORDER BY tag", [name, version]))

    def forget(self, name: str, version: Optional[int] = None) -> None:
        """Delete the tags of a dropped model (all, the model's too) or of one dropped version."""
        where, params = ("", []) if version is None else (" AND version = ?", [version])
        self._catalog.query("DELETE FROM {s}.model_tags WHERE name = ?" + where, [name, *params])
