"""Model statements: IMPORT / CREATE [OR REPLACE] MODEL, DROP MODEL, SHOW MODELS, DESCRIBE MODEL,
EXPORT MODEL and VACUUM MODELS, each bound to its plan node (:mod:`modelsql.engine.query.plan`) and
carried out here; and :func:`import_model`, which ``Connection.import_model`` calls too.

Writes commit the connection's transaction first and run in a catalog
transaction of their own, so a model is never half in the catalog.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import TYPE_CHECKING, Any, Optional, Sequence

from modelsql.analyses.batch_axis import batch_dependence
from modelsql.analyses.static_features import static_features
from modelsql.catalog.entries import ModelVersion
from modelsql.catalog.lineage import Origin
from modelsql.converters import check_conversion, is_sklearn_estimator, to_onnx
from modelsql.errors import DataError, IntegrityError, InternalError, ProgrammingError
from modelsql.onnxformat.describe import param_count, signature
from modelsql.onnxformat.identity import architecture_fingerprint, content_digest
from modelsql.converters.imputation_check import check_imputation
from modelsql.onnxformat.metadata import metadata_imputed, outputs_entry, write_metadata
from modelsql.onnxformat.split import split_model
from modelsql.sql.models import DescribeModel, DropModel, ExportModel, ImportModel, ShowModels, VacuumModels
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.models.exports import check_export_target, write_export
from modelsql.engine.query.bind_predict import (bind_outputs, check_feature_names, check_signature, imputed_inputs,
                                               row_shape, row_width)
from modelsql.engine.handlers import catalog_write_retrying, handles, retrying
from modelsql.engine.options import value
from modelsql.engine.options.declared import IMPORT_MODEL
from modelsql.engine.models.plans import CreateModel, DescribeModelPlan, DropModelPlan, ExportModelPlan
from modelsql.engine.result import Result

if TYPE_CHECKING:
    from modelsql.engine.session import Session

IMPORT_OPTIONS = IMPORT_MODEL
"""Options of ``IMPORT MODEL ... WITH (...)`` (:data:`modelsql.engine.options.declared.IMPORT_MODEL`):
``features`` (the columns feeding a single input, in order) and ``description`` (free text kept in the
catalog)."""

TRAINABLE_HANDLERS: dict = {}
"""Handlers of ``CREATE MODEL ... FROM PYTHON`` (``"python"``), ``FROM STUDY`` (``"study"``) and ``DROP MODEL`` of
a trainable (``"drop"``), registered by :mod:`modelsql.engine.models.trainables`, and of ``CREATE MODEL ... AS
SELECT`` (``"query"``), registered by :mod:`modelsql.engine.models.train_statement` (both build on this module's
:func:`import_model`)."""

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---------------------------------------------------------------- binding


def bind_import(stmt: ImportModel, params: list) -> CreateModel:
    """The :class:`CreateModel` plan of an ``IMPORT MODEL`` / ``CREATE MODEL`` statement.

    Raises:
        ProgrammingError: contradictory clauses (``parse_error``), an option twice, unknown or of a bad value
            (``duplicate_option``, ``unknown_option``, ``invalid_option``).
    """
    if stmt.args.get("replace") and stmt.args.get("exists"):
        raise ProgrammingError(
            "CREATE OR REPLACE MODEL and IF NOT EXISTS contradict each other; use one of them.",
            code="parse_error",
        )
    options = IMPORT_OPTIONS.parse(stmt, params, where=f"IMPORT MODEL {stmt.this.model_name}")
    features = options["features"]
    given = {k: v for k, v in options.items() if k != "features" and v is not None}
    return CreateModel(
        name=stmt.this.model_name, source=str(value(stmt.args["source"], params)),
        replace=bool(stmt.args.get("replace")), if_not_exists=bool(stmt.args.get("exists")),
        features=features, options=tuple(sorted((k, str(v)) for k, v in given.items())),
    )


# ---------------------------------------------------------------- handlers


@handles(ImportModel)
def _import(stmt: ImportModel, session: Session, params: list) -> Result:
    if stmt.args.get("python") or stmt.args.get("study") is not None or stmt.args.get("query") is not None:
        kind = "python" if stmt.args.get("python") else "study" if stmt.args.get("study") is not None else "query"
        return TRAINABLE_HANDLERS[kind](stmt, session, params)
    plan = bind_import(stmt, params)
    import_model(session, plan.name, plan.source, features=plan.features, replace=plan.replace,
                 if_not_exists=plan.if_not_exists, options=dict(plan.options))
    return Result(session.duck, rowcount=1)


@handles(DropModel)
def _drop(stmt: DropModel, session: Session, params: list) -> Result:
    session.check_writable()
    ref = stmt.this
    plan = DropModelPlan(ref.model_name.lower(), ref.version_number, bool(stmt.args.get("exists")))
    if not session.catalog.exists(plan.name) and session.catalog.studies.trainable(plan.name) is not None:
        return TRAINABLE_HANDLERS["drop"](plan, session)
    if not session.catalog.exists(plan.name):
        if plan.if_exists:
            return Result(session.duck, rowcount=0)
        session.get_model(plan.name, None, ref)  # raises model_not_found with "did you mean"
    if plan.version is not None:
        if plan.if_exists and plan.version not in session.catalog.versions(plan.name):
            return Result(session.duck, rowcount=0)
        session.get_model(plan.name, plan.version, ref)
    removed = catalog_write_retrying(session, lambda: session.catalog.drop(plan.name, plan.version,
                                                                           missing_ok=plan.if_exists))
    return Result(session.duck, rowcount=removed)


@handles(ShowModels, reads_only=True)
def _show(stmt: ShowModels, session: Session, params: list) -> Result:
    session.begin_if_needed()
    session.run(session.catalog.show_models_sql(), None)
    return session.duckdb_result("SELECT")


@handles(DescribeModel, reads_only=True)
def _describe(stmt: DescribeModel, session: Session, params: list) -> Result:
    ref = stmt.this
    plan = DescribeModelPlan(session.get_model(ref.model_name, ref.version_number, ref))
    session.begin_if_needed()
    q, qp = session.catalog.describe_model_sql(plan.model.name, plan.model.version)
    session.run(q, qp)
    return session.duckdb_result("SELECT")


@handles(ExportModel, reads_only=True)
def _export(stmt: ExportModel, session: Session, params: list) -> Result:
    ref = stmt.this
    plan = ExportModelPlan(session.get_model(ref.model_name, ref.version_number, ref),
                           str(value(stmt.args["target"], params)))
    check_export_target(session, plan.target, "EXPORT MODEL")
    proto = artifacts.load_model_proto(session.store, plan.model)
    write_catalog_metadata(proto, plan.model)
    write_export(session, plan.target, proto, "EXPORT MODEL")  # atomic: a failure leaves the old file
    return Result(session.duck, rowcount=1)


@handles(VacuumModels)
def _vacuum(stmt: VacuumModels, session: Session, params: list) -> Result:
    session.check_writable()
    session.run("SELECT 1", None)  # an aborted transaction says so here; COMMIT would end it silently
    session.duck.fetchall()
    session.commit()  # (no catalog write: the store's sweep alone, so not catalog_write)
    # read under the store's sweep lock, after its pending writes: a writer that committed before is seen,
    # one that has not is pending (BlobStore.collect), so no blob a writer may still commit is deleted
    removed, freed = session.store.collect(session.catalog.referenced_digests)
    return Result(
        session.duck,
        description=[("blobs_removed", "BIGINT", None, None, None, None, False),
                     ("bytes_freed", "BIGINT", None, None, None, None, False)],
        rows=[(removed, freed)],
    )


# ---------------------------------------------------------------- import


def _static(proto) -> dict:
    """The catalog's static features of a model (the cost model's inputs)."""
    f = static_features(proto)
    return {"flops": f.flops, "conv_flops": f.conv_flops, "gemm_flops": f.gemm_flops, "nodes": f.nodes}


def import_model(
    session: Session,
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
    accept_mismatch: bool = False,
    provenance: Optional[tuple[str, str]] = None,
    checked: Optional[tuple[int, float, int]] = None,
    origin: Optional[Origin] = None,
    tolerance: Optional[float] = None,
) -> ModelVersion:
    """Convert, check, store and catalog one model version (see ``Connection.import_model``).

    ``provenance``: ``(kind, source)`` to record instead of what the conversion reports (a
    pipeline step converted by :mod:`modelsql.converters.sklearn_steps` is ``("sklearn", "sklearn:<class>")``);
    ``checked``: that conversion's check, ``(rows, max abs diff, label mismatches)``; ``origin``: where the
    version came from, for ``modelsql.model_origins`` (default: the file and its digest, the bytes' digest, or
    the object's class, :func:`origin_of`); ``tolerance``: the most the conversion's numeric outputs may differ
    from the estimator's (:func:`~modelsql.converters.conversion_check.check_conversion`).

    The blobs are written (atomically, each fsynced, under a write lease of the store so no VACUUM
    deletes them) before the catalog transaction that references them commits, so a crash at any point
    leaves either the whole new version or none of it; stray blobs are collected by ``VACUUM MODELS``.
    Whether the name is free is checked again inside that transaction: of two connections importing
    one name at once, one wins and the other gets ``duplicate_model`` (or, with ``if_not_exists``, the
    winner's version).

    Raises:
        IntegrityError: ``duplicate_model``. ProgrammingError: ``invalid_name``, bad features. DataError,
            NotSupportedError: the model cannot be converted or stored (see :func:`prepare_model`).
    """
    session.check_writable()
    if existing_model(session, name, replace, if_not_exists):
        return session.catalog.get(name.lower())
    with session.store.writing():
        fields, kinds = prepare_model(session, name, model, example_input=example_input, features=features,
                                      input_names=input_names, output_names=output_names, options=options,
                                      accept_mismatch=accept_mismatch, provenance=provenance, checked=checked,
                                      tolerance=tolerance)
        origin = origin or origin_of(model, fields["source"])
        session.commit()  # not catalog_write: retried on a conflict, a transaction per try (retrying)
        try:
            return add_version(session.catalog, fields, kinds, replace=replace, if_not_exists=if_not_exists,
                               origin=origin)
        finally:
            session.changed()  # a plan of "the latest version" is stale


def prepare_model(session: Session, name: str, model: Any, *, example_input: Any = None,
                  features: Optional[Sequence[str]] = None, input_names: Optional[Sequence[str]] = None,
                  output_names: Optional[Sequence[str]] = None, options: Optional[dict] = None,
                  accept_mismatch: bool = False, provenance: Optional[tuple[str, str]] = None,
                  checked: Optional[tuple[int, float, int]] = None,
                  tolerance: Optional[float] = None) -> tuple[dict, dict]:
    """Convert and check ``model`` and put its blobs in the store; nothing is catalogued. Call it inside
    ``session.store.writing()`` and catalog the result with :func:`add_version` (or
    ``Catalog.add_version``) before the lease ends.

    Returns:
        ``(fields, kinds)``: the :class:`ModelVersion` fields but ``version``, and ``{digest: kind}``.

    Raises:
        ProgrammingError, DataError, NotSupportedError: as :func:`import_model`.
    """
    key = name.lower()
    if features is not None:
        features = _feature_names(features, key)
    proto, kind, source, known = to_onnx(
        model, example_input=example_input, feature_names=features, input_names=input_names,
        output_names=output_names,
    )
    if provenance is not None:
        kind, source = provenance
    feats = tuple(features) if features else (tuple(known) if known else None)
    imputed = metadata_imputed(proto, f'model "{key}"')
    if imputed and not (options or {}).get("imputed"):  # an exported model that imputes still does, once checked
        options = {**(options or {}), "imputed": json.dumps(list(check_imputation(proto, imputed, f'model "{key}"')))}
    facts = _facts(key, model, proto, kind, feats, example_input, accept_mismatch, tolerance)
    classes = estimator_classes(model) if kind == "sklearn" else None
    if classes is not None and "classes" not in (options or {}):
        options = {**(options or {}), "classes": classes}
    if checked is not None:
        facts.update(check_rows=checked[0], check_max_abs_diff=checked[1], check_label_mismatches=checked[2])
    graph, tensors = split_model(proto)
    artifacts.check_loads(proto.SerializeToString(), f'model "{key}"')
    graph_digest = session.store.put(graph)
    for t, payload in tensors:
        if session.store.put(payload) != t.digest:
            raise InternalError(f"digest mismatch storing tensor {t.name}", code="digest_mismatch")
    fields = dict(facts, name=key, graph_digest=graph_digest, graph_bytes=len(graph),
                  tensors=tuple(t for t, _ in tensors), param_count=param_count(proto), source=source,
                  kind=kind, features=feats, options=tuple(sorted((options or {}).items())),
                  content_digest=content_digest(graph),
                  fingerprint=architecture_fingerprint(graph), **_static(proto))
    kinds = {graph_digest: "graph"}
    kinds.update({t.digest: "tensor" for t, _ in tensors})
    return fields, kinds


def estimator_classes(model: Any) -> Optional[str]:
    """A scikit-learn classifier's ``classes_`` as JSON (the order of its probabilities' columns, which EVALUATE
    reads: the graph does not always name them), or None for anything else (a multi-label classifier's
    ``classes_`` is a list of arrays)."""
    from sklearn.base import is_classifier

    classes = getattr(model, "classes_", None) if is_sklearn_estimator(model) and is_classifier(model) else None
    if classes is None or getattr(classes, "ndim", 0) != 1:
        return None
    return json.dumps([c.item() if hasattr(c, "item") else c for c in classes])


def _facts(key: str, model: Any, proto, kind: str, feats, example_input, accept_mismatch: bool,
           tolerance: Optional[float] = None) -> dict:
    """What the catalog records of a converted model beyond its bytes: signature, batch dependence
    (:func:`~modelsql.analyses.batch_axis.batch_dependence`) and, for an estimator, the conversion check.

    Raises:
        DataError: no outputs (``invalid_onnx``); labels disagree, or numbers by more than ``tolerance``
            (``conversion_mismatch``).
        NotSupportedError: an input or output no column can carry. ProgrammingError: features that do not fit.
    """
    inputs, outputs, opset = signature(proto)
    if not outputs:
        raise DataError(f'Model "{key}" has no graph outputs: there is nothing to predict.', code="invalid_onnx")
    check_signature(key, inputs, outputs)
    if feats is not None:
        _check_features(key, feats, inputs)
    check = None
    if kind == "sklearn" and is_sklearn_estimator(model):  # the converted graph against the estimator
        check = check_conversion(model, proto, example_input, features=feats, accept_mismatch=accept_mismatch,
                                 tolerance=tolerance)
    return dict(
        inputs=tuple(inputs), outputs=tuple(outputs), opset=opset,
        batch_dependence=batch_dependence(proto),
        check_rows=check.rows if check else None,
        check_max_abs_diff=check.max_abs_diff if check else None,
        check_label_mismatches=check.label_mismatches if check else None,
    )


def origin_of(model: Any, source: str) -> Origin:
    """The origin of a version imported from ``model``: a file path (``sha256:`` of its bytes), bytes (their
    digest), else a Python object (``source``, what the conversion reports: ``sklearn:Pipeline``)."""
    if isinstance(model, (str, os.PathLike)):
        digest = hashlib.sha256()
        with open(model, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return Origin("file", os.path.abspath(os.fspath(model)), f"sha256:{digest.hexdigest()}")
    if isinstance(model, (bytes, bytearray, memoryview)):
        return Origin("bytes", source, f"sha256:{hashlib.sha256(bytes(model)).hexdigest()}")
    return Origin("object", source)


def add_version(catalog, fields: dict, kinds: dict, *, replace: bool = True,
                if_not_exists: bool = False, origin: Optional[Origin] = None) -> ModelVersion:
    """Catalog the next version of ``fields["name"]`` (the blobs are stored) in one transaction that
    first checks the name is free (unless ``replace``), retrying when another connection writes the
    same rows first (DuckDB's optimistic concurrency refuses one commit).

    Returns:
        the new version; with ``if_not_exists``, the existing latest version when the name is taken.

    ``origin`` is recorded with the version (``modelsql.model_origins``), in its transaction.

    Raises:
        IntegrityError: ``duplicate_model`` (the name is taken, by a model or a trainable).
        OperationalError: ``read_only``; ``transaction_error`` when the conflicts do not stop.
    """
    key = fields["name"]

    def add() -> Optional[int]:
        if not replace and _name_taken(catalog, key, if_not_exists):
            return None
        version = catalog.next_version(key)
        catalog.add_version(ModelVersion(version=version, **fields), kinds)
        if origin is not None:
            catalog.lineage.add(key, version, origin)
        return version

    version = retrying(catalog, add)
    return catalog.get(key, version)


def existing_model(session: Session, name: str, replace: bool, if_not_exists: bool) -> bool:
    """True when model ``name`` exists and IF NOT EXISTS says to leave it; False when a new version may be
    added (the name is free, or OR REPLACE).

    Raises:
        ProgrammingError: ``invalid_name``.
        IntegrityError: ``duplicate_model`` (the model exists without OR REPLACE / IF NOT EXISTS, or a trainable
            has the name).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ProgrammingError(
            f'Invalid model name "{name}": use letters, digits and underscores, not starting with a digit.',
            code="invalid_name",
        )
    key = name.lower()
    catalog = session.catalog
    if not replace and _name_taken(catalog, key, if_not_exists):
        return True
    if catalog.studies.trainable(key) is not None:
        raise _trainable_clash(key)
    return False


def _name_taken(catalog, key: str, if_not_exists: bool) -> bool:
    """True when model ``key`` exists and IF NOT EXISTS leaves it; False when the name is free.

    Raises:
        IntegrityError: ``duplicate_model``: the model exists (without IF NOT EXISTS), or a trainable has the name.
    """
    if catalog.exists(key):
        if if_not_exists:
            return True
        raise IntegrityError(
            f'Model "{key}" already exists (versions {", ".join(map(str, catalog.versions(key)))}). '
            f"Use CREATE OR REPLACE MODEL to add a version, or IMPORT MODEL IF NOT EXISTS.",
            code="duplicate_model",
        )
    if catalog.studies.trainable(key) is not None:
        raise _trainable_clash(key)
    return False


def _trainable_clash(key: str) -> IntegrityError:
    return IntegrityError(f'Model "{key}" already exists as a trainable (CREATE MODEL ... FROM PYTHON); models '
                          "and trainables share names: DROP MODEL it or choose another name.", code="duplicate_model")


def _feature_names(features: Any, model: str) -> tuple[str, ...]:
    """Validate ``features`` given at import: a sequence (not a string) of distinct, non-empty column names."""
    if isinstance(features, (str, bytes)) or not hasattr(features, "__iter__"):
        raise ProgrammingError(
            f'Model "{model}": features must be a list of column names, e.g. features=["a", "b"], '
            f"not {type(features).__name__} {features!r}.",
            code="invalid_option",
        )
    return check_feature_names(features, f'Model "{model}"')


def _check_features(name: str, feats: Sequence[str], inputs) -> None:
    """Feature names (given, or known from scikit-learn) fit the model's single input."""
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


# ---------------------------------------------------------------- export


def write_catalog_metadata(proto, mv) -> None:
    """What the catalog knows of ``mv`` (a model or a pipeline version), into ``proto``'s metadata (see
    :mod:`modelsql.onnxformat.metadata`), so importing the exported file binds the same columns."""
    from modelsql import __version__

    options = dict(mv.options)
    imputed = imputed_inputs(mv)
    write_metadata(proto, {
        "features": list(mv.features) if mv.features else None,
        "outputs": outputs_entry(bind_outputs(mv, ())),
        "description": options.get("description"),
        "imputed": [i.name for i in mv.inputs if i.name.lower() in imputed] or None,
        "version": __version__,
        "source": {mv.kind if mv.kind == "pipeline" else "model": mv.name, "version": mv.version, "kind": mv.kind,
                   "from": mv.source},
    })
