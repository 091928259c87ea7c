"""Typed reads and writes of pipelines in the catalog (``modelsql.pipeline_versions``,
``pipeline_steps``, ``pipeline_feeds``; see :mod:`modelsql.catalog.schema`).

A pipeline version is a list of steps, each a catalog model version, and for
each step input what feeds it (PRETZEL's white-box pipeline: Lee et al., OSDI
2018). :class:`Pipelines` is reached as ``Catalog.pipelines``; it runs its SQL
through :meth:`Catalog.query` and never begins or commits (the caller holds the
transaction, as for models).
"""

from __future__ import annotations

import datetime as _dt
from typing import Optional

from modelsql import errors
from modelsql.catalog.entries import PipelineStep, PipelineVersion, StepFeed
from modelsql.catalog.evaluations import latest_evaluation_sql

__all__ = ["Pipelines"]


class Pipelines:
    """The pipelines of one :class:`~modelsql.catalog.Catalog`.

    Names are case-insensitive and stored lower case; a pipeline and a model may
    share a name (``PREDICT(PIPELINE p ...)`` and ``PREDICT(MODEL p ...)`` say which).
    """

    def __init__(self, catalog) -> None:
        self._catalog = catalog

    def _rows(self, sql: str, params=()) -> list[tuple]:
        return self._catalog.query(sql, params)

    # ------------------------------------------------------------------ reads

    def names(self) -> list[str]:
        """Names of all pipelines (lower case), sorted."""
        if not self._catalog.present:
            return []
        return [r[0] for r in self._rows("SELECT DISTINCT name FROM {s}.pipeline_versions ORDER BY name")]

    def versions(self, name: str) -> list[int]:
        """The versions of pipeline ``name``, ascending; ``[]`` when it does not exist."""
        if not self._catalog.present:
            return []
        rows = self._rows("SELECT version FROM {s}.pipeline_versions WHERE name = ? ORDER BY version",
                          [name.lower()])
        return [r[0] for r in rows]

    def resolve(self, name: str, version: Optional[int]) -> tuple[str, int]:
        """(stored name, existing version).

        Raises:
            ProgrammingError: ``"pipeline_not_found"`` (with a "Did you mean" over pipeline names),
                ``"version_not_found"`` (listing the versions).
        """
        key = name.lower()
        existing = self.versions(key)
        if not existing and key and self._catalog.exists(key):
            raise errors.ProgrammingError(
                f'Pipeline "{name}" does not exist, but a model of that name does: name it MODEL {name} '
                f"(PREDICT(MODEL {name}, TABLE t), DESCRIBE MODEL {name}).", code="pipeline_not_found")
        if not existing:
            raise errors.ProgrammingError(
                f'Pipeline "{name}" does not exist.' + errors.did_you_mean(name, self.names()),
                code="pipeline_not_found",
            )
        if version is None:
            return key, existing[-1]
        if version not in existing:
            raise errors.ProgrammingError(
                f'Pipeline "{key}" has no version {version}. Existing versions: '
                + ", ".join(map(str, existing)) + ".",
                code="version_not_found",
            )
        return key, version

    def get(self, name: str, version: Optional[int] = None, *, models: Optional[dict] = None) -> PipelineVersion:
        """Read one pipeline version, its steps' model versions included.

        ``models``: ``{(model, version): ModelVersion}`` already read in the caller's transaction,
        filled with what is read here (one statement reading many pipelines that share steps reads
        each step model once).

        Raises:
            ProgrammingError: see :meth:`resolve`.
        """
        with self._catalog.snapshot():
            return self._get(name, version, models)

    def _get(self, name: str, version: Optional[int], models: Optional[dict]) -> PipelineVersion:
        key, version = self.resolve(name, version)
        digest, source, options, created_at = self._rows(
            "SELECT digest, source, options, created_at FROM {s}.pipeline_versions WHERE name = ? AND version = ?",
            [key, version],
        )[0]
        feeds: dict[int, list[StepFeed]] = {}
        for position, inp, from_step, from_name in self._rows(
            "SELECT f.position, f.input, f.from_step, f.from_name FROM {s}.pipeline_feeds AS f "
            "JOIN {s}.pipeline_steps AS st USING (name, version, position) "
            "JOIN {s}.model_inputs AS i ON i.name = st.model AND i.version = st.model_version "
            "AND i.tensor_name = f.input WHERE f.name = ? AND f.version = ? ORDER BY f.position, i.position",
            [key, version],
        ):
            feeds.setdefault(position, []).append(StepFeed(inp, from_step, from_name))
        models = {} if models is None else models

        def model_version(model: str, v: int):
            if (model, v) not in models:
                models[(model, v)] = self._catalog.get(model, v)
            return models[(model, v)]

        steps = tuple(
            PipelineStep(position, step, model_version(model, mv), tuple(feeds.get(position, ())))
            for position, step, model, mv in self._rows(
                "SELECT position, step, model, model_version FROM {s}.pipeline_steps "
                "WHERE name = ? AND version = ? ORDER BY position",
                [key, version],
            )
        )
        return PipelineVersion(
            name=key, version=version, steps=steps, digest=digest, source=source,
            options=tuple((str(k), str(v)) for k, v in (options or {}).items()),
            created_at=created_at.astimezone(_dt.timezone.utc) if created_at is not None else None,
        )

    def using_model(self, model: str, version: Optional[int] = None) -> list[str]:
        """``'p version 2'`` for each pipeline version with a step on ``model`` (any version, or ``version``)."""
        if not self._catalog.present:
            return []
        sql = "SELECT DISTINCT name, version FROM {s}.pipeline_steps WHERE model = ?"
        params: list = [model.lower()]
        if version is not None:
            sql += " AND model_version = ?"
            params.append(version)
        return [f"{n} version {v}" for n, v in self._rows(sql + " ORDER BY name, version", params)]

    # ----------------------------------------------------------------- writes

    def next_version(self, name: str) -> int:
        """One more than the highest version ``name`` was ever given (1 for a new name): a dropped
        version's number is never given again (``modelsql.version_marks``)."""
        if not self._catalog.present:
            return 1
        return self._catalog.version_mark("pipeline", name) + 1

    def add(self, pv: PipelineVersion) -> None:
        """Insert a pipeline version (its row, steps and feeds) in the caller's transaction.

        Raises:
            IntegrityError: ``"version_conflict"`` when ``pv.version`` is not :meth:`next_version`.
        """
        self._catalog.check_writable()
        key = pv.name.lower()
        expected = self.next_version(key)
        if pv.version != expected:
            raise errors.IntegrityError(
                f'Cannot add version {pv.version} of pipeline "{key}": the next version is {expected}.',
                code="version_conflict",
            )
        created = pv.created_at or _dt.datetime.now(_dt.timezone.utc)
        self._rows(
            "INSERT INTO {s}.pipeline_versions VALUES (?, ?, ?, ?, map(?::VARCHAR[], ?::VARCHAR[]), ?)",
            [key, pv.version, pv.digest, pv.source, [k for k, _ in pv.options], [v for _, v in pv.options], created],
        )
        for step in pv.steps:
            self._rows("INSERT INTO {s}.pipeline_steps VALUES (?, ?, ?, ?, ?, ?)",
                       [key, pv.version, step.position, step.name, step.model.name, step.model.version])
            for f in step.feeds:
                self._rows("INSERT INTO {s}.pipeline_feeds VALUES (?, ?, ?, ?, ?, ?)",
                           [key, pv.version, step.position, f.input, f.from_step, f.from_name])
        self._catalog.raise_version_mark("pipeline", key, pv.version)

    def drop(self, name: str, version: Optional[int] = None, *, missing_ok: bool = False) -> int:
        """Delete a pipeline (every version) or one version; the step models stay.

        Returns:
            the number of pipeline versions removed.

        Raises:
            ProgrammingError: see :meth:`resolve` (unless ``missing_ok``).
        """
        self._catalog.check_writable()
        try:
            key, resolved = self.resolve(name, version)
        except errors.ProgrammingError:
            if missing_ok:
                return 0
            raise
        where, params = ("name = ?", [key]) if version is None else ("name = ? AND version = ?", [key, resolved])
        removed = len(self.versions(key)) if version is None else 1
        self._catalog.raise_version_mark("pipeline", key, self._catalog.version_mark("pipeline", key))
        for table in ("pipeline_feeds", "pipeline_steps", "pipeline_versions"):
            self._rows(f"DELETE FROM {{s}}.{table} WHERE {where}", params)
        self._catalog.evaluations.forget("pipeline", key, None if version is None else resolved)
        return removed

    # ----------------------------------------------------------- SQL for users

    def show_sql(self) -> str:
        """SQL for ``SHOW PIPELINES``: name, version (latest), versions, steps (count), step_list
        (``'tfidf (tfidf v1) -> head (head v2)'``), digest, source, created_at; ordered by name."""
        return ("SELECT name, version, versions, steps, step_list, digest, source, created_at "
                "FROM {s}.pipelines ORDER BY name").replace("{s}", self._catalog.qualified_schema)

    def describe_rows(self, pv: PipelineVersion) -> list[tuple]:
        """Rows of ``DESCRIBE PIPELINE``: (role, position, name, elem_type, shape, detail).

        One row per pipeline input, one per step (``detail``: the model version and what feeds
        each of its inputs), one per pipeline output, then one per option (``description``, and for
        an imported pipeline ``conversion_check``: rows compared end to end, largest absolute
        difference, label mismatches), then one per metric of its latest EVALUATE (as DESCRIBE MODEL's).
        """
        rows: list[tuple] = []
        for i, spec in enumerate(pv.inputs):
            rows.append(("input", i, spec.name, spec.elem_type, _shape(spec.shape), None))
        for step in pv.steps:
            fed = ", ".join(
                f"{f.input} <- " + (f"pipeline input {f.from_name}" if f.from_step is None
                                    else f"{pv.steps[f.from_step].name}.{f.from_name}")
                for f in step.feeds
            )
            rows.append(("step", step.position, step.name, None, None,
                         f"model {step.model.name} version {step.model.version}; {fed}"))
        for i, spec in enumerate(pv.outputs):
            rows.append(("output", i, spec.name, spec.elem_type, _shape(spec.shape), None))
        for i, (key, value) in enumerate(pv.options):
            rows.append(("property", i, key, None, None, value))
        evaluated = self._rows(f"SELECT * FROM ({latest_evaluation_sql(self._catalog.qualified_schema, 'pipeline')}) "
                               "ORDER BY 3", [pv.name, pv.version])
        rows.extend((role, position, name, elem_type, shape, detail)
                    for role, _, position, name, elem_type, shape, detail in evaluated)
        return rows


def _shape(shape) -> Optional[str]:
    if shape is None:
        return None
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
