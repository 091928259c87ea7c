"""Model families (equal architecture fingerprints) and the cache of their merged graphs
(``modelsql.families``, ``modelsql.merged_graphs``; see :mod:`modelsql.catalog.schema`).

A family is the set of models whose latest versions have one architecture
fingerprint: fine-tuned copies of one network, which NetFuse (Jeong et al., 2020)
merges into one graph. :class:`Families` is reached as ``Catalog.families``; it
runs its SQL through :meth:`Catalog.query` and never begins or commits.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Optional

from modelsql import errors

__all__ = ["Families", "MergedGraph"]

_MIN_PREFIX = 8


@dataclass(frozen=True)
class MergedGraph:
    """One cached merged graph.

    Attributes:
        merge_key: SHA-256 of the ordered members, their content digests and the layout.
        members: ``name:version`` of each member, in merge order.
        layout: ``"stacked"`` or ``"shared"``.
        graph_digest, graph_bytes: the merged graph's blob and its size in bytes.
        max_rel_diff: largest relative difference to the separate members on the checked rows.
        merge_seconds: seconds the rewrite and its check took.
    """

    merge_key: str
    members: tuple[str, ...]
    layout: str
    graph_digest: str
    graph_bytes: int
    max_rel_diff: Optional[float]
    merge_seconds: Optional[float]


class Families:
    """The families and merged graphs of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog) -> None:
        self._catalog = catalog

    def _rows(self, sql: str, params=()) -> list[tuple]:
        return self._catalog.query(sql, params)

    def members(self, family: str) -> list[str]:
        """Names of the models in ``family``, oldest first.

        ``family`` is a model name (the family of its latest version: every model whose latest
        version has the same fingerprint) or a prefix of at least 8 hex digits of a fingerprint.

        Raises:
            ProgrammingError: ``"family_not_found"`` (with the families there are), or
                ``"model_without_fingerprint"`` (imported before catalog schema 4).
        """
        if not self._catalog.present:
            raise self._not_found(family)
        row = self._rows("SELECT fingerprint FROM {s}.models WHERE name = ?", [family.lower()])
        if row:
            if row[0][0] is None:
                raise errors.ProgrammingError(
                    f'Model "{family.lower()}" has no architecture fingerprint (imported before catalog '
                    "schema 4): re-import it (CREATE OR REPLACE MODEL) to put it in a family.",
                    code="model_without_fingerprint")
            fingerprint = row[0][0]
        else:
            found = self._rows("SELECT fingerprint FROM {s}.families WHERE starts_with(fingerprint, ?)",
                               [family.lower()]) if len(family) >= _MIN_PREFIX else []
            if len(found) != 1:
                raise self._not_found(family)
            fingerprint = found[0][0]
        rows = self._rows("SELECT name FROM {s}.models WHERE fingerprint = ? ORDER BY created_at, name",
                          [fingerprint])
        return [r[0] for r in rows]

    def _not_found(self, family: str) -> errors.ProgrammingError:
        names = [r[0] for r in self._rows("SELECT family FROM {s}.families ORDER BY family")] \
            if self._catalog.present else []
        known = ("Families: " + ", ".join(names) + ".") if names else "There are no model families."
        return errors.ProgrammingError(
            f'Model family "{family}" does not exist: name a model (its family) or a fingerprint prefix '
            f"of at least {_MIN_PREFIX} hex digits. {known}", code="family_not_found")

    # ---------------------------------------------------------- merged graphs
    def merged(self, merge_key: str) -> Optional[MergedGraph]:
        """The cached merged graph under ``merge_key``, or None."""
        if not self._catalog.present:
            return None
        rows = self._rows("SELECT merge_key, members, layout, graph_digest, graph_bytes, max_rel_diff, "
                          "merge_seconds FROM {s}.merged_graphs WHERE merge_key = ?", [merge_key])
        if not rows:
            return None
        key, members, layout, digest, nbytes, diff, seconds = rows[0]
        return MergedGraph(key, tuple(members), layout, digest, nbytes, diff, seconds)

    def add_merged(self, graph: MergedGraph) -> None:
        """Record a merged graph (its blob is already in the store); registers the graph blob."""
        self._catalog.check_writable()
        self._rows("DELETE FROM {s}.merged_graphs WHERE merge_key = ?", [graph.merge_key])
        self._rows("INSERT INTO {s}.merged_graphs VALUES (?, ?::VARCHAR[], ?, ?, ?, ?, ?, ?)",
                   [graph.merge_key, list(graph.members), graph.layout, graph.graph_digest, graph.graph_bytes,
                    graph.max_rel_diff, graph.merge_seconds, _dt.datetime.now(_dt.timezone.utc)])
        self._rows("INSERT INTO {s}.blobs SELECT ?, ?, 'graph' WHERE NOT EXISTS "
                   "(SELECT 1 FROM {s}.blobs WHERE digest = ?)",
                   [graph.graph_digest, graph.graph_bytes, graph.graph_digest])

    def forget_model(self, name: str) -> None:
        """Drop the cached merged graphs that have a version of model ``name`` as a member."""
        self._rows("DELETE FROM {s}.merged_graphs WHERE len(list_filter(members, lambda m: "
                   "split_part(m, ':', 1) = ?)) > 0", [name.lower()])

    def merged_digests(self) -> set[str]:
        """Digests of the merged graphs' blobs."""
        if not self._catalog.present:
            return set()
        return {r[0] for r in self._rows("SELECT graph_digest FROM {s}.merged_graphs")}
