"""Model aliases (``modelsql.model_aliases``; see :mod:`modelsql.catalog.schema`): names of a model's versions,
as MLflow's registry aliases (``@champion``). :class:`Aliases` is reached as ``Catalog.aliases``; it runs its
SQL through :meth:`Catalog.query` and never begins or commits."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Optional

from modelsql.errors import ProgrammingError, did_you_mean

__all__ = ["Aliases"]

_RESERVED = re.compile(r"^(latest|v(\d+))$", re.I)
"""The alias names MLflow's registry reserves for versions (``models:/m/latest``): ``latest`` and ``v1``, ``v2`` ..."""


class Aliases:
    """The aliases of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def set(self, name: str, alias: str, version: int) -> None:
        """Point ``alias`` of model ``name`` at ``version`` (moving it if it named another). Runs in the caller's
        transaction; the caller checked that the version exists."""
        self._catalog.check_writable()
        self._catalog.query("DELETE FROM {s}.model_aliases WHERE name = ? AND alias = ?", [name, alias])
        self._catalog.query("INSERT INTO {s}.model_aliases VALUES (?, ?, ?, ?)",
                            [name, alias, version, _dt.datetime.now(_dt.timezone.utc)])

    def drop(self, name: str, alias: str) -> bool:
        """Remove ``alias`` of model ``name``; whether it was there."""
        self._catalog.check_writable()
        found = bool(self.of(name).get(alias))
        self._catalog.query("DELETE FROM {s}.model_aliases WHERE name = ? AND alias = ?", [name, alias])
        return found

    def of(self, name: str) -> dict[str, int]:
        """Alias -> version, of model ``name``."""
        return dict(self._catalog.query("SELECT alias, version FROM {s}.model_aliases WHERE name = ? ORDER BY alias",
                                        [name]))

    def resolve(self, name: str, alias: str) -> Optional[int]:
        """The version ``alias`` of model ``name`` names: one set with ``SET ALIAS``, or one of the names MLflow's
        registry reserves for versions, which no alias may take: ``latest`` (None: the latest version, whichever
        it is when the statement runs) and ``v<n>`` (version ``n``).

        Raises:
            ProgrammingError: ``alias_not_found``, naming the model's aliases (with a "did you mean").
        """
        reserved = _RESERVED.match(alias)
        if reserved is not None:
            return None if reserved.group(2) is None else int(reserved.group(2))
        known = self.of(name)
        version: Optional[int] = known.get(alias.lower())
        if version is None:
            listed = ", ".join(f"{a} (version {v})" for a, v in known.items()) or "none"
            raise ProgrammingError(f'Model "{name}" has no alias "{alias}".{did_you_mean(alias, list(known))} '
                                   f"Its aliases: {listed}.", code="alias_not_found")
        return version

    def forget(self, name: str, version: Optional[int] = None) -> None:
        """Remove the aliases of a dropped model (every version, or ``version``)."""
        where, params = ("", []) if version is None else (" AND version = ?", [version])
        self._catalog.query("DELETE FROM {s}.model_aliases WHERE name = ?" + where, [name, *params])
