"""Typed reads and writes of the modelsql catalog (the ``modelsql`` schema in the user's DuckDB).

:class:`Catalog` is the only code in modelsql that runs SQL against the catalog
tables (see :mod:`modelsql.catalog.schema` for the tables and views). It turns
:class:`~modelsql.catalog.entries.ModelVersion` values into rows and back, keeps
referential integrity in code (DuckDB foreign keys would block deletes), and turns
every DuckDB exception raised by its own SQL into the modelsql PEP 249 error of the
matching class.

Blobs: the catalog records which content-addressed blobs it references
(``modelsql.blobs``) so that the storage layer can garbage-collect the rest; the
blobs themselves are written by :mod:`modelsql.storage` *before* the catalog
transaction that references them commits (PRETZEL's Object Store keeps identical
parameters once; ``modelsql.storage`` shows the dedup ratio).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import operator
import re
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import duckdb

from modelsql import duckdb_errors, errors
from modelsql.catalog import schema, template
from modelsql.catalog.entries import Dim, ModelVersion, StoredTensor, TensorSpec
from modelsql.catalog.families import Families
from modelsql.catalog.studies import Studies
from modelsql.catalog.compiled import Compiled
from modelsql.catalog.aliases import Aliases
from modelsql.catalog.evaluations import Evaluations, latest_evaluation_sql
from modelsql.catalog.lineage import Lineage
from modelsql.catalog.tags import Tags
from modelsql.catalog.traces import Traces
from modelsql.catalog.version_cache import VersionCache
from modelsql.catalog.pipelines import Pipelines

BLOB_KINDS = ("graph", "tensor")

PROGRAM_PROPERTIES = ("python", "execution", "batching", "whole_graph", "graph_breaks", "suggestion", "timing")
"""Options of a model imported FROM PYTHON that DESCRIBE MODEL lists as properties (where present): the
reference, how it runs (``whole_graph``, ``coexecute``, ``eager``), the safety gate's verdict, the graphs
torch.compile captured, a rewrite that would make it one graph, and the timing behind the choice."""

TRAINING_PROPERTIES = ("model_type", "estimator", "hyperparameters", "target", "query", "study", "trial",
                       "validation", "validation_size", "seed", "training_rows", "validation_rows", "rows_skipped",
                       "fit_seconds", "description", "transform", "imputed")
"""Options of a model trained by ``CREATE MODEL ... AS SELECT`` (or made ``FROM STUDY``) that DESCRIBE MODEL lists as
properties (where present): what was trained, on which query's rows (or the study and trial), how they were split,
how long reading and fitting took, its ``TRANSFORM`` clause and the columns whose NULLs it imputes (JSON)."""

_OPTION_PROPERTIES = PROGRAM_PROPERTIES + TRAINING_PROPERTIES

_INT_RE = re.compile(r"^-?[0-9]+$")

# The one DuckDB -> PEP 249 map (modelsql.duckdb_errors), in its catalog flavour: DuckDB's text prefixed
# "Catalog error:", a missing table code "catalog_object_missing", a binder error "catalog_binder_error".
convert_duckdb_error = duckdb_errors.translate_catalog


@contextlib.contextmanager
def _converted() -> Iterator[None]:
    """Turn DuckDB exceptions raised inside the block into modelsql errors (no duckdb traceback)."""
    try:
        yield
    except duckdb.Error as exc:
        raise convert_duckdb_error(exc) from None


def _dim_text(dim: Dim) -> str:
    """One shape entry as stored: the int as text, the symbolic name, or '?' for unknown."""
    if dim is None:
        return "?"
    if isinstance(dim, bool):
        raise errors.DataError(f"Invalid shape dimension {dim!r}.", code="invalid_shape")
    if isinstance(dim, int):
        return str(dim)
    if isinstance(dim, str):
        if dim in ("", "?"):
            return "?"  # an empty or '?' symbolic name says nothing: stored (and read back) as unknown
        if _INT_RE.match(dim):
            raise errors.DataError(
                f"Symbolic dimension {dim!r} cannot be stored: it would read back as a fixed size.",
                code="invalid_shape",
            )
        return dim
    try:
        return str(operator.index(dim))
    except TypeError:
        raise errors.DataError(f"Invalid shape dimension {dim!r}.", code="invalid_shape") from None


def _dim_value(text: str) -> Dim:
    if text == "?":
        return None
    if _INT_RE.match(text):
        return int(text)
    return text


def _shape_value(shape: Optional[Sequence[str]]) -> Optional[tuple[Dim, ...]]:
    return None if shape is None else tuple(_dim_value(d) for d in shape)


_SPECS = ("(SELECT list({{'n': tensor_name, 'e': elem_type, 's': shape}} ORDER BY position) FROM {{s}}.{table} "
          "WHERE name = $1 AND version = $2)")
"""A version's inputs or outputs (``table``), in order, as a list of structs in the version's row (``$1`` its
model's name, ``$2`` its number: a subquery correlated to the row instead is ten times slower)."""

_TENSORS = ("(SELECT list({'n': tensor_name, 'd': digest, 'e': elem_type, 's': dims, 'b': nbytes} ORDER BY position) "
            "FROM {s}.model_tensors WHERE name = $1 AND version = $2)")
"""A version's stored tensors, in order, as a list of structs in the version's row."""

_STAMP = ("SELECT version, created_at, graph_digest, content_digest FROM {s}.model_versions WHERE name = ? "
          "AND version = ?")
"""A version's stamp (:mod:`modelsql.catalog.version_cache`): its number, ``created_at`` and digests."""

_LATEST_STAMP = ("SELECT max(version), arg_max(created_at, version), arg_max(graph_digest, version), "
                 "arg_max(content_digest, version) FROM {s}.model_versions WHERE name = ?")
"""The latest version's stamp (a NULL number where the model has none; an aggregate: faster than a top-1 sort)."""


def _spec_values(specs: Optional[Sequence[dict]]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(name=s["n"], elem_type=s["e"], shape=_shape_value(s["s"])) for s in specs or ())


def _shape_text(shape: Optional[Sequence[Dim]]) -> Optional[list[str]]:
    return None if shape is None else [_dim_text(d) for d in shape]


def _utc(ts: Optional[_dt.datetime]) -> _dt.datetime:
    if ts is None:
        return _dt.datetime.now(_dt.timezone.utc)
    if ts.tzinfo is None:
        return ts.replace(tzinfo=_dt.timezone.utc)
    return ts.astimezone(_dt.timezone.utc)


def _normalize_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise errors.ProgrammingError(f"Invalid model name {name!r}.", code="invalid_name")
    return name.lower()


def _normalize_version(version: Any) -> int:
    if isinstance(version, bool):
        raise errors.ProgrammingError(f"Invalid model version {version!r}.", code="invalid_version")
    try:
        return operator.index(version)
    except TypeError:
        raise errors.ProgrammingError(
            f"Invalid model version {version!r}: expected an integer.", code="invalid_version"
        ) from None


_ORIGIN_AND_TAGS_SQL = (
    "SELECT 'origin', 4, 0, o.origin, NULL, NULL, concat_ws(', ', o.source, o.digest, "
    "CASE WHEN o.study IS NOT NULL THEN 'study ' || o.study || ' trial ' || o.trial END, "
    "CASE WHEN o.parent_name IS NOT NULL THEN o.parent_kind || ' ' || o.parent_name || ' version ' "
    "|| o.parent_version END) FROM {s}.model_origins AS o WHERE o.name = ? AND o.version = ? "
    "UNION ALL SELECT 'tag', 5, (row_number() OVER (ORDER BY t.version, t.tag) - 1)::INTEGER, t.tag, NULL, NULL, "
    "t.value || CASE WHEN t.version = 0 THEN ' (the model''s)' ELSE '' END "
    "FROM {s}.model_tags AS t WHERE t.name = ? AND t.version IN (0, ?)"
)
"""DESCRIBE MODEL's rows of a version's origin and of its tags and the model's (parameters: name, version, name,
version)."""


class Catalog:
    """The modelsql catalog stored in the schema ``modelsql`` of a DuckDB database.

    Opening (the constructor) checks the catalog's ``schema_version``:

    - no ``modelsql`` schema: create the whole catalog in one transaction; when
      ``read_only``, create nothing and behave as an empty catalog;
    - older than :attr:`SCHEMA_VERSION`: run :attr:`MIGRATIONS` in one transaction
      (``OperationalError`` ``"catalog_migration_required"`` when ``read_only``;
      ``InternalError`` ``"catalog_migration_missing"`` when a step is not registered);
    - newer: ``OperationalError`` ``"catalog_version_unsupported"``;
    - a ``modelsql`` schema without ``modelsql.meta``, without a parseable
      ``schema_version``, or missing catalog tables/views: ``OperationalError``
      ``"catalog_corrupt"``.

    Names are case-insensitive and stored lower case. Write methods
    (:meth:`add_version`, :meth:`drop`, :meth:`forget_blobs`) never begin or commit;
    run them inside :meth:`transaction` (or the caller's own transaction) so a
    multi-row write is atomic. Every DuckDB exception raised by catalog SQL is
    re-raised as the modelsql PEP 249 error of the matching class.

    Args:
        con: a DuckDB connection to the user's database. The catalog lives in that
            connection's current database (``current_database()`` at open time).
        read_only: never write. Also implied when the database is attached read-only.

    Raises:
        OperationalError, InternalError: see above.
    """

    SCHEMA_VERSION: int = schema.SCHEMA_VERSION
    MIGRATIONS = schema.MIGRATIONS  # the same dict object as schema.MIGRATIONS

    def __init__(self, con: duckdb.DuckDBPyConnection, *, read_only: bool = False) -> None:
        self._con = con
        with _converted():
            row = con.execute(
                "SELECT current_database(), readonly FROM duckdb_databases() "
                "WHERE database_name = current_database()"
            ).fetchone()
        assert row is not None  # duckdb_databases() always lists the current database
        self.database: str = row[0]
        """The DuckDB database (catalog) name the modelsql schema lives in."""
        self.read_only: bool = bool(read_only or row[1])
        self._s = f"{schema.quote_ident(self.database)}.{schema.SCHEMA}"
        self._present = False
        self._versions_read = VersionCache()
        self._open()
        self.pipelines = Pipelines(self)
        """The catalog's pipelines (:class:`~modelsql.catalog.pipelines.Pipelines`)."""
        self.families = Families(self)
        """The catalog's model families and merged graphs (:class:`~modelsql.catalog.families.Families`)."""
        self.traces = Traces(self)
        """The catalog's latency traces (:class:`~modelsql.catalog.traces.Traces`)."""
        self.compiled = Compiled(self)
        """The catalog's compiled artifacts (:class:`~modelsql.catalog.compiled.Compiled`)."""
        self.studies = Studies(self)
        """The catalog's trainables, studies, trials and stages (:class:`~modelsql.catalog.studies.Studies`)."""
        self.evaluations = Evaluations(self)
        """The catalog's recorded evaluations (:class:`~modelsql.catalog.evaluations.Evaluations`)."""
        self.aliases = Aliases(self)
        """The aliases of the catalog's model versions (:class:`~modelsql.catalog.aliases.Aliases`)."""
        self.lineage = Lineage(self)
        """Where the catalog's model versions came from (:class:`~modelsql.catalog.lineage.Lineage`)."""
        self.tags = Tags(self)
        """The tags of the catalog's models and versions (:class:`~modelsql.catalog.tags.Tags`)."""
        self._reap_studies()

    def _reap_studies(self) -> None:
        """Show studies whose TUNE died as ``interrupted`` (or lost ones as ``failed``) as soon as a writable
        connection opens the catalog (see :meth:`Studies.mark_interrupted`); a conflict with another
        connection doing the same is left to that one."""
        if not self._present or self.read_only:
            return
        try:
            with self.transaction():
                self.studies.mark_interrupted()
        except errors.Error:
            pass

    @property
    def qualified_schema(self) -> str:
        """The catalog schema as SQL, qualified with its database (``'"mydb".modelsql'``)."""
        return self._s

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run catalog SQL (``{s}`` stands for :attr:`qualified_schema`); DuckDB errors become PEP 249 ones."""
        return self._rows(sql, params)

    def check_writable(self) -> None:
        """Raises OperationalError ``"read_only"`` when the catalog is open read-only."""
        self._check_writable()

    # ------------------------------------------------------------------ opening

    @property
    def present(self) -> bool:
        """Whether the catalog schema exists (False only for a read-only open of a database without one)."""
        return self._present

    def _open(self) -> None:
        with _converted():
            exists = self._con.execute(
                "SELECT count(*) FROM duckdb_schemas() WHERE database_name = ? AND schema_name = ?",
                [self.database, schema.SCHEMA],
            ).fetchall()[0][0]
        if not exists:
            if self.read_only:
                self._present = False
                return
            with _converted():
                copied = not self.in_transaction() and template.copy_into(
                    self._con, self.database, type(self).SCHEMA_VERSION)
            if not copied:
                with self.transaction():
                    with _converted():
                        schema.create(self._con, self._s, type(self).SCHEMA_VERSION)
                with _converted():
                    template.learn(self._con, self.database, type(self).SCHEMA_VERSION)
            self._present = True
            return

        stored = self._stored_version()
        wanted = type(self).SCHEMA_VERSION
        if stored > wanted:
            from modelsql import __version__

            raise errors.OperationalError(
                f"The modelsql catalog in database {self.database!r} has schema version {stored}, "
                f"but this modelsql ({__version__}) supports schema version {wanted} at most. "
                "Upgrade modelsql to open this database.",
                code="catalog_version_unsupported",
            )
        if stored < wanted:
            if self.read_only:
                raise errors.OperationalError(
                    f"The modelsql catalog in database {self.database!r} has schema version {stored} "
                    f"and needs migrating to version {wanted}; open it once read-write to upgrade it.",
                    code="catalog_migration_required",
                )
            self._migrate(stored, wanted)
        self._check_objects()
        self._present = True

    def _stored_version(self) -> int:
        with _converted():
            has_meta = self._con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? "
                "AND table_name = 'meta'",
                [self.database, schema.SCHEMA],
            ).fetchall()[0][0]
        if not has_meta:
            raise errors.OperationalError(
                f'Schema "{schema.SCHEMA}" exists in database {self.database!r} but is not a modelsql '
                f"catalog (it has no {schema.SCHEMA}.meta table). Rename or drop that schema.",
                code="catalog_corrupt",
            )
        try:
            row = self._con.execute(
                f"SELECT value FROM {self._s}.meta WHERE key = 'schema_version'"
            ).fetchone()
        except duckdb.Error as exc:
            raise errors.OperationalError(
                f"The modelsql catalog is corrupt: cannot read {schema.SCHEMA}.meta ({exc}).",
                code="catalog_corrupt",
            ) from None
        value = None if row is None else row[0]
        try:
            return int(str(value).strip())
        except ValueError:
            raise errors.OperationalError(
                f"The modelsql catalog is corrupt: {schema.SCHEMA}.meta has schema_version "
                f"{value!r}, not an integer.",
                code="catalog_corrupt",
            ) from None

    def _migrate(self, stored: int, wanted: int) -> None:
        migrations = self.MIGRATIONS
        missing = [v for v in range(stored, wanted) if v not in migrations]
        if missing:
            raise errors.InternalError(
                f"No migration registered from catalog schema version {missing[0]} "
                f"(catalog has version {stored}, modelsql needs {wanted}).",
                code="catalog_migration_missing",
            )
        with self.transaction():
            for v in range(stored, wanted):
                with _converted():
                    migrations[v](self._con)
                    self._con.execute(
                        f"UPDATE {self._s}.meta SET value = ? WHERE key = 'schema_version'",
                        [str(v + 1)],
                    )

    def _check_objects(self) -> None:
        with _converted():
            names = {
                r[0]
                for r in self._con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? "
                    "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = ? AND schema_name = ?",
                    [self.database, schema.SCHEMA] * 2,
                ).fetchall()
            }
        missing = [n for n in schema.TABLES + schema.VIEWS if n not in names]
        if missing:
            raise errors.OperationalError(
                "The modelsql catalog is corrupt: missing "
                + ", ".join(f"{schema.SCHEMA}.{n}" for n in missing)
                + ".",
                code="catalog_corrupt",
            )

    # ------------------------------------------------------------- transactions

    def in_transaction(self) -> bool:
        """Whether the connection is inside a transaction (its own or its caller's)."""
        # DuckDB has no "in transaction" API; in auto-commit mode every statement
        # runs in a fresh transaction, so two reads of txid_current() differ.
        q = "SELECT txid_current()"
        return self._con.execute(q).fetchall()[0][0] == self._con.execute(q).fetchall()[0][0]

    @contextlib.contextmanager
    def transaction(self, *, join: bool = True) -> Iterator["Catalog"]:
        """``BEGIN TRANSACTION`` ... ``COMMIT``; ``ROLLBACK`` and re-raise on an exception.

        When the connection is already inside a transaction (the caller's own) and
        ``join`` is true, the block joins it: nothing is begun, committed or rolled
        back here, and the owner of that transaction decides. With ``join=False``
        the caller guarantees no transaction is open (it just committed) and the
        block always runs in a transaction of its own, without probing for one.

        Yields:
            this catalog.

        Raises:
            OperationalError: BEGIN or COMMIT failed (e.g. a write-write conflict,
                code ``"transaction_error"``); the transaction is rolled back.
        """
        if join:
            with _converted():
                joined = self.in_transaction()
        else:
            joined = False
        if joined:
            yield self
            return
        with _converted():
            self._con.execute("BEGIN TRANSACTION")
        try:
            yield self
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self._con.execute("ROLLBACK")
            raise
        try:
            self._con.execute("COMMIT")
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                self._con.execute("ROLLBACK")
            raise convert_duckdb_error(exc) from None

    def snapshot(self) -> contextlib.AbstractContextManager["Catalog"]:
        """Reads inside the block come from one snapshot of the catalog: the caller's transaction when
        one is open, else a transaction of the block's own (:meth:`transaction` joining; so a read racing
        another connection's DROP sees the model whole or not at all, never half).

        Yields:
            this catalog.
        """
        return self.transaction(join=True)

    # -------------------------------------------------------------------- reads

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with _converted():
            return self._con.execute(sql.replace("{s}", self._s), list(params)).fetchall()

    def model_names(self) -> list[str]:
        """Names of all models (lower case), sorted."""
        if not self._present:
            return []
        return [r[0] for r in self._rows("SELECT DISTINCT name FROM {s}.model_versions ORDER BY name")]

    def exists(self, name: str) -> bool:
        """Whether a model named ``name`` (case-insensitive) has at least one version."""
        return bool(self.versions(name))

    def versions(self, name: str) -> list[int]:
        """The versions of model ``name`` (case-insensitive), ascending; ``[]`` when it does not exist."""
        key = _normalize_name(name)
        if not self._present:
            return []
        return [
            r[0]
            for r in self._rows(
                "SELECT version FROM {s}.model_versions WHERE name = ? ORDER BY version", [key]
            )
        ]

    def _not_found(self, name: str) -> errors.ProgrammingError:
        if self._present and self.studies.trainable(name) is not None:
            return errors.ProgrammingError(
                f'Model "{name}" is a trainable (CREATE MODEL ... FROM PYTHON), not an ONNX model: TUNE it, then '
                f"CREATE MODEL {name}_best FROM STUDY <study> to predict with a trained version.",
                code="model_not_found")
        if self._present and self.pipelines.versions(str(name)):
            return errors.ProgrammingError(
                f'Model "{name}" does not exist, but a pipeline of that name does: name it PIPELINE {name} '
                f"(PREDICT(PIPELINE {name}, TABLE t), DESCRIBE PIPELINE {name}).", code="model_not_found")
        others = [n for n in self.model_names() if n != str(name).lower()]  # never "did you mean" the name itself
        last = str(name).rsplit(".", 1)[-1]
        dataset = (f" A name is one word here: modelsql keeps models in this database's catalog, with no schema or "
                   f"(BigQuery ML) dataset before the name; write {last}." if "." in str(name) and last else "")
        return errors.ProgrammingError(
            f'Model "{name}" does not exist.' + (dataset or errors.did_you_mean(name, others)),
            code="model_not_found",
        )

    def _resolve(self, name: str, version: Optional[int]) -> tuple[str, int]:
        """(stored name, existing version) or model_not_found / version_not_found."""
        key = _normalize_name(name)
        if version is not None:
            version = _normalize_version(version)
        existing = self.versions(key)
        if not existing:
            raise self._not_found(name)
        if version is None:
            return key, existing[-1]
        if version not in existing:
            raise errors.ProgrammingError(
                f'Model "{key}" has no version {version}. Existing versions: '
                + ", ".join(str(v) for v in existing)
                + ".",
                code="version_not_found",
            )
        return key, version

    def get(self, name: str, version: Optional[int] = None) -> ModelVersion:
        """Read one model version.

        Args:
            name: model name (case-insensitive).
            version: the version number; ``None`` for the latest.

        Returns:
            the :class:`ModelVersion`, with ``name`` lower case and ``created_at`` in UTC.

        Raises:
            ProgrammingError: code ``"model_not_found"`` (``Model "x" does not exist.``
                plus a "Did you mean" over existing names), ``"version_not_found"``
                (listing the existing versions), ``"invalid_name"``, ``"invalid_version"``.
        """
        key = _normalize_name(name)
        number = _normalize_version(version) if version is not None else None
        if self._present and (number is None or 0 < number < 2**31):
            stamps = (self._rows(_STAMP, [key, number]) if number is not None  # (one statement: one snapshot)
                      else [r for r in self._rows(_LATEST_STAMP, [key]) if r[0] is not None])
            if stamps:
                found = self._versions_read.get(key, stamps[0]) or self._read_version(key, stamps[0][0])
                if found is not None:
                    return found
        with self.snapshot():  # none, or dropped since: say why, from one snapshot
            found = self._read_version(*self._resolve(name, version))
            if found is None:
                raise self._not_found(name)
            return found

    def _read_version(self, key: str, number: int) -> Optional[ModelVersion]:
        """Version ``number`` of model ``key`` with its inputs, outputs and tensors, in one query (kept in
        :attr:`_versions_read` with its stamp); None where there is none."""
        found = self._rows(
            "SELECT kind, source, graph_digest, graph_bytes, opset, param_count, features, options, "
            "created_at, batch_dependence, check_rows, check_max_abs_diff, check_label_mismatches, content_digest, "
            f"fingerprint, flops, conv_flops, gemm_flops, nodes, {_SPECS.format(table='model_inputs')}, "
            f"{_SPECS.format(table='model_outputs')}, {_TENSORS} FROM {{s}}.model_versions WHERE name = $1 AND "
            "version = $2", [key, number])
        if not found:
            return None
        row = found[0]
        kind, source, graph_digest, graph_bytes, opset, param_count, features, options, created_at = row[:9]
        batch_dependence, check_rows, check_max_abs_diff, check_label_mismatches, content_digest, fp = row[9:15]
        flops, conv_flops, gemm_flops, nodes, inputs, outputs, tensors = row[15:]
        read = ModelVersion(
            name=key,
            version=number,
            graph_digest=graph_digest,
            graph_bytes=graph_bytes,
            opset=opset,
            inputs=_spec_values(inputs),
            outputs=_spec_values(outputs),
            tensors=tuple(StoredTensor(name=t["n"], digest=t["d"], elem_type=t["e"], dims=tuple(t["s"]),
                                       nbytes=t["b"]) for t in tensors or ()),
            param_count=param_count,
            source=source,
            kind=kind,
            features=None if features is None else tuple(features),
            options=tuple((str(k), str(v)) for k, v in (options or {}).items()),
            created_at=_utc(created_at),
            batch_dependence=batch_dependence,
            check_rows=check_rows,
            check_max_abs_diff=check_max_abs_diff,
            check_label_mismatches=check_label_mismatches,
            content_digest=content_digest,
            fingerprint=fp,
            flops=flops,
            conv_flops=conv_flops,
            gemm_flops=gemm_flops,
            nodes=nodes,
        )
        self._versions_read.put(key, (number, created_at, graph_digest, content_digest), read)
        return read

    def find_content(self, content_digest: str, features: Optional[Sequence[str]] = None) -> Optional[ModelVersion]:
        """The latest model version whose content digest is ``content_digest`` and whose feature names
        are ``features`` (the first such model by name), or None: an identical step already in the catalog."""
        if not self._present:
            return None
        feats = None if features is None else [str(f) for f in features]
        rows = self._rows("SELECT name, version FROM {s}.model_versions WHERE content_digest = ? "
                          "AND features IS NOT DISTINCT FROM ?::VARCHAR[] ORDER BY name, version DESC LIMIT 1",
                          [content_digest, feats])
        return self.get(*rows[0]) if rows else None

    def referenced_digests(self) -> set[str]:
        """Digests of every blob a model version, a cached merged graph, a study's checkpoint or a compiled
        artifact references."""
        if not self._present:
            return set()
        return {
            r[0]
            for r in self._rows(
                "SELECT graph_digest FROM {s}.model_versions UNION SELECT digest FROM {s}.model_tensors"
            )
        } | self.families.merged_digests() | self.studies.checkpoint_digests() | self.compiled.digests()

    def blob_sizes(self) -> dict[str, int]:
        """``{digest: nbytes}`` for every blob registered in ``modelsql.blobs``."""
        if not self._present:
            return {}
        return dict(self._rows("SELECT digest, nbytes FROM {s}.blobs"))

    # ------------------------------------------------------------------- writes

    def _check_writable(self) -> None:
        if self.read_only:
            raise errors.OperationalError(
                "The modelsql catalog is open read-only.", code="read_only"
            )

    def next_version(self, name: str) -> int:
        """The version number the next :meth:`add_version` of ``name`` must carry.

        One more than the highest version the name was ever given (``modelsql.version_marks``): a
        number is never given twice, even after ``DROP MODEL m VERSION n`` of the latest versions or
        ``DROP MODEL m`` of them all, so a pinned ``VERSION n`` never silently means another model.
        """
        key = _normalize_name(name)
        if not self._present:
            return 1
        return self.version_mark("model", key) + 1

    def version_mark(self, kind: str, name: str) -> int:
        """The highest version ``name`` (a ``kind`` ``'model'`` or ``'pipeline'``) was ever given; 0 for none."""
        table = "model_versions" if kind == "model" else "pipeline_versions"
        return int(self._rows(
            f"SELECT greatest(coalesce((SELECT max(last_version) FROM {{s}}.version_marks WHERE kind = ? "
            f"AND name = ?), 0), coalesce((SELECT max(version) FROM {{s}}.{table} WHERE name = ?), 0))",
            [kind, name.lower(), name.lower()])[0][0])

    def raise_version_mark(self, kind: str, name: str, version: int) -> None:
        """Record that ``name`` was given ``version`` (in the caller's transaction). Two transactions giving
        the same name a version conflict on this row, so one of them fails and retries."""
        self._rows(
            "INSERT INTO {s}.version_marks VALUES (?, ?, ?) ON CONFLICT (kind, name) DO UPDATE SET "
            "last_version = greatest(version_marks.last_version, excluded.last_version)",
            [kind, name.lower(), int(version)])

    def add_version(self, mv: ModelVersion, blob_kinds: Mapping[str, str]) -> None:
        """Insert a model version: its row, inputs, outputs, tensors, and blob registrations.

        Runs in the caller's transaction (use :meth:`transaction`); everything is
        validated before the first insert. The blobs must already be in the store.

        Args:
            mv: the version; ``mv.name`` is stored lower case; ``mv.version`` must be
                :meth:`next_version`; ``mv.created_at`` ``None`` means now (naive
                datetimes are taken as UTC).
            blob_kinds: ``{digest: "graph" | "tensor"}`` for the blobs ``mv``
                references. A digest not listed gets the kind of its role in ``mv``
                (graph digest -> ``"graph"``, initializer -> ``"tensor"``); digests
                ``mv`` does not reference are ignored. Sizes come from
                ``mv.graph_bytes`` and ``mv.tensors[i].nbytes``. A digest already
                registered keeps its row.

        Raises:
            OperationalError: ``"read_only"``.
            IntegrityError: ``"version_conflict"`` (version is not the next number),
                ``"blob_size_mismatch"`` (one digest, two sizes).
            ProgrammingError: ``"invalid_name"``, ``"invalid_version"``,
                ``"invalid_blob_kind"``, ``"duplicate_option"``.
            DataError: ``"invalid_shape"`` (a symbolic dimension that would read
                back as a fixed size, e.g. ``"12"``). Symbolic ``""`` and ``"?"`` are
                stored as unknown and read back as ``None``.
        """
        self._check_writable()
        key = _normalize_name(mv.name)
        version = _normalize_version(mv.version)
        expected = self.next_version(key)
        if version != expected:
            raise errors.IntegrityError(
                f'Cannot add version {version} of model "{key}": the next version is {expected}.',
                code="version_conflict",
            )
        option_keys = [k for k, _ in mv.options]
        dupes = sorted({k for k in option_keys if option_keys.count(k) > 1})
        if dupes:
            raise errors.ProgrammingError(
                "Option given more than once: " + ", ".join(dupes) + ".", code="duplicate_option"
            )
        for d, k in blob_kinds.items():
            if k not in BLOB_KINDS:
                raise errors.ProgrammingError(
                    f"Invalid blob kind {k!r} for {d}: expected 'graph' or 'tensor'.",
                    code="invalid_blob_kind",
                )

        # digest -> (nbytes, kind), in first-reference order.
        blobs: dict[str, tuple[int, str]] = {}

        def register(digest: str, nbytes: int, role: str) -> None:
            kind = blob_kinds.get(digest, role)
            if digest in blobs and blobs[digest][0] != nbytes:
                raise errors.IntegrityError(
                    f"Blob {digest} is referenced with two sizes: {blobs[digest][0]} and {nbytes} bytes.",
                    code="blob_size_mismatch",
                )
            blobs.setdefault(digest, (int(nbytes), kind))

        register(mv.graph_digest, mv.graph_bytes, "graph")
        for t in mv.tensors:
            register(t.digest, t.nbytes, "tensor")

        inputs = [_shape_text(s.shape) for s in mv.inputs]
        outputs = [_shape_text(s.shape) for s in mv.outputs]

        known = dict(
            self._rows(
                "SELECT digest, nbytes FROM {s}.blobs WHERE list_contains(?::VARCHAR[], digest)",
                [list(blobs)],
            )
        )
        for d, nb in known.items():
            if nb != blobs[d][0]:
                raise errors.IntegrityError(
                    f"Blob {d} is registered with {nb} bytes but this model says {blobs[d][0]} bytes.",
                    code="blob_size_mismatch",
                )

        features = None if mv.features is None else [str(f) for f in mv.features]
        self._rows(
            "INSERT INTO {s}.model_versions (name, version, kind, source, graph_digest, graph_bytes, "
            "opset, param_count, logical_bytes, features, options, created_at, batch_dependence, check_rows, "
            "check_max_abs_diff, check_label_mismatches, content_digest, fingerprint, flops, conv_flops, gemm_flops, nodes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?::VARCHAR[], map(?::VARCHAR[], ?::VARCHAR[]), ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?)",
            [
                key,
                version,
                mv.kind,
                mv.source,
                mv.graph_digest,
                mv.graph_bytes,
                mv.opset,
                mv.param_count,
                mv.logical_bytes,
                features,
                [str(k) for k, _ in mv.options],
                [str(v) for _, v in mv.options],
                _utc(mv.created_at),
                mv.batch_dependence,
                mv.check_rows,
                mv.check_max_abs_diff,
                mv.check_label_mismatches,
                mv.content_digest,
                mv.fingerprint,
                mv.flops,
                mv.conv_flops,
                mv.gemm_flops,
                mv.nodes,
            ],
        )
        for table, specs, shapes in (
            ("model_inputs", mv.inputs, inputs),
            ("model_outputs", mv.outputs, outputs),
        ):
            if specs:
                self._rows(
                    f"INSERT INTO {{s}}.{table} (name, version, position, tensor_name, elem_type, shape) "
                    "SELECT ?, ?, unnest(?::INTEGER[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
                    "unnest(?::VARCHAR[][])",
                    [
                        key,
                        version,
                        list(range(len(specs))),
                        [s.name for s in specs],
                        [s.elem_type for s in specs],
                        shapes,
                    ],
                )
        if mv.tensors:
            self._rows(
                "INSERT INTO {s}.model_tensors (name, version, position, tensor_name, digest, elem_type, "
                "dims, nbytes) SELECT ?, ?, unnest(?::INTEGER[]), unnest(?::VARCHAR[]), "
                "unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::BIGINT[][]), unnest(?::BIGINT[])",
                [
                    key,
                    version,
                    list(range(len(mv.tensors))),
                    [t.name for t in mv.tensors],
                    [t.digest for t in mv.tensors],
                    [t.elem_type for t in mv.tensors],
                    [[int(d) for d in t.dims] for t in mv.tensors],
                    [int(t.nbytes) for t in mv.tensors],
                ],
            )
        # Every blob's row is written, the known ones too: a concurrent DROP that deletes a row this version
        # now needs then conflicts with this transaction (one of them retries) instead of both committing.
        rows = [(d, nb, k) for d, (nb, k) in blobs.items()]
        self._rows(
            "INSERT INTO {s}.blobs (digest, nbytes, kind) "
            "SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]), unnest(?::VARCHAR[]) "
            "ON CONFLICT (digest) DO UPDATE SET nbytes = excluded.nbytes",
            [[b[0] for b in rows], [b[1] for b in rows], [b[2] for b in rows]],
        )
        self.raise_version_mark("model", key, version)

    def drop(self, name: str, version: Optional[int] = None, *, missing_ok: bool = False) -> int:
        """Delete a model (every version) or one version, and unregister blobs nothing references.

        Runs in the caller's transaction (use :meth:`transaction`).

        Args:
            name: model name (case-insensitive).
            version: the version to drop; ``None`` drops them all.
            missing_ok: return 0 instead of raising when the model or version does
                not exist (``DROP MODEL IF EXISTS``).

        Returns:
            the number of model versions removed.

        Raises:
            OperationalError: ``"read_only"``.
            ProgrammingError: ``"model_not_found"``, ``"version_not_found"``.
            IntegrityError: ``"model_in_use"``: a pipeline version has a step on it.
        """
        self._check_writable()
        try:
            key, resolved = self._resolve(name, version)
        except errors.ProgrammingError as exc:
            if missing_ok and exc.code in ("model_not_found", "version_not_found"):
                return 0
            raise
        users = self.pipelines.using_model(key, version)
        if users:
            raise errors.IntegrityError(
                f'Cannot drop model "{key}"' + (f" version {resolved}" if version is not None else "")
                + ": pipeline " + ", ".join(users) + " uses it. Drop the pipeline first (DROP PIPELINE).",
                code="model_in_use",
            )
        self.raise_version_mark("model", key, self.version_mark("model", key))  # kept: numbers never return
        params: list[Any]
        if version is None:
            where, params = "name = ?", [key]
            removed = len(self.versions(key))
        else:
            where, params = "name = ? AND version = ?", [key, resolved]
            removed = 1
        self.families.forget_model(key)
        self.compiled.forget_model(key, None if version is None else resolved)
        self.traces.forget_fits(key, None if version is None else resolved)
        self.evaluations.forget("model", key, None if version is None else resolved)
        self.aliases.forget(key, None if version is None else resolved)
        self.lineage.forget(key, None if version is None else resolved)
        self.tags.forget(key, None if version is None else resolved)
        for table in ("model_inputs", "model_outputs", "model_tensors", "model_versions"):
            self._rows(f"DELETE FROM {{s}}.{table} WHERE {where}", params)
        if not self.versions(key):
            self.tags.forget(key)  # the model's own tags go with its last version
        self._rows(
            "DELETE FROM {s}.blobs WHERE digest NOT IN "
            "(SELECT graph_digest FROM {s}.model_versions UNION SELECT digest FROM {s}.model_tensors "
            "UNION SELECT graph_digest FROM {s}.merged_graphs)"
        )
        return removed

    def forget_blobs(self, digests: Iterable[str]) -> int:
        """Remove rows from ``modelsql.blobs`` (after the store deleted those blobs).

        Runs in the caller's transaction.

        Args:
            digests: blob digests; ones not registered are ignored.

        Returns:
            the number of rows removed.

        Raises:
            OperationalError: ``"read_only"``.
            IntegrityError: ``"blob_in_use"`` when a model version still references one
                (the catalog never points at a blob that is not there); nothing is removed.
        """
        self._check_writable()
        wanted = sorted(set(digests))
        if not wanted or not self._present:
            return 0
        in_use = sorted(set(wanted) & self.referenced_digests())
        if in_use:
            raise errors.IntegrityError(
                "Cannot forget blobs still referenced by a model version: " + ", ".join(in_use) + ".",
                code="blob_in_use",
            )
        count = self._rows(
            "SELECT count(*) FROM {s}.blobs WHERE list_contains(?::VARCHAR[], digest)", [wanted]
        )[0][0]
        self._rows("DELETE FROM {s}.blobs WHERE list_contains(?::VARCHAR[], digest)", [wanted])
        return int(count)

    # ----------------------------------------------------------- SQL for users

    def _features_sql(self, v: str) -> str:
        """The feature names of model version row ``v`` (of ``model_versions``), comma separated: its ``features``,
        else, for a model trained in SQL (one input per column, named after it), its inputs' names; else NULL."""
        return (f"coalesce(array_to_string({v}.features, ', '), CASE WHEN {v}.options['model_type'] IS NOT NULL THEN "
                f"(SELECT string_agg(c.tensor_name, ', ' ORDER BY c.position) FROM {self._s}.model_inputs AS c "
                f"WHERE c.name = {v}.name AND c.version = {v}.version) END)")

    def show_models_sql(self) -> str:
        """SQL for ``SHOW MODELS``, to run through the user's cursor.

        Columns: name VARCHAR, version INTEGER (latest), versions BIGINT, kind VARCHAR,
        inputs VARCHAR, outputs VARCHAR (``'x: FLOAT[N, 64]'``, comma separated), features
        VARCHAR (the feature names, comma separated, a model trained in SQL's its inputs'; NULL when unknown),
        param_count BIGINT,
        logical_bytes BIGINT, created_at TIMESTAMPTZ, aliases VARCHAR (``'champion = 3, challenger = 4'``; NULL
        without one); ordered by name. A trainable model (``CREATE MODEL
        m FROM PYTHON``, trained by TUNE) that no version of a model of its name stands for yet is a row of
        kind ``'trainable'``, its factory in ``inputs`` (``'factory: pkg.mod:fn'``) and no shapes.
        When the catalog does not exist (read-only open), an empty result with the same columns.
        """
        if not self._present:
            return (
                "SELECT NULL::VARCHAR AS name, NULL::INTEGER AS version, NULL::BIGINT AS versions, "
                "NULL::VARCHAR AS kind, NULL::VARCHAR AS inputs, NULL::VARCHAR AS outputs, "
                "NULL::VARCHAR AS features, NULL::BIGINT AS param_count, NULL::BIGINT AS logical_bytes, "
                "NULL::TIMESTAMPTZ AS created_at, NULL::VARCHAR AS aliases WHERE false"
            )
        return (
            f"SELECT name, version, versions, kind, inputs, outputs, (SELECT {self._features_sql('v')} FROM "
            f"{self._s}.model_versions AS v WHERE v.name = m.name AND v.version = m.version) AS features, "
            f"param_count, logical_bytes, created_at, aliases FROM {self._s}.models AS m "
            "UNION ALL "
            "SELECT t.name, t.version, (SELECT count(*) FROM "
            f"{self._s}.trainable_versions AS v WHERE v.name = t.name), 'trainable', 'factory: ' || t.factory, "
            "NULL, NULL, NULL, NULL, t.created_at, NULL "
            f"FROM {self._s}.trainables AS t WHERE t.name NOT IN (SELECT name FROM {self._s}.models) "
            "ORDER BY name"
        )

    def describe_model_sql(self, name: str, version: Optional[int] = None) -> tuple[str, list]:
        """SQL and parameters for ``DESCRIBE MODEL``, to run through the user's cursor.

        One row per graph input, then one per graph output, in graph order, then
        the version's properties. Columns: role VARCHAR (``'input'`` |
        ``'output'`` | ``'property'``), position INTEGER (from 0), name VARCHAR,
        elem_type VARCHAR, shape VARCHAR (``'[N, 64]'``; ``'?'`` marks an unknown
        dimension; NULL when the rank is unknown), detail VARCHAR (an input's
        feature columns, ``'features: a, b, ...'``; a property's value).

        Properties: ``version`` (the version described: the latest, the one named, or the one an alias names),
        ``aliases`` (the aliases naming this version, comma separated; NULL without one), ``features`` (the
        feature names: a model trained in SQL's are its inputs', one per column; NULL when unknown),
        ``batch_dependence`` (why a row's outputs may depend on the other rows of
        its batch, or ``'none'``) and ``conversion_check`` (``'<rows> rows, max abs diff <d>,
        <k> label mismatches'``; NULL when not checked), then, for a model imported FROM PYTHON, those of
        :data:`PROGRAM_PROPERTIES` it has, and for one trained in SQL those of :data:`TRAINING_PROPERTIES`.
        Then role ``'evaluation'``: each metric of the version's latest EVALUATE (``modelsql.evaluations``), its
        value and what it was measured on in ``detail``; role ``'origin'`` (where the version came from,
        ``modelsql.model_origins``: name the origin, detail its source, digest, study and trial or parent); last,
        role ``'tag'`` (the version's tags and the model's: name the tag, detail its value).

        Args:
            name: model name (case-insensitive).
            version: ``None`` for the latest.

        Raises:
            ProgrammingError: ``"model_not_found"``, ``"version_not_found"``.
        """
        key, version = self._resolve(name, version)
        shape = "CASE WHEN shape IS NULL THEN NULL ELSE '[' || array_to_string(shape, ', ') || ']' END"
        features = self._features_sql("v")
        check = ("CASE WHEN v.check_rows IS NULL THEN NULL ELSE v.check_rows || ' rows, max abs diff ' "
                 "|| printf('%.3g', v.check_max_abs_diff) || ', ' || coalesce(v.check_label_mismatches, 0) "
                 "|| ' label mismatches' END")
        aliases = (f"(SELECT string_agg(a.alias, ', ' ORDER BY a.alias) FROM {self._s}.model_aliases AS a "
                   "WHERE a.name = v.name AND a.version = v.version)")
        props = (
            ("version", "v.version::VARCHAR"),
            ("aliases", aliases),
            ("features", features),
            ("batch_dependence", "coalesce(v.batch_dependence, 'none')"),
            ("conversion_check", check),
        )
        prop_sql = " UNION ALL ".join(
            f"SELECT 'property', 2, {i}, '{p}', NULL, NULL, {expr} FROM {self._s}.model_versions AS v "
            "WHERE v.name = ? AND v.version = ?"
            for i, (p, expr) in enumerate(props)
        ) + "".join(
            f" UNION ALL SELECT 'property', 2, {len(props) + i}, '{p}', NULL, NULL, v.options['{p}'] FROM "
            f"{self._s}.model_versions AS v WHERE v.name = ? AND v.version = ? AND v.options['{p}'] IS NOT NULL"
            for i, p in enumerate(_OPTION_PROPERTIES)
        )
        sql = (
            "SELECT role, position, name, elem_type, shape, detail FROM ("
            "SELECT 'input' AS role, 0 AS role_order, i.position, i.tensor_name AS name, i.elem_type, "
            f"{shape.replace('shape', 'i.shape')} AS shape, "
            f"CASE WHEN (SELECT count(*) FROM {self._s}.model_inputs AS c WHERE c.name = i.name "
            f"AND c.version = i.version) = 1 THEN 'features: ' || {features} END AS detail "
            f"FROM {self._s}.model_inputs AS i JOIN {self._s}.model_versions AS v "
            "ON v.name = i.name AND v.version = i.version WHERE i.name = ? AND i.version = ? "
            "UNION ALL "
            "SELECT 'output' AS role, 1 AS role_order, o.position, o.tensor_name AS name, o.elem_type, "
            f"{shape.replace('shape', 'o.shape')} AS shape, NULL AS detail "
            f"FROM {self._s}.model_outputs AS o WHERE o.name = ? AND o.version = ? "
            f"UNION ALL {prop_sql} UNION ALL {latest_evaluation_sql(self._s, 'model')} "
            f"UNION ALL {_ORIGIN_AND_TAGS_SQL.replace('{s}', self._s)}"
            ") ORDER BY role_order, position"
        )
        return sql, [key, version] * (5 + len(props) + len(_OPTION_PROPERTIES))
