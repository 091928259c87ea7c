"""The engine: runs one statement text on one connection.

Plain DuckDB SQL (no model keyword, decided by the tokenizer alone) goes to
DuckDB untouched. Text that names models is parsed with modelsql's dialect;
model statements are carried out here, and queries containing
``PREDICT(...)`` are bound (:mod:`modelsql.planner.bind`) and rewritten into
plain DuckDB SQL in which each PREDICT is a subquery calling one vectorized
Arrow function (:mod:`modelsql.operators.predict`), registered on the DuckDB
connection for the life of the result.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

import duckdb
import sqlglot
from sqlglot import exp

from .. import formats, sql as msql
from ..catalog import Catalog
from ..catalog.entries import ModelVersion
from ..errors import (
    DataError,
    Error,
    IntegrityError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    did_you_mean,
    excerpt,
    position_of,
)
from ..formats.onnx_io import column_major_inputs
from ..operators.backends import onnxruntime as ort_backend
from ..operators.predict import NULL_MARKER, ONNX_TO_DUCKDB, PredictFunction
from ..sql.nodes import (
    DescribeModel,
    DropModel,
    ExportModel,
    ImportModel,
    PredictTable,
    ShowModels,
    VacuumModels,
)
from ..storage import BlobStore
from .column_names import name_columns
from .rules import RULES, referenced_names
from .bind import (
    BoundPredict, Column, array_not_null_sql, bind_predict, check_feature_names, check_signature, parse_options, quote,
)

_ROWCOUNT_TYPES = {"INSERT", "UPDATE", "DELETE", "MERGE_INTO"}
_NO_RESULT_TYPES = {
    "CREATE", "DROP", "ALTER", "TRANSACTION", "SET", "VARIABLE_SET", "ATTACH", "DETACH", "LOAD",
    "VACUUM", "ANALYZE", "PREPARE", "CREATE_FUNC", "EXTENSION", "COPY_DATABASE", "EXPORT",
}
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UDF_COUNTER = itertools.count()
_UDF_ERROR = re.compile(r"Python exception occurred while executing the UDF: (\w+): (.*)", re.S)


@dataclass
class Outcome:
    """What one ``execute`` produced, for the cursor.

    ``rows`` is set for results built in Python; ``streaming`` when the DuckDB
    connection holds a pending result to fetch from. ``release()`` unregisters
    the PREDICT functions once the result is consumed.
    """

    engine: "Engine"
    description: Optional[list[tuple]] = None
    rowcount: int = -1
    rows: Optional[list[tuple]] = None
    streaming: bool = False
    predicts: list[tuple[str, PredictFunction, BoundPredict, list]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    """Arrow tables registered for ``execution = 'batch'`` PREDICTs, unregistered on release."""
    own_transaction: bool = False
    """The engine began a transaction so a batch PREDICT's input and the statement read one snapshot; release commits it."""

    def release(self) -> None:
        for name, *_ in self.predicts:
            try:
                self.engine.duck.remove_function(name)
            except Exception:
                pass
        self.predicts = []
        for name in self.sources:
            try:
                self.engine.duck.unregister(name)
            except Exception:
                pass
        self.sources = []
        if self.own_transaction:
            self.own_transaction = False
            try:
                self.engine.duck.execute("COMMIT")
            except Exception:
                try:
                    self.engine.duck.execute("ROLLBACK")
                except Exception:
                    pass

    def rollback(self) -> None:
        """Release after a failure: an engine-begun transaction is rolled back, not committed."""
        if self.own_transaction:
            self.own_transaction = False
            try:
                self.engine.duck.execute("ROLLBACK")
            except Exception:
                pass
        self.release()

    def translate(self, exc: BaseException) -> Error:
        return self.engine.translate(exc, self.predicts)


class Engine:
    """Executes statements for one :class:`~modelsql.dbapi.Connection`.

    Args:
        duck: the DuckDB connection (shared with the DB-API connection).
        database: the database path or ``":memory:"`` (locates the blob store).
        read_only: refuse every write.
    """

    def __init__(self, duck: duckdb.DuckDBPyConnection, database: str, *, read_only: bool = False) -> None:
        self.duck = duck
        self.database = database
        self.read_only = read_only
        self.catalog = Catalog(duck, read_only=read_only)
        self.store = BlobStore.for_database(database)
        self.optimize = True
        """Apply the planner's rewrite rules (:data:`modelsql.planner.rules.RULES`); False runs
        every PREDICT as bound, which tests use to check that rules never change an answer."""

    def close(self) -> None:
        """Nothing to free: sessions live in the process-wide cache, the store is files."""

    # ------------------------------------------------------------------ dispatch

    def execute(self, text: str, params: Optional[list], conn) -> Outcome:
        """Run ``text`` (one or more statements) with qmark ``params``; see :class:`Outcome`."""
        if not msql.mentions_models(text):
            return self._passthrough(text, params, conn)
        numbered, count = msql.number_placeholders(text)
        self._qmark_style = count > 0  # DuckDB names a `?` by its place in the statement (see _name_columns)
        given = len(params) if params is not None else 0
        statements = msql.parse(numbered)
        if count == 0:
            # DuckDB's own numbered style ($1, $2 ...) written by the user.
            count = max(
                (int(p.this) for st in statements for p in st.find_all(exp.Placeholder) if str(p.this).isdigit()),
                default=0,
            )
        if given != count:
            raise ProgrammingError(
                f"The statement has {count} parameter placeholder(s) but {given} value(s) were given.",
                code="parameter_count",
            )
        self._text = numbered
        if not statements:
            return Outcome(self)
        outcome = Outcome(self)
        for i, stmt in enumerate(statements):
            outcome.release()
            last = i == len(statements) - 1
            outcome = self._statement(stmt, params or [], conn, text)
            if not last and outcome.streaming:
                # Drain: only the last statement's result is returned.
                try:
                    self.duck.fetchall()
                except Exception as exc:
                    outcome.release()
                    raise outcome.translate(exc) from exc
        return outcome

    def _passthrough(self, text: str, params: Optional[list], conn) -> Outcome:
        try:
            statements = list(duckdb.extract_statements(text))
        except Exception:
            statements = []
        stypes = [st.type.name for st in statements]
        if len(statements) > 1 and "TRANSACTION" in stypes and not params:
            # BEGIN/COMMIT/ROLLBACK among several statements: one at a time, so the connection follows
            # them (commit() and rollback() keep working, and a later statement opens a new transaction)
            outcome = Outcome(self)
            for i, st in enumerate(statements):
                outcome.release()
                outcome = self._passthrough(st.query, None, conn)
                if i < len(statements) - 1 and outcome.streaming:
                    try:
                        self.duck.fetchall()
                    except Exception as exc:
                        raise outcome.translate(exc) from exc
            return outcome
        if len(stypes) == 1 and stypes[0] == "TRANSACTION":
            word = _first_word(text)
            if word in ("COMMIT", "END"):
                conn.commit()
                return Outcome(self)
            if word in ("ROLLBACK", "ABORT"):
                conn.rollback()
                return Outcome(self)
            if word in ("BEGIN", "START"):
                if not conn._in_transaction:
                    self._run(text, params)
                    conn._in_transaction = True
                return Outcome(self)
        conn._begin_if_needed()
        self._run(text, params)
        return self._result_outcome(stypes[-1] if stypes else "SELECT")

    def _run(self, text: str, params: Optional[Sequence], translate=None) -> None:
        """Execute on DuckDB; a failure becomes ``translate(exc)`` (default: the PEP 249 mapping)."""
        from ..dbapi import translate_duckdb_error

        try:
            if params:
                self.duck.execute(text, params)
            else:
                self.duck.execute(text)
        except Exception as exc:
            raise (translate or translate_duckdb_error)(exc) from exc

    def _result_outcome(self, stype: str, predicts=None) -> Outcome:
        from ..dbapi import translate_duckdb_error

        out = Outcome(self, predicts=predicts or [])
        desc = self.duck.description
        if stype in _ROWCOUNT_TYPES and desc and self.duck.rowcount == -1:
            # INSERT/UPDATE/DELETE/MERGE ... RETURNING: DuckDB's client gives its rows and rowcount -1
            # (for a changed-rows count, the count), whatever the text or the returned columns say
            stype = "SELECT"
        if stype in _ROWCOUNT_TYPES:
            try:
                rows = self.duck.fetchall()
            except Exception as exc:
                raise translate_duckdb_error(exc) from exc
            out.rowcount = int(rows[0][0]) if rows else 0
            return out
        if stype in _NO_RESULT_TYPES or not desc:
            try:
                self.duck.fetchall()
            except Exception:
                pass
            return out
        out.description = [(d[0], str(d[1]), None, None, None, None, True) for d in desc]
        out.streaming = True
        return out

    def _statement(self, stmt: exp.Expression, params: list, conn, text: str) -> Outcome:
        if isinstance(stmt, ImportModel):
            return self._import_statement(stmt, params, conn)
        if isinstance(stmt, DropModel):
            return self._drop(stmt, conn)
        if isinstance(stmt, ShowModels):
            conn._begin_if_needed()
            self._run(self.catalog.show_models_sql(), None)
            return self._result_outcome("SELECT")
        if isinstance(stmt, DescribeModel):
            ref = stmt.this
            mv = self._get_model(ref.model_name, ref.version_number, ref)
            conn._begin_if_needed()
            q, qp = self.catalog.describe_model_sql(mv.name, mv.version)
            self._run(q, qp)
            return self._result_outcome("SELECT")
        if isinstance(stmt, ExportModel):
            return self._export(stmt, params)
        if isinstance(stmt, VacuumModels):
            return self._vacuum(conn)
        if isinstance(stmt, (exp.Transaction, exp.Commit, exp.Rollback)) or (
            isinstance(stmt, exp.Column) and not stmt.table and stmt.name.upper() in ("END", "ABORT")
        ):
            return self._passthrough(stmt.sql(dialect="duckdb"), None, conn)
        if isinstance(stmt, exp.Command) and str(stmt.this).upper() == "EXPLAIN":
            return self._explain(stmt, params, conn)
        return self._query(stmt, params, conn)

    def _explain(self, stmt: exp.Command, params: list, conn) -> Outcome:
        """``EXPLAIN [ANALYZE] <query with PREDICT>``: one row per bound PREDICT, then DuckDB's plan.

        Returns rows ``(explain_key, explain_value)`` like DuckDB's EXPLAIN; the
        first rows (key ``modelsql_predict``) say how each PREDICT was bound.
        """
        body = stmt.expression.name if stmt.expression is not None else ""
        m = re.match(r"\s*(ANALYZE\b|\([^()]*\))", body, re.I)
        prefix = "EXPLAIN "
        if m:
            prefix = f"EXPLAIN {m.group(1)} "
            body = body[m.end():]
        inner = msql.parse(body)
        if len(inner) != 1:
            raise ProgrammingError("EXPLAIN takes exactly one statement.", code="parse_error")
        out = self._query(inner[0], params, conn, prefix=prefix)
        try:
            rows = self.duck.fetchall()
        except Exception as exc:
            out.release()
            raise out.translate(exc) from exc
        ours = [("modelsql_predict", describe_bound(bound, fn.execution)) for _, fn, bound, _ in out.predicts]
        out.release()
        return Outcome(
            self,
            description=[("explain_key", "VARCHAR", None, None, None, None, True),
                         ("explain_value", "VARCHAR", None, None, None, None, True)],
            rows=ours + [tuple(r) for r in rows],
        )

    # ------------------------------------------------------------------ models

    def _get_model(self, name: str, version: Optional[int], ref: Optional[exp.Expression] = None) -> ModelVersion:
        """The catalog entry; a lookup error gets a ``LINE n:`` excerpt under the model name
        (``dbapi.point_into`` then sets ``.line``/``.column`` in the user's own text)."""
        try:
            return self.catalog.get(name, version)
        except Error as err:
            raise self._pointed(err, ref) from None

    def _pointed(self, err: Error, ref: Optional[exp.Expression]) -> Error:
        """``err`` with a ``LINE n:`` excerpt under the model name of ``ref`` (unless it has a position)."""
        start = ref.this.meta.get("start") if ref is not None and ref.this is not None else None
        text = getattr(self, "_text", None)
        if err.line is not None or start is None or not text or "\nLINE " in str(err):
            return err
        line, column = position_of(text, start)
        return type(err)(f"{err}\n{excerpt(text, line, column, len(ref.this.name))}", code=err.code)

    def _check_writable(self) -> None:
        if self.read_only:
            raise OperationalError("The connection is read-only; model statements that write are refused.", code="read_only")

    def _import_statement(self, stmt: ImportModel, params: list, conn) -> Outcome:
        source = _value(stmt.args["source"], params)
        if stmt.args.get("replace") and stmt.args.get("exists"):
            raise ProgrammingError(
                "CREATE OR REPLACE MODEL and IF NOT EXISTS contradict each other; use one of them.",
                code="parse_error",
            )
        _no_repeats(stmt.args.get("options"), f"IMPORT MODEL {stmt.this.model_name}")
        options = {k: _value(v, params) for k, v in stmt.option_values.items()}
        unknown = [k for k in options if k not in IMPORT_OPTIONS]
        if unknown:
            raise ProgrammingError(
                f'IMPORT MODEL {stmt.this.model_name}: unknown option "{unknown[0]}".'
                f"{did_you_mean(unknown[0], IMPORT_OPTIONS)} Options are: {', '.join(IMPORT_OPTIONS)}.",
                code="unknown_option",
            )
        features = options.pop("features", None)
        if isinstance(features, str):
            features = tuple(f.strip() for f in features.split(","))
        self.import_model(
            stmt.this.model_name,
            str(source),
            features=features,
            replace=bool(stmt.args.get("replace")),
            if_not_exists=bool(stmt.args.get("exists")),
            options={k: str(v) for k, v in options.items()},
            connection=conn,
        )
        return Outcome(self, rowcount=1)

    def import_model(
        self,
        name: str,
        model: Any,
        *,
        example_input: Any = None,
        features: Optional[Sequence[str]] = None,
        input_names: Optional[Sequence[str]] = None,
        output_names: Optional[Sequence[str]] = None,
        replace: bool = False,
        if_not_exists: bool = False,
        options: Optional[dict] = None,
        connection=None,
        accept_mismatch: bool = False,
    ) -> ModelVersion:
        """Convert, check, store and catalog one model version (see ``Connection.import_model``).

        The blobs are written (atomically, each fsynced) before the catalog
        transaction that references them commits, so a crash at any point leaves
        either the whole new version or none of it; stray blobs are collected by
        ``VACUUM MODELS``.
        """
        self._check_writable()
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ProgrammingError(
                f'Invalid model name "{name}": use letters, digits and underscores, starting with a letter.',
                code="invalid_name",
            )
        key = name.lower()
        if self.catalog.exists(key) and not replace:
            if if_not_exists:
                return self.catalog.get(key)
            raise IntegrityError(
                f'Model "{key}" already exists (versions {", ".join(map(str, self.catalog.versions(key)))}). '
                f"Use CREATE OR REPLACE MODEL to add a version, or IMPORT MODEL IF NOT EXISTS.",
                code="duplicate_model",
            )
        if features is not None:
            features = _feature_names(features, key)
        proto, kind, source, known = formats.to_onnx(
            model, example_input=example_input, feature_names=features, input_names=input_names,
            output_names=output_names,
        )
        feats = tuple(features) if features else (tuple(known) if known else None)
        facts = self._facts(key, model, proto, kind, feats, example_input, accept_mismatch)
        graph, tensors = formats.split_model(proto)
        # Load it once in ONNX Runtime before anything is written: a model ORT
        # cannot run never enters the catalog.
        ort_backend.OrtModel(proto.SerializeToString(), f'model "{key}"')
        graph_digest = self.store.put(graph)
        for t, payload in tensors:
            digest = self.store.put(payload)
            if digest != t.digest:
                raise InternalError(f"digest mismatch storing tensor {t.name}", code="digest_mismatch")
        if connection is not None:
            connection.commit()
        fields = dict(facts, name=key, graph_digest=graph_digest, graph_bytes=len(graph),
                      tensors=tuple(t for t, _ in tensors), param_count=formats.param_count(proto), source=source,
                      kind=kind, features=feats, options=tuple(sorted((options or {}).items())))
        kinds = {graph_digest: "graph"}
        kinds.update({t.digest: "tensor" for t, _ in tensors})
        return self._add_version(fields, kinds)

    def _facts(self, key: str, model: Any, proto, kind: str, feats, example_input, accept_mismatch: bool) -> dict:
        """What the catalog records of a converted model beyond its bytes: signature, batch dependence
        (:func:`~modelsql.formats.batch_axis.batch_dependence`) and, for an estimator, the conversion check.

        Raises:
            DataError: no outputs (``invalid_onnx``); labels disagree (``conversion_mismatch``).
            NotSupportedError: an input or output no column can carry. ProgrammingError: features that do not fit.
        """
        inputs, outputs, opset = formats.signature(proto)
        if not outputs:
            raise DataError(f'Model "{key}" has no graph outputs: there is nothing to predict.', code="invalid_onnx")
        check_signature(key, inputs, outputs)
        if feats is not None:
            _check_features(key, feats, inputs)
        check = None
        if kind == "sklearn":  # the converted graph against the estimator, on the sample (or the default one)
            check = formats.check_conversion(model, proto, example_input, features=feats,
                                             accept_mismatch=accept_mismatch)
        return dict(
            inputs=tuple(inputs), outputs=tuple(outputs), opset=opset,
            batch_dependence=formats.batch_dependence(proto),
            check_rows=check.rows if check else None,
            check_max_abs_diff=check.max_abs_diff if check else None,
            check_label_mismatches=check.label_mismatches if check else None,
        )

    def _add_version(self, fields: dict, kinds: dict) -> ModelVersion:
        """Catalog the next version of ``fields["name"]`` (the blobs are stored), retrying when another
        connection takes the same version number first (DuckDB's optimistic concurrency refuses one commit)."""
        key = fields["name"]
        attempts = 20
        for attempt in range(attempts):
            try:
                with self.catalog.transaction(join=False):  # the connection just committed
                    version = self.catalog.next_version(key)
                    self.catalog.add_version(ModelVersion(version=version, **fields), kinds)
                break
            except (IntegrityError, OperationalError) as exc:
                if attempt == attempts - 1 or exc.code == "read_only":
                    raise
                # The other writer may not have committed yet: wait a little (with jitter) first.
                time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))
        return self.catalog.get(key, version)

    def _drop(self, stmt: DropModel, conn) -> Outcome:
        self._check_writable()
        ref = stmt.this
        name = ref.model_name.lower()
        if not self.catalog.exists(name):
            if stmt.args.get("exists"):
                return Outcome(self, rowcount=0)
            self._get_model(name, None, ref)  # raises model_not_found with "did you mean"
        if ref.version_number is not None:
            if stmt.args.get("exists") and ref.version_number not in self.catalog.versions(name):
                return Outcome(self, rowcount=0)
            self._get_model(name, ref.version_number, ref)
        conn.commit()
        with self.catalog.transaction(join=False):  # the connection just committed
            removed = self.catalog.drop(name, ref.version_number)
        return Outcome(self, rowcount=removed)

    def load_model_bytes(self, mv: ModelVersion) -> bytes:
        """Rebuild the self-contained ONNX model of a version from the store (digests verified).

        Raises:
            DataError: a blob is corrupt or missing (code ``"blob_corrupt"`` /
                ``"blob_missing"``), naming the model and the tensor.
        """
        return self.load_model_proto(mv).SerializeToString()

    def load_model_proto(self, mv: ModelVersion):
        def fetch(digest: str, what: str) -> bytes:
            try:
                return self.store.get(digest)
            except DataError as exc:
                raise DataError(
                    f'Model "{mv.name}" version {mv.version}: {what} is unreadable from the store: {exc}',
                    code=exc.code,
                ) from exc

        graph = fetch(mv.graph_digest, "the graph")
        payloads = {}
        for t in mv.tensors:
            if t.digest not in payloads:
                payloads[t.digest] = fetch(t.digest, f'tensor "{t.name}"')
        return formats.join_model(graph, payloads)

    def _export(self, stmt: ExportModel, params: list) -> Outcome:
        import onnx

        ref = stmt.this
        mv = self._get_model(ref.model_name, ref.version_number, ref)
        target = str(_value(stmt.args["target"], params))
        self._check_export_target(target)
        proto = self.load_model_proto(mv)
        self._write_catalog_metadata(proto, mv)
        try:
            onnx.save_model(proto, target)
        except OSError as exc:
            raise OperationalError(f'Cannot write "{target}": {exc.strerror or exc}', code="io_error") from exc
        return Outcome(self, rowcount=1)

    def _write_catalog_metadata(self, proto, mv: ModelVersion) -> None:
        """What the catalog knows of ``mv``, into ``proto``'s metadata (see :mod:`modelsql.formats.metadata`)."""
        from .. import __version__
        from .bind import bind_outputs

        options = dict(mv.options)
        formats.write_metadata(proto, {
            "features": list(mv.features) if mv.features else None,
            "outputs": formats.metadata.outputs_entry(bind_outputs(mv, ())),
            "description": options.get("description"),
            "version": __version__,
            "source": {"model": mv.name, "version": mv.version, "kind": mv.kind, "from": mv.source},
        })

    def _check_export_target(self, target: str) -> None:
        """Refuse to overwrite the database file, its WAL or anything in the blob store.

        Any other existing file is overwritten, as DuckDB's ``COPY ... TO`` does.
        """
        real = os.path.realpath(target)
        guarded = [os.path.realpath(str(self.store.root))]
        if self.database != ":memory:":
            db = os.path.realpath(self.database)
            guarded += [db, db + ".wal"]
        for g in guarded:
            if real == g or real.startswith(g.rstrip(os.sep) + os.sep):
                raise ProgrammingError(
                    f'EXPORT MODEL: "{target}" is this connection\'s own database, write-ahead log or blob '
                    "store; export to another path.",
                    code="export_target_in_use",
                )

    def _vacuum(self, conn) -> Outcome:
        self._check_writable()
        self._run("SELECT 1", None)  # an aborted transaction says so here; COMMIT would end it silently
        self.duck.fetchall()
        conn.commit()
        referenced = self.catalog.referenced_digests()
        removed, freed = self.store.collect(referenced)
        return Outcome(
            self,
            description=[("blobs_removed", "BIGINT", None, None, None, None, False),
                         ("bytes_freed", "BIGINT", None, None, None, None, False)],
            rows=[(removed, freed)],
        )

    # ------------------------------------------------------------------ PREDICT

    def _query(self, stmt: exp.Expression, params: list, conn, prefix: str = "") -> Outcome:
        stmt = stmt.copy()
        kind = str(stmt.args.get("kind") or "").upper() if isinstance(stmt, exp.Create) else ""
        if kind in ("VIEW", "MACRO", "FUNCTION") and stmt.find(PredictTable) is not None:
            # The PREDICT functions live only as long as one result: a stored
            # definition would call a function that no longer exists.
            raise NotSupportedError(
                f"PREDICT cannot be used in CREATE {kind}: the definition would outlive "
                "the statement. Use CREATE TABLE ... AS SELECT ... FROM PREDICT(...) to store predictions.",
                code="predict_in_view",
            )
        name_columns(stmt, qmark_style=getattr(self, "_qmark_style", False))
        # Innermost first, so a PREDICT over another PREDICT sees plain SQL as its input;
        # and those in CTE bodies before the rest, so a PREDICT over a CTE does too.
        predicts = _predicts_in_order(stmt)
        conn._begin_if_needed()
        registered: list = []
        held = Outcome(self)
        try:
            for p in predicts:
                index = next(_UDF_COUNTER)
                used = referenced_names(stmt, p.parent if isinstance(p.parent, exp.Table) else p)
                try:
                    bound, fn_name, fn, arg_params = self._bind(p, params, index, used)
                except Error as err:
                    raise self._pointed(_correlated(err, p) or err, p.this) from None
                registered.append((fn_name, fn, bound, arg_params))
                sub = None
                if self._choose_execution(bound, used, stmt, p) == "batch":
                    if not conn._in_transaction and not held.own_transaction:
                        # The input runs before the statement: one transaction gives both one snapshot.
                        # (one may be open though the connection did not begin it: a BEGIN inside a multi-statement text)
                        if not self.catalog._in_transaction():
                            self.duck.execute("BEGIN TRANSACTION")
                            held.own_transaction = True
                    try:
                        sub = self._predict_batch(bound, fn, arg_params, used, stmt, index, held, registered,
                                                  dry=prefix.startswith("EXPLAIN") and "ANALYZE" not in prefix.upper())
                    except Error as err:
                        if conn._in_transaction:
                            # A failing statement aborts DuckDB's transaction; leave the same state a
                            # streaming PREDICT's failure leaves, whichever way this one ran.
                            try:
                                self.duck.execute("SELECT error(?)", [str(err)[:200]])
                            except Exception:
                                pass
                        raise
                if sub is None:
                    sub = self._predict_tree(bound, fn_name, p.args["expression"])
                parent = p.parent
                if isinstance(parent, exp.Table) and parent.this is p:
                    parent.replace(exp.Subquery(this=sub, alias=parent.args.get("alias")))
                else:
                    p.replace(exp.Subquery(this=sub))
            final_sql, idx = _renumber(stmt)
            final_sql = prefix + final_sql
            final_params = [params[i - 1] for i in idx]
            self._run(final_sql, final_params, lambda exc: self.translate(exc, registered))
            stype = "SELECT"
            if prefix:
                stype = "SELECT"  # EXPLAIN [ANALYZE] of any statement returns the plan rows
            elif stmt.args.get("returning"):
                stype = "SELECT"  # INSERT/UPDATE/DELETE ... RETURNING: its rows are the result
            elif isinstance(stmt, (exp.Insert, exp.Update, exp.Delete)):
                stype = type(stmt).__name__.upper()
            elif isinstance(stmt, exp.Merge):
                stype = "MERGE_INTO"
            elif isinstance(stmt, exp.Create):
                stype = "CREATE"
            out = self._result_outcome(stype, registered)
            out.sources, out.own_transaction = held.sources, held.own_transaction
            held = Outcome(self)
            if not out.streaming:
                out.release()
            return out
        except BaseException:
            held.predicts = registered
            held.rollback()
            raise

    def _bind(self, p: PredictTable, params: list, index: int, used: Optional[set[str]] = None):
        ref = p.this
        mv = self._get_model(ref.model_name, ref.version_number, ref)
        _no_repeats(p.args.get("options"), f"PREDICT(MODEL {mv.name})")
        options = parse_options({k: _value(v, params) for k, v in p.option_values.items()}, mv.name)
        source = p.args["expression"]
        key_columns: list[str] = []
        ctes = _ctes_in_scope(p)
        if isinstance(source, exp.Subquery):
            inner = source.this
        else:
            inner = exp.select("*").from_(source.copy())
            if not (not source.db and source.name.lower() in {c.alias_or_name.lower() for c in ctes}):
                key_columns = self._key_columns(source)
        if ctes:
            # The input may name CTEs of the enclosing query: describe it with them in scope.
            alias = exp.TableAlias(this=exp.to_identifier("__msql_src"))
            wrapped = exp.select("*").from_(exp.Subquery(this=inner.copy(), alias=alias))
            recursive = any(isinstance(c.parent, exp.With) and c.parent.args.get("recursive") for c in ctes)
            wrapped.set("with_", exp.With(expressions=[c.copy() for c in ctes], recursive=recursive or None))
            inner = wrapped
        input_sql, idx = _renumber(inner)
        in_params = [params[i - 1] for i in idx]
        columns = self._describe(input_sql, in_params, mv.name)
        bound = bind_predict(mv, input_sql, columns, options, key_columns)
        if mv.batch_dependence and options.isolate_rows:
            # each row gets the answer it gets alone (see formats.batch_axis)
            bound = replace(bound, options=replace(options, batch_size=1))
        if self.optimize:
            for rule in RULES:
                bound = rule(bound, used)
        bound = replace(bound, estimated_rows=self._estimate_rows(bound, in_params))
        model = self._session(mv, intra=self._stream_intra(bound))
        fn = PredictFunction(model, bound.args, bound.outputs, options.on_null, index,
                             batch_size=bound.options.batch_size, on_error=options.on_error, model_name=mv.name)
        fn_name = f"__modelsql_predict_{index}"
        struct = "STRUCT(" + ", ".join(f"{quote(o.column)} {o.duckdb_type}" for o in bound.outputs) + ")"
        try:
            self.duck.create_function(
                fn_name,
                fn,
                [duckdb.sqltype(t) for t in bound.arg_types],
                duckdb.sqltype(struct),
                type="arrow",
                null_handling="special",
                side_effects=True,
            )
        except Exception as exc:
            raise InternalError(f"Cannot register PREDICT for {bound.label}: {exc}", code="udf_register") from exc
        return bound, fn_name, fn, in_params

    def _predict_tree(self, bound: BoundPredict, fn_name: str, source: exp.Expression) -> exp.Expression:
        """The PREDICT as a plain DuckDB subquery tree over ``source`` (its ``$k`` parameters kept)."""
        tree = sqlglot.parse_one(self._predict_sql(bound, fn_name, "__msql_input"), read="duckdb")
        for table in list(tree.find_all(exp.Table)):
            if table.name == "__msql_input":
                src = source.copy()
                src.set("alias", exp.TableAlias(this=exp.to_identifier("__msql_in", quoted=True)))
                table.replace(src)
        return tree

    def _predict_sql(self, bound: BoundPredict, fn_name: str, input_sql: Optional[str] = None) -> str:
        call = f"{fn_name}({', '.join(bound.arg_sql)})"
        where = ""
        if bound.options.on_null == "skip" and bound.null_filter:
            where = f" WHERE {bound.null_filter}"
        taken = {c.name.lower() for c in bound.columns}
        p = "__msql_p"
        while p in taken:  # an input column of that name must pass through untouched
            p += "_"
        outs = ", ".join(f"struct_extract({quote(p)}, {_sql_str(o.column)}) AS {quote(o.column)}" for o in bound.outputs)
        skip = f" WHERE {quote(p)} IS NOT NULL" if bound.options.on_error == "skip" else ""  # rows the model failed on
        return (
            f"SELECT * EXCLUDE ({quote(p)}), {outs} FROM "
            f'(SELECT *, {call} AS {quote(p)} FROM {input_sql or "(" + bound.input_sql + ")"} AS "__msql_in"{where}) AS "__msql_q"'
            + skip
        )

    # ------------------------------------------------------------------ batch execution

    def _choose_execution(self, bound: BoundPredict, used: Optional[set[str]], stmt, node: exp.Expression) -> str:
        """``"stream"`` or ``"batch"`` for one PREDICT (option ``execution``; ``auto`` decides here).

        ``auto`` picks batch for a light model (at most :data:`BATCH_MAX_PARAMS`
        parameters, where the per-chunk cost of streaming outweighs inference)
        when DuckDB estimates at least :data:`BATCH_MIN_ROWS`
        input rows and what batch execution keeps in memory (the passthrough
        columns the statement reads, plus the outputs) fits :data:`BATCH_MEMORY`.
        """
        mode = bound.options.execution
        if used is not None and not any(o.column.lower() in used for o in bound.outputs):
            return "stream"  # no output is read: streaming never runs the model at all
        if mode == "batch":
            unsafe = [c for c in _kept_columns(bound, used, stmt) if _arrow_unsafe(c.type)]
            if unsafe:
                c = unsafe[0]
                raise NotSupportedError(
                    f'PREDICT(MODEL {bound.model.name}): column "{c.name}" ({c.type}) does not pass through '
                    "execution = 'batch' unchanged (Arrow does not carry it); use execution = 'stream', or leave "
                    "the column out of what the statement reads.",
                    code="batch_type_not_supported",
                )
        if mode != "auto":
            return mode
        if not _in_top_level_from(node, stmt):
            # in a CTE, EXISTS, IN, CASE or scalar subquery a streaming PREDICT may run partly or not at all
            return "stream"
        if any(isinstance(n, _ROW_DEPENDENT) for n in stmt.walk(prune=lambda n: isinstance(n, PredictTable))):
            # A filter, limit or join may stop a streaming PREDICT early or push into its input, so it never
            # sees (nor fails on) rows the statement drops; batch would read them all. (PREDICT inputs are not
            # searched: they run the same way in both modes.)
            return "stream"
        if any(_arrow_unsafe(c.type) for c in _kept_columns(bound, used, stmt)):
            return "stream"
        if bound.model.param_count > BATCH_MAX_PARAMS:
            # Inference dominates: streaming already overlaps it with the scan, and gives ONNX Runtime
            # DuckDB's small chunks, at which a large model runs fastest.
            return "stream"
        rows = bound.estimated_rows
        if rows is None or rows < BATCH_MIN_ROWS:
            return "stream"
        kept = _kept_columns(bound, used, stmt)
        width = sum(_type_bytes(c.type) for c in kept) + sum(_type_bytes(o.duckdb_type) for o in bound.outputs)
        return "batch" if rows * width <= BATCH_MEMORY else "stream"

    def _stream_intra(self, bound: BoundPredict) -> Optional[int]:
        """Intra-op threads for a streaming PREDICT's session: the cores DuckDB's scan leaves idle.

        DuckDB scans a table in parallel by row group (:data:`ROW_GROUP_ROWS` rows), so an input of fewer
        row groups than DuckDB has threads keeps only that many threads calling the model. Each session
        then gets ``cores // callers`` threads instead of ``cores // duckdb_threads`` (None: that default):
        on two cores, a 100,000-row input ran the heavy benchmark model 1.66x faster.
        """
        rows = bound.estimated_rows
        if bound.options.batch_size or bound.options.backend != "onnxruntime" or rows is None:
            return None
        callers = max(1, min(self._duck_threads(), -(-rows // ROW_GROUP_ROWS)))
        return max(1, ort_backend.default_threads() // callers)

    def _estimate_rows(self, bound: BoundPredict, params: list) -> Optional[int]:
        """DuckDB's estimated cardinality of the PREDICT's input, or None when it gives none."""
        try:
            row = self.duck.execute(f"EXPLAIN (FORMAT JSON) {bound.input_sql}", params or None).fetchall()
            plan = json.loads(row[0][1])
            return int(plan[0]["extra_info"]["Estimated Cardinality"])
        except Exception:
            return None

    def _predict_batch(self, bound: BoundPredict, fn: PredictFunction, params: list, used, stmt, index: int,
                       held: "Outcome", registered: list, *, dry: bool = False) -> Optional[exp.Expression]:
        """Run one PREDICT to completion over large Arrow record batches; the tree that reads its result.

        The input query runs first, on this connection (so it sees this
        transaction's own writes), streaming to Arrow in batches of up to
        :data:`BATCH_ROWS` rows. A ``matrix`` argument is read as its separate
        columns and fed column-major to a copy of the model whose input is
        transposed (:func:`~modelsql.formats.onnx_io.column_major_inputs`), which
        costs one copy per column instead of packing every row; the session
        uses every core, since DuckDB is not calling it from several threads.
        The passthrough columns the statement reads and the outputs are kept as
        one Arrow table, registered on the connection for the statement to
        scan. ``dry`` (plain EXPLAIN) reads no rows.

        Returns None (run it streaming instead) under ``execution = 'auto'``
        when the kept columns outgrow twice :data:`BATCH_MEMORY`.
        """
        import pyarrow as pa

        from ..operators.predict import ColumnBlock

        kept = _kept_columns(bound, used, stmt)
        bound_session = fn.model  # the streaming session of the same model version: its signature, not its threads
        transposable = (
            not bound.options.batch_size
            and bound_session.fixed_batch is None
            and bound.options.backend == "onnxruntime"
        )
        col_major = [
            transposable and a.kind == "matrix" and len(a.shape) == 1
            and len(bound_session.input_shapes.get(a.input_name, ())) == 2
            for a in bound.args
        ]
        select: list[str] = [quote(c.name) for c in kept]
        slots: list[Any] = []
        for i, (a, sql, cm) in enumerate(zip(bound.args, bound.arg_sql, col_major)):
            if cm:
                base = bound.arg_types[i].rsplit("[", 1)[0]
                first = len(select)
                select.extend(f"CAST({quote(c)} AS {base}) AS \"__msql_a{i}_{j}\"" for j, c in enumerate(a.columns))
                slots.append(range(first, len(select)))
            else:
                slots.append(len(select))
                select.append(f'{sql} AS "__msql_a{i}"')
        where = f" WHERE {bound.null_filter}" if bound.options.on_null == "skip" and bound.null_filter else ""
        query = f'SELECT {", ".join(select)} FROM ({bound.input_sql}) AS "__msql_in"{where}' + (" LIMIT 0" if dry else "")
        args = bound.args
        names = tuple(a.input_name for a, cm in zip(args, col_major) if cm)
        # every core: DuckDB is not calling this session from several threads
        model = self._session(bound.model, intra=ort_backend.default_threads(), column_major=names)
        if names:
            renamed = {n: model.input_names[bound_session.input_names.index(n)] for n in names}
            args = tuple(replace(a, input_name=renamed[a.input_name]) if cm else a for a, cm in zip(args, col_major))
        runner = PredictFunction(model, args, bound.outputs, bound.options.on_null, fn.index,
                                 batch_size=bound.options.batch_size, on_error=bound.options.on_error,
                                 model_name=bound.model.name)
        feature_bytes = sum(_arg_bytes(a, t) for a, t in zip(bound.args, bound.arg_types)) or 1
        rows_per_batch = max(64, min(BATCH_ROWS, (32 << 20) // feature_bytes))
        limit = 2 * BATCH_MEMORY if bound.options.execution == "auto" else None
        run_rows = RUN_ROWS if bound.model.param_count > BATCH_MAX_PARAMS else rows_per_batch
        out_fields = list(fn.struct_type)
        batches: list = []
        kept_bytes = 0
        reader = None
        try:
            relation = self.duck.sql(query, params=params or None)
            reader_schema_types = list(relation.types)[: len(kept)]
            reader = relation.to_arrow_reader(rows_per_batch)
            schema = pa.schema(list(reader.schema)[: len(kept)] + out_fields)
            for whole in reader:
                for start in range(0, whole.num_rows, run_rows):
                    # a large model runs fastest on a few thousand rows at a time (activations stay in cache)
                    batch = whole.slice(start, run_rows)
                    fed = [ColumnBlock([batch.column(k) for k in slot]) if isinstance(slot, range) else batch.column(slot)
                           for slot in slots]
                    result = runner(*fed)
                    columns = [batch.column(k) for k in range(len(kept))] + [result.field(k) for k in range(len(out_fields))]
                    piece = pa.RecordBatch.from_arrays(columns, schema=schema)
                    if bound.options.on_error == "skip" and result.null_count:
                        piece = piece.filter(result.is_valid())  # rows the model failed on
                    batches.append(piece)
                    kept_bytes += piece.nbytes
                if limit is not None and kept_bytes > limit:
                    reader.close()
                    reader = None
                    return None
        except Exception as exc:
            if reader is not None:
                try:
                    reader.close()
                except Exception:
                    pass
            raise self.translate(exc, [("", runner, bound, params), *registered]) from exc
        table = pa.Table.from_batches(batches, schema=schema)
        name = f"__modelsql_batch_{index}"
        self.duck.register(name, table)
        held.sources.append(name)
        fn.execution = "batch" + (" (column-major input)" if any(col_major) else "")
        collations = _collations(reader_schema_types)
        cols = []
        for c, collation in zip(kept, collations):
            if collation:
                cols.append(f"{quote(c.name)} COLLATE {quote(collation)} AS {quote(c.name)}")
            elif _ARROW_SAFE.match(c.type):
                cols.append(quote(c.name))
            else:
                cols.append(f"CAST({quote(c.name)} AS {c.type}) AS {quote(c.name)}")
        cols += [quote(o.column) for o in bound.outputs]
        return sqlglot.parse_one(f'SELECT {", ".join(cols)} FROM "{name}"', read="duckdb")

    def _describe(self, input_sql: str, params: list, model: str) -> list[Column]:
        from ..dbapi import translate_duckdb_error

        try:
            cur = self.duck.execute(f'SELECT * FROM ({input_sql}) AS "__msql_in" LIMIT 0', params or None)
            desc = cur.description
            cur.fetchall()
        except Exception as exc:
            err = translate_duckdb_error(exc)
            raise type(err)(f"PREDICT(MODEL {model}): the input is not a valid relation: {err}", code=err.code) from exc
        return [Column(d[0], str(d[1])) for d in desc]

    def _key_columns(self, table: exp.Table) -> list[str]:
        try:
            rows = self.duck.execute(
                "SELECT constraint_column_names FROM duckdb_constraints() "
                "WHERE lower(table_name) = lower(?) AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
                [table.name],
            ).fetchall()
        except Exception:
            return []
        return [c for (names,) in rows for c in (names or [])]

    def _session(self, mv: ModelVersion, *, intra: Optional[int] = None, column_major: tuple[str, ...] = ()):
        """The cached ONNX Runtime session for ``mv``.

        ``intra`` defaults to ``cores // duckdb_threads`` (DuckDB's workers call
        a streaming PREDICT concurrently); ``column_major`` names inputs fed
        transposed (see :func:`~modelsql.formats.onnx_io.column_major_inputs`).
        """
        if intra is None:
            intra = max(1, ort_backend.default_threads() // max(1, self._duck_threads()))
        key = (str(self.store.root), mv.name, mv.version, mv.graph_digest, column_major)

        def load() -> bytes:
            data = self.load_model_bytes(mv)
            return column_major_inputs(data, column_major) if column_major else data

        return ort_backend.get_model(key, load, f'model "{mv.name}" version {mv.version}', intra_op_threads=intra)

    def _duck_threads(self) -> int:
        try:
            return int(self.duck.execute("SELECT current_setting('threads')").fetchall()[0][0])
        except Exception:
            return 1

    # ------------------------------------------------------------------ errors

    def translate(self, exc: BaseException, predicts) -> Error:
        """Turn an exception raised while a PREDICT query ran into the right PEP 249 error."""
        from ..dbapi import translate_duckdb_error

        if isinstance(exc, Error):
            return exc
        text = str(exc)
        for fn_name, fn, bound, in_params in predicts:
            if fn.error is not None:
                err = fn.error
                fn.error = None
                if isinstance(err, Error):
                    return err
                if NULL_MARKER in str(err):
                    return self._null_error(bound, in_params, getattr(fn, "null_counts", None))
                if isinstance(err, KeyboardInterrupt):
                    return OperationalError("The statement was interrupted.", code="interrupted")
                return InternalError(f"PREDICT over {bound.label} failed: {type(err).__name__}: {err}", code="predict_failed")
        m = _UDF_ERROR.search(text)
        if m and m.group(1) == "KeyboardInterrupt":
            return OperationalError("The statement was interrupted.", code="interrupted")
        if m:
            return InternalError(f"PREDICT failed: {m.group(1)}: {m.group(2).strip()}", code="predict_failed")
        return _wrong_length(text, predicts) or translate_duckdb_error(exc)

    def _null_error(self, bound: BoundPredict, params: list, chunk_counts: Optional[dict] = None) -> DataError:
        """The DataError for NULLs fed to a model: names each column with NULLs and its row count.

        The counts come from a query over the PREDICT's input. Outside
        autocommit mode the failed statement has aborted the transaction
        (DuckDB, like PostgreSQL, refuses further statements until ROLLBACK),
        so the count then runs on a second DuckDB cursor, which sees the
        committed data; if that is not possible, or it sees fewer NULLs than the
        chunk that failed (the input was changed in this transaction), the
        counts of the failing chunk are reported as lower bounds.
        """
        preds: list[tuple[str, str]] = []
        for a in bound.args:
            if a.kind == "array":
                types = {c.name: c.type for c in bound.columns}
                preds.append((a.columns[0], f"NOT {array_not_null_sql(a.columns[0], types[a.columns[0]])}"))
            else:
                preds.extend((col, f"{quote(col)} IS NULL") for col in a.columns)
        chunk_counts = dict(chunk_counts or {})
        counts: Optional[dict[str, int]] = None
        rows_with_null: Optional[int] = None
        if preds:
            sql = (
                "SELECT " + ", ".join(f"count(*) FILTER (WHERE {p})" for _, p in preds)
                + f", count(*) FILTER (WHERE {' OR '.join(p for _, p in preds)})"
                + f' FROM ({bound.input_sql}) AS "__msql_in"'
            )
            for fresh in (False, True):
                cur = None
                try:
                    cur = self.duck.cursor() if fresh else self.duck
                    row = cur.execute(sql, params or None).fetchall()[0]
                except Exception:
                    continue
                finally:
                    if fresh and cur is not None:
                        try:
                            cur.close()
                        except Exception:
                            pass
                found = {col: int(n) for (col, _), n in zip(preds, row) if n}
                if all(found.get(c, 0) >= n for c, n in chunk_counts.items()) and found:
                    counts, rows_with_null = found, int(row[-1])
                    break

        def rows(n: int) -> str:
            return f"{n} row{'' if n == 1 else 's'}"

        if counts is not None:
            where = ", ".join(f'"{c}" ({rows(n)})' for c, n in counts.items())
            total = f"; in all, {rows(rows_with_null)} with a NULL input"
        elif chunk_counts:
            where = ", ".join(f'"{c}" (at least {rows(n)})' for c, n in chunk_counts.items())
            total = ""
        else:
            where = ", ".join(f'"{c}"' for c in bound.fed_columns)
            total = ""
        return DataError(
            f"PREDICT(MODEL {bound.model.name}): NULL in input column(s) {where}{total}"
            + ". NULLs are never fed to a model: add on_null = 'skip' to leave those rows out, "
            "or on_null = 'null' to return NULL predictions for them.",
            code="null_input",
        )

IMPORT_OPTIONS = ("features", "description")
"""Options of ``IMPORT MODEL ... WITH (...)``: ``features`` (the columns feeding a single
input, in order) and ``description`` (free text kept in the catalog)."""


BATCH_MIN_ROWS = 65_536
"""``execution = 'auto'`` runs a PREDICT in batch mode only over at least this many (estimated) input rows."""
ROW_GROUP_ROWS = 122_880
"""Rows per DuckDB row group, its unit of scan parallelism."""
BATCH_MAX_PARAMS = 50_000
"""``execution = 'auto'`` runs models with more parameters streaming: a crude cost model (parameters ~ multiply-adds
per row for dense networks) standing in for a learned one. In ``benchmarks/predict_overhead.py`` batch execution
made the light model (2,410 parameters) 1.5x faster and the heavy one (300K) 1.1x slower."""
BATCH_MEMORY = 256 << 20
"""Bytes ``execution = 'auto'`` lets batch mode keep (passthrough columns read + outputs); past twice this
while running, the PREDICT is run again streaming."""
BATCH_ROWS = 32_768
"""Largest Arrow record batch a batch-mode PREDICT reads from DuckDB (fewer rows for wide inputs: about 32 MiB of features)."""
RUN_ROWS = 8_192
"""Rows per model run in batch mode for a model of more than :data:`BATCH_MAX_PARAMS` parameters: each record batch
is fed in slices of this many rows, the size at which ONNX Runtime ran the heavy model of
``benchmarks/predict_overhead.py`` fastest (larger slices spill activations out of cache). A light model runs on whole
record batches (1.1x faster than 8K-row slices there)."""

_ARROW_SAFE = re.compile(
    r"^(BOOLEAN|TINYINT|SMALLINT|INTEGER|BIGINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|FLOAT|DOUBLE|VARCHAR|DATE|"
    r"TIMESTAMP|BLOB)(\[\d*\])*$"
)
"""DuckDB types that come back from an Arrow round trip as themselves; other passthrough columns are cast back."""

_ARROW_UNSAFE = re.compile(r"\b(TIME WITH TIME ZONE|TIMETZ|BIT|BITSTRING|UHUGEINT)\b")
"""DuckDB types whose values an Arrow round trip changes (TIMETZ loses its offset, BIT its length, UHUGEINT
overflows): a batch-mode PREDICT does not carry them ('auto' streams; 'batch' refuses)."""

_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)


def _first_word(text: str) -> str:
    """The first keyword of a statement, after any comments, upper case."""
    rest = _LEADING_COMMENTS.sub("", text, count=1)
    return rest.split()[0].upper().rstrip(";") if rest.split() else ""


def _arrow_unsafe(type_text: str) -> bool:
    return bool(_ARROW_UNSAFE.search(re.sub(r"'(?:[^']|'')*'", "''", type_text)))  # not inside ENUM labels


_ROW_DEPENDENT = (exp.Where, exp.Limit, exp.Fetch, exp.Having, exp.Qualify, exp.Join, exp.Offset, exp.Pivot,
                  exp.Summarize)


def _in_top_level_from(node: exp.Expression, stmt: exp.Expression) -> bool:
    """Whether a PREDICT is read by the statement's own top-level FROM (so the statement consumes all of it):
    only FROM, table and FROM-subquery nodes lie between it and the top SELECT (of an INSERT or CTAS too)."""
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.Select):
            if child is not parent.args.get("from_") and child is not parent.args.get("from"):
                return False
        elif isinstance(parent, exp.Subquery):
            if not isinstance(parent.parent, exp.From):
                return False
        elif isinstance(parent, (exp.Insert, exp.Create)):
            if child is not parent.expression:
                return False
        elif not isinstance(parent, (exp.From, exp.Table)):
            return False
        child, parent = parent, parent.parent
    return True


def _collations(types) -> list[str]:
    """The collation each DuckDB type carries ('' for none), which an Arrow round trip drops."""
    try:
        import _duckdb

        return [_duckdb._collation(t) or "" for t in types]
    except Exception:
        return ["" for _ in types]


_TYPE_BYTES = {
    "BOOLEAN": 1, "TINYINT": 1, "UTINYINT": 1, "SMALLINT": 2, "USMALLINT": 2, "INTEGER": 4, "UINTEGER": 4,
    "FLOAT": 4, "REAL": 4, "DATE": 4, "BIGINT": 8, "UBIGINT": 8, "DOUBLE": 8, "TIMESTAMP": 8, "TIME": 8,
    "HUGEINT": 16, "UHUGEINT": 16, "UUID": 16, "INTERVAL": 16,
}


def _arg_bytes(arg, type_text: str) -> int:
    """Rough bytes per row of one PREDICT argument: its type's, or its input's per-row size (a list's is a guess)."""
    known = [d for d in arg.shape if d > 0]
    return max(_type_bytes(type_text), _type_bytes(ONNX_TO_DUCKDB.get(arg.elem_type, "FLOAT")) * math.prod(known))


def _type_bytes(type_text: str) -> int:
    """Rough in-memory bytes per value of a DuckDB type (arrays multiply; text and lists are guesses)."""
    t = type_text.strip().upper()
    m = re.match(r"^(.*)\[(\d*)\]$", t)
    if m:
        inner = _type_bytes(m.group(1))
        return inner * int(m.group(2)) if m.group(2) else 8 + inner * 16
    if t.startswith("DECIMAL"):
        return 16
    return _TYPE_BYTES.get(t, 32)


def _kept_columns(bound: BoundPredict, used: Optional[set[str]], stmt) -> list[Column]:
    """The input columns a batch-mode PREDICT passes through: all of them, or, when the statement's
    column references are known (:func:`~modelsql.planner.rules.referenced_names`: ``USING`` names count,
    ``NATURAL`` joins make them unknown), only those it names (as the stream plan's projection pushdown would)."""
    if used is None:
        return list(bound.columns)
    aliases = {t.alias_or_name.lower() for t in stmt.find_all(exp.Table)} | {
        s.alias.lower() for s in stmt.find_all(exp.Subquery) if s.alias
    }
    if used & aliases:
        return list(bound.columns)  # a table alias selected as a struct of its columns
    return [c for c in bound.columns if c.name.lower() in used]


def _no_repeats(options, where: str) -> None:
    """Refuse an option written twice (the second would silently win)."""
    seen: set[str] = set()
    for o in options or []:
        key = o.this.name.lower()
        if key in seen:
            raise ProgrammingError(f'{where}: option "{key}" is given twice.', code="duplicate_option")
        seen.add(key)


def describe_bound(bound: BoundPredict, execution: Optional[str] = None) -> str:
    """One readable paragraph on how a PREDICT was bound (for EXPLAIN)."""
    feeds = "; ".join(
        f"{a.input_name} {a.elem_type}{list(a.shape)} <- "
        + (", ".join(a.columns) if len(a.columns) <= 8 else f"{', '.join(a.columns[:4])}, ... {a.columns[-1]} ({len(a.columns)} columns)")
        for a in bound.args
    )
    outs = ", ".join(f"{o.column} {o.duckdb_type}" for o in bound.outputs)
    opts = bound.options
    return (
        f"PREDICT {bound.label} [{opts.backend}]\n"
        f"inputs: {feeds}\noutputs: {outs}\n"
        f"on_null: {opts.on_null}" + (f", on_error: {opts.on_error}" if opts.on_error != "error" else "")
        + (f", batch_size: {opts.batch_size}" if opts.batch_size else "")
        + (f"\nexecution: {execution}" if execution and execution != "stream" else "")
        + (f"\nrows run one at a time: {bound.model.batch_dependence}"
           if bound.model.batch_dependence and opts.isolate_rows else "")
    )


_MISSING_TABLE = re.compile(r'Referenced table "([^"]+)" not found')
_NO_FROM = re.compile(r'Referenced column "[^"]+" was not found because the FROM clause is missing')


def _correlated(err: Error, p: PredictTable) -> Optional[NotSupportedError]:
    """The known-limit error for a PREDICT whose input did not bind because it refers to the enclosing
    query (names one of its tables, or has no FROM of its own inside one); None for any other error."""
    if err.code != "binder_error":
        return None
    text = str(err)
    inside = {id(n) for n in p.walk()}
    outer = {
        n.alias_or_name.lower()
        for n in p.root().find_all(exp.Table, exp.Subquery, exp.Lateral)
        if id(n) not in inside and n is not p.parent and n.alias_or_name
    }
    missing = _MISSING_TABLE.search(text)
    if not ((missing and missing.group(1).lower() in outer) or (outer and _NO_FROM.search(text))):
        return None
    where = text[text.find("\nLINE "):] if "\nLINE " in text else ""
    model = p.this.model_name
    return NotSupportedError(
        f"PREDICT(MODEL {model}): its input refers to the enclosing query"
        + (f' (table "{missing.group(1)}")' if missing else "")
        + ", which is a known limit: a PREDICT's input is bound on its own, so a correlated LATERAL or "
        "subquery cannot reach outer columns (see Known limits in the README). Join the predictions to the "
        f"outer table instead, e.g. SELECT ... FROM t JOIN PREDICT(MODEL {model}, TABLE t) AS p ON p.id = t.id."
        + where,
        code="correlated_predict",
    )


_LIST_TO_ARRAY = re.compile(
    r"Cannot cast list with length (\d+) to array with length (\d+) when casting from source column \"?([^\"\n]+?)\"?$", re.M
)


def _wrong_length(text: str, predicts) -> Optional[DataError]:
    """The DataError for list rows of another length than the model input takes (DuckDB's cast of the
    column to the input's ``T[k]`` failed), naming the column, the lengths and the input; else None."""
    m = _LIST_TO_ARRAY.search(text)
    if not m:
        return None
    got, want, column = int(m.group(1)), int(m.group(2)), m.group(3)
    for _, _, bound, _ in predicts:
        for a in bound.args:
            if a.kind == "array" and a.columns[0].lower() == column.lower():
                return DataError(
                    f'PREDICT(MODEL {bound.model.name}): column "{a.columns[0]}" holds rows of {got} values, but model '
                    f'input "{a.input_name}" takes {want} values per row (per-row shape {list(a.shape)}).',
                    code="wrong_input_shape",
                )
    return None


def _predicts_in_order(tree: exp.Expression) -> list[PredictTable]:
    """The PREDICTs of ``tree`` in post-order with WITH clauses first: every PREDICT comes
    after the PREDICTs inside its input and after those in the CTEs it can name."""
    out: list[PredictTable] = []
    stack: list[tuple[exp.Expression, bool]] = [(tree, False)]
    while stack:
        node, done = stack.pop()
        if done:
            if isinstance(node, PredictTable):
                out.append(node)
            continue
        stack.append((node, True))
        children = list(node.iter_expressions())
        w = node.args.get("with_")
        at = next((i for i, c in enumerate(children) if c is w), None) if w is not None else None
        if at:
            children.insert(0, children.pop(at))
        for child in reversed(children):
            stack.append((child, False))
    return out


def _ctes_in_scope(node: exp.Expression) -> list[exp.CTE]:
    """The CTEs a table reference at ``node`` can name, outermost first (inner ones shadow outer ones)."""
    scopes: list[list[exp.CTE]] = []
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            ctes = list(parent.expressions)
            at = next((i for i, c in enumerate(ctes) if c is child), len(ctes))
            scopes.append(ctes[: at + 1] if parent.args.get("recursive") else ctes[:at])
        else:
            w = parent.args.get("with_")
            if isinstance(w, exp.With) and w is not child:
                scopes.append(list(w.expressions))
        child, parent = parent, parent.parent
    merged: dict[str, exp.CTE] = {}
    for scope in reversed(scopes):
        for cte in scope:
            merged.pop(cte.alias_or_name.lower(), None)
            merged[cte.alias_or_name.lower()] = cte
    return list(merged.values())


def _depth(node: exp.Expression) -> int:
    d = 0
    while node.parent is not None:
        node = node.parent
        d += 1
    return d


def _renumber(tree: exp.Expression) -> tuple[str, list[int]]:
    """DuckDB SQL of ``tree`` with its ``$k`` placeholders renumbered 1..m; returns (sql, original k's)."""
    tree = tree.copy()
    holders = [p for p in tree.find_all(exp.Placeholder) if str(p.this).isdigit()]
    distinct = sorted({int(p.this) for p in holders})
    mapping = {k: i + 1 for i, k in enumerate(distinct)}
    for p in holders:
        p.set("this", str(mapping[int(p.this)]))
    return msql.to_duckdb_sql(tree), distinct


def _value(node: exp.Expression, params: list) -> Any:
    """Python value of an option / source expression (literals, tuples, names, ``$k``)."""
    if node is None or isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Placeholder):
        return params[int(node.this) - 1]
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        return -_value(node.this, params)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            return float(text)
    if isinstance(node, exp.Tuple):
        return tuple(_value(e, params) for e in node.expressions)
    if isinstance(node, (exp.Identifier, exp.Column)):
        return node.name
    return node.sql()


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _feature_names(features: Any, model: str) -> tuple[str, ...]:
    """Validate ``features`` given at import: a sequence (not a string) of distinct, non-empty column names."""
    if isinstance(features, (str, bytes)) or not hasattr(features, "__iter__"):
        raise ProgrammingError(
            f'Model "{model}": features must be a list of column names, e.g. features=["a", "b"], '
            f"not {type(features).__name__} {features!r}.",
            code="bad_option",
        )
    return check_feature_names(features, f'Model "{model}"')


def _check_features(name: str, feats: Sequence[str], inputs) -> None:
    """Feature names (given, or known from scikit-learn) fit the model's single input."""
    from .bind import row_shape, row_width

    if len(inputs) != 1:
        raise ProgrammingError(
            f'Model "{name}": features apply to a model with one input; it has {len(inputs)}.', code="feature_mismatch"
        )
    width = row_width(row_shape(inputs[0]))
    if width is not None and width != len(feats):
        raise ProgrammingError(
            f'Model "{name}": input "{inputs[0].name}" takes {width} values per row, but {len(feats)} features were named.',
            code="feature_mismatch",
        )
    check_feature_names(feats, f'Model "{name}"')


