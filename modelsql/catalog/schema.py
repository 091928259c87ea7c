"""The catalog's DuckDB schema: DDL, comments, and migrations between schema versions.

The catalog lives in the schema ``modelsql`` of the user's own database (the same
DuckDB file as their tables), so it can be inspected with plain SQL
(``SELECT * FROM modelsql.models``). Tables:

``modelsql.meta(key, value)``
    Key/value facts about the catalog itself; ``schema_version`` is the one that matters.
``modelsql.model_versions``
    One row per (model, version): where it came from, its graph blob, sizes, options.
``modelsql.model_inputs`` / ``modelsql.model_outputs``
    One row per graph input / output of a version, in graph order (``position`` from 0).
``modelsql.model_tensors``
    One row per stored initializer of a version (``position`` from 0, graph order).
``modelsql.blobs(digest, nbytes, kind)``
    Every blob of the content-addressed store that the catalog references.
``modelsql.pipeline_versions`` / ``modelsql.pipeline_steps`` / ``modelsql.pipeline_feeds``
    One row per (pipeline, version); one per step of it (a catalog model version, in
    order); one per input of each step, naming what feeds it (a pipeline input, or an
    output of an earlier step). Schema 3.
``modelsql.trainable_versions`` / ``modelsql.studies`` / ``modelsql.trials`` / ``modelsql.stages``
    Trainable factories (``CREATE MODEL m FROM PYTHON``), hyper-parameter studies (``TUNE``),
    their trials, and the stages of the stage trees they train in (Hippo). Schema 5.
``modelsql.traces``
    Latency traces recorded by PROFILE: every timed run of a model in one configuration. Schema 6;
    schema 7 adds each trace's cost-model ``features``.
``modelsql.trace_operators``
    Per trace, the time ONNX Runtime's profiler gave each operator type. Schema 7.
``modelsql.compiled``
    Compiled artifacts of other backends (TVM): per model version, target and batch bucket, the
    artifact's blob, and the check against ONNX Runtime that decides whether it is trusted or
    declined (with the reason). Schema 7.
``modelsql.cost_models``
    Each fit of the learned cost model (the catalog model ``modelsql_cost``): the traces it was
    trained on and its measured accuracy. Schema 7.
``modelsql.code_signatures``
    Which code artifacts (a Python program, a trainable's factory, a compiled library) a user's key
    trusts: an HMAC over the artifact's digest with a key kept outside the database
    (:mod:`modelsql.signing`). Schema 8.
``modelsql.version_marks``
    The highest version number each model and pipeline name was ever given (a dropped version's number
    is never given again). Schema 9, which also adds each study's owner (``owner_host``, ``owner_start``)
    and ``heartbeat_at``.
``modelsql.evaluations``, ``modelsql.model_aliases``
    Every EVALUATE of a model or pipeline version: its metrics, the input it read (the text and a fingerprint
    of the rows) and when; and the aliases that name a model's versions. Schema 10.
``modelsql.model_origins``, ``modelsql.model_tags``, view ``modelsql.lineage``
    Where each model version came from (a file and its digest, an object, a Python reference, the query and
    rows it was trained on, a study's trial, the pipeline FINETUNE started from); tags on models and versions;
    the lineage graph as edges (a version from its origin, a pipeline version from its step models).
    Schema 11.

Views: ``modelsql.models`` (one row per model, its latest version),
``modelsql.pipelines`` (one row per pipeline, its latest version), ``modelsql.trainables``
(one row per trainable model, its latest version) and
``modelsql.storage`` (one row: totals and the dedup ratio that PRETZEL's Object
Store gives when identical parameters are stored once).

There are no foreign keys: DuckDB's foreign keys block deletes of referenced rows
inside one transaction, so referential integrity is kept by
:class:`modelsql.catalog.Catalog`.

Shapes are ``VARCHAR[]``: each dimension is its int as text (``'64'``), its
symbolic name (``'N'``), or ``'?'`` when unknown; a NULL shape means the rank is
unknown.

Migrations: :data:`MIGRATIONS` maps ``from_version`` to a function ``f(con)`` that
upgrades a catalog from ``from_version`` to ``from_version + 1``. The catalog runs
the chain, all in one transaction, when it opens an older catalog, and writes the
new ``schema_version`` after each step.
"""

from __future__ import annotations

import ast
import json
from typing import Callable, Dict

import duckdb

SCHEMA_VERSION = 12
"""The catalog schema version this modelsql writes and reads."""

SCHEMA = "modelsql"


def quote_ident(name: str) -> str:
    """``name`` as a DuckDB identifier in double quotes (a database's name: ``"my db"``)."""
    return '"' + name.replace('"', '""') + '"'

Migration = Callable[[duckdb.DuckDBPyConnection], None]

MIGRATIONS: Dict[int, Migration] = {}  # filled in below, after the DDL it shares
"""``{from_version: f(con)}``: each upgrades the catalog by exactly one version.

``f`` runs inside the open transaction on the connection the catalog was opened
with; it must not begin or commit, and may refer to the catalog as ``modelsql.<table>``.
"""

TABLES = ("meta", "model_versions", "model_inputs", "model_outputs", "model_tensors", "blobs",
          "pipeline_versions", "pipeline_steps", "pipeline_feeds", "merged_graphs", "trainable_versions", "studies", "trials", "stages", "traces",
          "trace_operators", "compiled", "cost_models", "code_signatures", "version_marks", "evaluations",
          "model_aliases", "model_origins", "model_tags")
VIEWS = ("models", "storage", "pipelines", "families", "trainables", "lineage")


def _io_table(table: str, role: str) -> str:
    return f"""
CREATE TABLE {{s}}.{table} (
    name        VARCHAR NOT NULL,
    version     INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    tensor_name VARCHAR NOT NULL,
    elem_type   VARCHAR NOT NULL,
    shape       VARCHAR[],
    PRIMARY KEY (name, version, position)
);
COMMENT ON TABLE {{s}}.{table} IS 'Graph {role}s of each model version, in graph order.';
COMMENT ON COLUMN {{s}}.{table}.position IS 'Index of the {role} in the graph, from 0.';
COMMENT ON COLUMN {{s}}.{table}.tensor_name IS 'The ONNX value name of the {role}.';
COMMENT ON COLUMN {{s}}.{table}.elem_type IS 'ONNX element type, upper case (FLOAT, INT64, STRING ...).';
COMMENT ON COLUMN {{s}}.{table}.shape IS 'One entry per dimension: its size as text, its symbolic name, or ''?'' when unknown. NULL when the rank is unknown.';
"""


_V2_COMMENTS = """
COMMENT ON COLUMN {s}.model_versions.batch_dependence IS 'Why a row''s outputs may depend on the other rows run with it (a node that reduces across the batch axis, e.g. DynamicQuantizeLinear); NULL when each row''s outputs depend on that row alone. PREDICT runs such models one row at a time unless isolate_rows = false.';
COMMENT ON COLUMN {s}.model_versions.check_rows IS 'Rows on which the converted model was compared with the estimator at import; NULL when not checked.';
COMMENT ON COLUMN {s}.model_versions.check_max_abs_diff IS 'Largest absolute difference between the estimator''s and the converted model''s outputs on those rows.';
COMMENT ON COLUMN {s}.model_versions.check_label_mismatches IS 'Rows whose predicted label differed between the estimator and the converted model (accepted at import).';
"""

_MODELS_VIEW_V4 = """
CREATE VIEW {s}.models AS
WITH io AS (
    SELECT name, version, 'input' AS role, position,
           tensor_name || ': ' || elem_type
             || CASE WHEN shape IS NULL THEN '' ELSE '[' || array_to_string(shape, ', ') || ']' END AS spec
    FROM modelsql.model_inputs
    UNION ALL
    SELECT name, version, 'output' AS role, position,
           tensor_name || ': ' || elem_type
             || CASE WHEN shape IS NULL THEN '' ELSE '[' || array_to_string(shape, ', ') || ']' END AS spec
    FROM modelsql.model_outputs
),
io_text AS (
    SELECT name, version,
           string_agg(spec, ', ' ORDER BY position) FILTER (WHERE role = 'input') AS inputs,
           string_agg(spec, ', ' ORDER BY position) FILTER (WHERE role = 'output') AS outputs
    FROM io
    GROUP BY name, version
),
latest AS (
    SELECT name, max(version) AS version, count(*) AS versions
    FROM modelsql.model_versions
    GROUP BY name
)
SELECT v.name,
       v.version,
       l.versions,
       v.kind,
       v.source,
       coalesce(t.inputs, '') AS inputs,
       coalesce(t.outputs, '') AS outputs,
       v.opset,
       v.param_count,
       v.logical_bytes,
       v.features,
       v.batch_dependence IS NOT NULL AS batch_dependent,
       v.created_at,
       v.fingerprint
FROM modelsql.model_versions AS v
JOIN latest AS l ON l.name = v.name AND l.version = v.version
LEFT JOIN io_text AS t ON t.name = v.name AND t.version = v.version;
COMMENT ON VIEW {s}.models IS 'One row per model: its latest version, how many versions it has, and readable inputs/outputs.';
COMMENT ON COLUMN {s}.models.version IS 'The latest version.';
COMMENT ON COLUMN {s}.models.versions IS 'How many versions the model has.';
COMMENT ON COLUMN {s}.models.fingerprint IS 'The latest version''s architecture fingerprint: equal for copies of one architecture with other weights (GROUP BY it to find mergeable families).';
COMMENT ON COLUMN {s}.models.inputs IS 'Graph inputs as name: TYPE[dims], comma separated (no brackets when the rank is unknown).';
COMMENT ON COLUMN {s}.models.outputs IS 'Graph outputs as name: TYPE[dims], comma separated (no brackets when the rank is unknown).';
COMMENT ON COLUMN {s}.models.logical_bytes IS 'Bytes of the latest version on its own: graph plus every initializer.';
COMMENT ON COLUMN {s}.models.features IS 'Feature (column) names bound to a single input; NULL when unknown.';
COMMENT ON COLUMN {s}.models.batch_dependent IS 'True when a row''s outputs may depend on the other rows of its batch (see model_versions.batch_dependence).';
"""
"""The ``modelsql.models`` view as schemas 4 to 11 had it (no aliases; ``{s}``: the qualified schema), which the
migration to version 4 makes."""

MODELS_VIEW = _MODELS_VIEW_V4.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1).replace("""       v.fingerprint
FROM""", """       v.fingerprint,
       (SELECT string_agg(a.alias || ' = ' || a.version, ', ' ORDER BY a.alias)
        FROM modelsql.model_aliases AS a WHERE a.name = v.name) AS aliases
FROM""").replace("""       v.features,""", """       coalesce(v.features, CASE WHEN v.options['model_type'] IS NOT NULL THEN
           (SELECT list(c.tensor_name ORDER BY c.position) FROM modelsql.model_inputs AS c
            WHERE c.name = v.name AND c.version = v.version) END) AS features,""").replace(
    "Feature (column) names bound to a single input; NULL when unknown.",
    "Feature (column) names: those bound to a single input, or a model trained in SQL''s inputs (one per column, "
    "named after it); NULL when unknown.") + """COMMENT ON COLUMN {s}.models.aliases IS 'The model''s aliases and the versions they name, as SHOW MODELS gives them (''champion = 3, challenger = 4''); NULL without one.';
"""
"""The ``modelsql.models`` view (``{s}``: the qualified schema), shared by :data:`DDL` and the migration to version
12, each replacing the view of schema 4 (:data:`DDL` makes that one first, for the ``families`` view that reads it, and
replaces it once the aliases table it reads is made)."""


_V3_CONTENT_COMMENT = """
COMMENT ON COLUMN {s}.model_versions.content_digest IS 'SHA-256 of the graph with names, doc strings and producer fields normalised (initializers by their digests): versions with equal content_digest compute the same thing and share one loaded session. NULL for versions imported before catalog schema 3.';
"""

_V4_FINGERPRINT_COMMENT = """
COMMENT ON COLUMN {s}.model_versions.fingerprint IS 'SHA-256 of the architecture: the graph with floating-point initializer values left out (shapes, attributes and topology kept, names normalised). Versions with equal fingerprints differ only in their weights and can be merged into one graph (NetFuse). NULL for versions imported before catalog schema 4.';
COMMENT ON COLUMN {s}.model_versions.flops IS 'Static estimate of floating-point operations per input row (2 per multiply-add of Conv/Gemm/MatMul, 1 per output element elsewhere; symbolic dims bound to 1). NULL for versions imported before catalog schema 4.';
COMMENT ON COLUMN {s}.model_versions.conv_flops IS 'The part of flops in Conv nodes. NULL before catalog schema 4.';
COMMENT ON COLUMN {s}.model_versions.gemm_flops IS 'The part of flops in 2-D matrix products (Gemm, MatMul with a 2-D output). NULL before catalog schema 4.';
COMMENT ON COLUMN {s}.model_versions.nodes IS 'Nodes of the main graph (ONNX Runtime launches a kernel per node, before fusion). NULL before catalog schema 4.';
"""

FAMILY_DDL = """
CREATE TABLE {s}.merged_graphs (
    merge_key    VARCHAR PRIMARY KEY,
    members      VARCHAR[] NOT NULL,
    layout       VARCHAR NOT NULL,
    graph_digest VARCHAR NOT NULL,
    graph_bytes  BIGINT NOT NULL,
    max_rel_diff DOUBLE,
    merge_seconds DOUBLE,
    created_at   TIMESTAMPTZ NOT NULL
);
COMMENT ON TABLE {s}.merged_graphs IS 'NetFuse-merged graphs in the store: one per ordered member list, keyed by the members and their content digests. The graph blob refers to the members'' own tensor blobs (no second copy of a weight).';
COMMENT ON COLUMN {s}.merged_graphs.merge_key IS 'SHA-256 of the ordered (name, version, content digest) of the members and the input layout.';
COMMENT ON COLUMN {s}.merged_graphs.members IS 'The members, in merge order, as name:version.';
COMMENT ON COLUMN {s}.merged_graphs.layout IS 'stacked (one input [N, B, ...], each member its own rows) or shared (one input [B, ...] for every member).';
COMMENT ON COLUMN {s}.merged_graphs.graph_digest IS 'SHA-256 of the merged graph blob (initializers point at the members'' blobs).';
COMMENT ON COLUMN {s}.merged_graphs.max_rel_diff IS 'Largest relative difference between the merged graph and the members run separately, on the rows checked when it was built.';
COMMENT ON COLUMN {s}.merged_graphs.merge_seconds IS 'Seconds the merge (rewrite and check) took.';

CREATE VIEW {s}.families AS
SELECT m.fingerprint,
       arg_min(m.name, m.created_at) AS family,
       count(*) AS models,
       list(m.name ORDER BY m.created_at, m.name) AS members,
       any_value(m.inputs) AS inputs,
       any_value(m.outputs) AS outputs,
       any_value(m.opset) AS opset,
       any_value(m.param_count) AS param_count
FROM modelsql.models AS m
WHERE m.fingerprint IS NOT NULL AND m.kind <> 'pipeline'
GROUP BY m.fingerprint;
COMMENT ON VIEW {s}.families IS 'Models whose latest versions share one architecture (equal fingerprint): NetFuse-mergeable families. family is the name of the oldest member; PREDICT(MODELS FAMILY f ROUTE BY ...) routes rows to its members.';
"""


STUDY_DDL = """
CREATE TABLE {s}.trainable_versions (
    name        VARCHAR NOT NULL,
    version     INTEGER NOT NULL,
    factory     VARCHAR NOT NULL,
    code_digest VARCHAR NOT NULL,
    options     MAP(VARCHAR, VARCHAR) NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, version)
);
COMMENT ON TABLE {s}.trainable_versions IS 'Trainable models (CREATE MODEL m FROM PYTHON ''pkg.mod:factory''): a factory that builds a torch.nn.Module from hyper-parameters; TUNE trains it. A changed factory source is a new version.';
COMMENT ON COLUMN {s}.trainable_versions.factory IS 'The factory, as package.module:function.';
COMMENT ON COLUMN {s}.trainable_versions.code_digest IS 'SHA-256 of the factory module''s source file when the version was registered.';
CREATE VIEW {s}.trainables AS
SELECT name, version, factory, code_digest, options, created_at
FROM modelsql.trainable_versions
QUALIFY version = max(version) OVER (PARTITION BY name);
COMMENT ON VIEW {s}.trainables IS 'One row per trainable model: its latest version.';

CREATE TABLE {s}.studies (
    name          VARCHAR PRIMARY KEY,
    model         VARCHAR NOT NULL,
    model_version INTEGER NOT NULL,
    algorithm     VARCHAR NOT NULL,
    metric        VARCHAR NOT NULL,
    mode          VARCHAR NOT NULL,
    max_epochs    INTEGER NOT NULL,
    seed          BIGINT NOT NULL,
    space         VARCHAR NOT NULL,
    options       VARCHAR NOT NULL,
    train_sql     VARCHAR NOT NULL,
    validate_sql  VARCHAR,
    target        VARCHAR NOT NULL,
    tree          VARCHAR NOT NULL,
    definition    VARCHAR NOT NULL,
    status        VARCHAR NOT NULL,
    error         VARCHAR,
    best_trial    INTEGER,
    best_metric   DOUBLE,
    trials_done   INTEGER NOT NULL,
    epochs_trained   BIGINT NOT NULL,
    epochs_requested BIGINT NOT NULL,
    checkpoint_bytes BIGINT NOT NULL,
    owner_pid     INTEGER,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);
COMMENT ON TABLE {s}.studies IS 'Hyper-parameter studies (TUNE): one row each, updated as stages finish.';
COMMENT ON COLUMN {s}.studies.tree IS 'Key of the stage tree the study trains in: the trainable version, the data, the target, the seed and the thread count. Studies with one tree share stages (Hippo''s multi-study case).';
COMMENT ON COLUMN {s}.studies.definition IS 'SHA-256 of everything that defines the study (tree, space, algorithm, options): re-running TUNE with the same definition resumes it.';
COMMENT ON COLUMN {s}.studies.status IS 'running, stopped (resumable), interrupted (its process died; resumable), finished, or failed.';
COMMENT ON COLUMN {s}.studies.epochs_trained IS 'Epochs this study trained (each stage once, from its parent''s checkpoint).';
COMMENT ON COLUMN {s}.studies.epochs_requested IS 'Epochs the trials asked for: what trial-based execution (every trial on its own) would train.';

CREATE TABLE {s}.trials (
    study        VARCHAR NOT NULL,
    trial        INTEGER NOT NULL,
    config       VARCHAR NOT NULL,
    sequence     VARCHAR NOT NULL,
    status       VARCHAR NOT NULL,
    epochs       INTEGER NOT NULL,
    metrics      DOUBLE[] NOT NULL,
    metric       DOUBLE,
    best_metric  DOUBLE,
    stage        BIGINT,
    checkpoint   VARCHAR,
    error        VARCHAR,
    updated_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (study, trial)
);
COMMENT ON TABLE {s}.trials IS 'Trials of each study: the hyper-parameters sampled, their per-epoch sequence, status and metric per epoch.';
COMMENT ON COLUMN {s}.trials.config IS 'The sampled hyper-parameters (JSON object).';
COMMENT ON COLUMN {s}.trials.sequence IS 'The hyper-parameters of every epoch trained (JSON list of objects): the trial''s path in the stage tree.';
COMMENT ON COLUMN {s}.trials.status IS 'pending, running, pruned, completed, failed, or stopped (resumable).';
COMMENT ON COLUMN {s}.trials.metrics IS 'The study metric after each epoch.';
COMMENT ON COLUMN {s}.trials.stage IS 'The stage holding the trial''s last epoch.';
COMMENT ON COLUMN {s}.trials.checkpoint IS 'Digest of the trial''s checkpoint at its last epoch (NULL once collected).';

CREATE TABLE {s}.stages (
    tree         VARCHAR NOT NULL,
    stage        BIGINT NOT NULL,
    parent       BIGINT,
    first_epoch  INTEGER NOT NULL,
    end_epoch    INTEGER NOT NULL,
    configuration VARCHAR NOT NULL,
    metrics      VARCHAR,
    status       VARCHAR NOT NULL,
    checkpoint   VARCHAR,
    checkpoint_bytes BIGINT,
    study        VARCHAR NOT NULL,
    worker       VARCHAR,
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ,
    seconds      DOUBLE,
    error        VARCHAR,
    PRIMARY KEY (tree, stage)
);
COMMENT ON TABLE {s}.stages IS 'Stages of the stage trees (Hippo): each trains epochs [first_epoch, end_epoch) once, from its parent''s checkpoint, and checkpoints its end.';
COMMENT ON COLUMN {s}.stages.parent IS 'The stage whose end this one starts from (NULL: from scratch).';
COMMENT ON COLUMN {s}.stages.configuration IS 'The hyper-parameters of each epoch of the stage (JSON list of objects).';
COMMENT ON COLUMN {s}.stages.metrics IS 'Metrics after each epoch of the stage (JSON list of objects: train_loss, val_loss, val_accuracy).';
COMMENT ON COLUMN {s}.stages.status IS 'running, done, failed or interrupted (its process died).';
COMMENT ON COLUMN {s}.stages.checkpoint IS 'Digest of the checkpoint at end_epoch (model, optimizer, every RNG, the data order); NULL once collected.';
COMMENT ON COLUMN {s}.stages.study IS 'The study that trained the stage.';
COMMENT ON COLUMN {s}.stages.worker IS 'Where it ran: local:<pid> or ray:<node>.';
"""

TRACE_DDL = """
CREATE TABLE {s}.traces (
    trace       BIGINT PRIMARY KEY,
    model       VARCHAR NOT NULL,
    version     INTEGER NOT NULL,
    backend     VARCHAR NOT NULL,
    device      VARCHAR NOT NULL,
    threads     INTEGER NOT NULL,
    batch_size  INTEGER NOT NULL,
    seconds     DOUBLE[] NOT NULL,
    median_s    DOUBLE NOT NULL,
    p90_s       DOUBLE NOT NULL,
    p99_s       DOUBLE NOT NULL,
    source      VARCHAR NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);
COMMENT ON TABLE {s}.traces IS 'Latency traces (PROFILE): every timed run of one model version in one configuration (backend, device, threads, batch size); what a learned cost model trains on.';
COMMENT ON COLUMN {s}.traces.seconds IS 'Wall time of each timed run, in seconds, in the order run (configurations interleaved).';
COMMENT ON COLUMN {s}.traces.source IS 'What recorded it: profile (PROFILE MODEL), explain_analyze or serve (sampled).';
"""

PERF_DDL = """
ALTER TABLE {s}.traces ADD COLUMN features VARCHAR;
COMMENT ON COLUMN {s}.traces.features IS 'The cost-model features of the configuration (JSON object: operator-class FLOPs, bytes and nodes, parameters, batch size, backend, threads, merge factor); NULL for traces of catalog schema 6.';
CREATE TABLE {s}.trace_operators (
    trace     BIGINT NOT NULL,
    op_type   VARCHAR NOT NULL,
    provider  VARCHAR NOT NULL,
    nodes     INTEGER NOT NULL,
    runs      INTEGER NOT NULL,
    median_us DOUBLE NOT NULL,
    share     DOUBLE NOT NULL,
    PRIMARY KEY (trace, op_type, provider)
);
COMMENT ON TABLE {s}.trace_operators IS 'Per trace and operator type, the kernel time ONNX Runtime''s profiler reported (its optimised graph: fused nodes carry the fused type).';
COMMENT ON COLUMN {s}.trace_operators.median_us IS 'Median over the profiled runs of the summed kernel time of the type''s nodes in one run, microseconds.';
COMMENT ON COLUMN {s}.trace_operators.share IS 'median_us over the sum of every type''s median_us in the trace.';

CREATE TABLE {s}.compiled (
    model        VARCHAR NOT NULL,
    version      INTEGER NOT NULL,
    backend      VARCHAR NOT NULL,
    target       VARCHAR NOT NULL,
    batch_size   INTEGER NOT NULL,
    tvm_version  VARCHAR NOT NULL,
    ffi_version  VARCHAR NOT NULL,
    status       VARCHAR NOT NULL CHECK (status IN ('checked', 'declined')),
    reason       VARCHAR,
    digest       VARCHAR,
    nbytes       BIGINT,
    max_abs_diff DOUBLE,
    max_rel_diff DOUBLE,
    tune_trials  INTEGER NOT NULL,
    compile_s    DOUBLE NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (model, version, backend, target, batch_size, tvm_version, ffi_version)
);
COMMENT ON TABLE {s}.compiled IS 'Compiled artifacts (TVM): one per model version, target, batch bucket and compiler version; checked against ONNX Runtime before use, or declined with the reason.';
COMMENT ON COLUMN {s}.compiled.target IS 'The compiler target as canonical JSON (kind, mcpu, num-cores).';
COMMENT ON COLUMN {s}.compiled.batch_size IS 'Rows per run the artifact was compiled for; 0 for any batch (untuned, symbolic batch).';
COMMENT ON COLUMN {s}.compiled.status IS 'checked: outputs agreed with ONNX Runtime within the tolerance, the artifact may run; declined: it may not (reason).';
COMMENT ON COLUMN {s}.compiled.digest IS 'Blob of the compiled shared library (export_library); NULL when declined before compiling.';
COMMENT ON COLUMN {s}.compiled.tune_trials IS 'MetaSchedule trials spent tuning it (0: untuned).';
COMMENT ON COLUMN {s}.compiled.compile_s IS 'Seconds spent importing, tuning and compiling it.';

CREATE TABLE {s}.cost_models (
    version       INTEGER PRIMARY KEY,
    traces        BIGINT NOT NULL,
    last_trace    BIGINT NOT NULL,
    spec          VARCHAR NOT NULL,
    within_10pct  DOUBLE,
    median_rel_error DOUBLE,
    noise_ceiling DOUBLE,
    created_at    TIMESTAMPTZ NOT NULL
);
COMMENT ON TABLE {s}.cost_models IS 'Each fit of the learned cost model, the catalog model modelsql_cost (Mantis-style): what it was trained on and how accurate it was.';
COMMENT ON COLUMN {s}.cost_models.version IS 'The version of the catalog model modelsql_cost this fit is.';
COMMENT ON COLUMN {s}.cost_models.last_trace IS 'The highest trace number it was trained on (a newer trace makes it stale).';
COMMENT ON COLUMN {s}.cost_models.spec IS 'The fitted model as JSON (features, terms, coefficients).';
COMMENT ON COLUMN {s}.cost_models.within_10pct IS 'Share of held-out traces predicted within 10% of their measured median.';
COMMENT ON COLUMN {s}.cost_models.noise_ceiling IS 'Share of traces whose two halves of runs agree within 10% (what no model can beat).';
"""

TRUST_DDL = """
CREATE TABLE {s}.code_signatures (
    digest    VARCHAR NOT NULL,
    kind      VARCHAR NOT NULL CHECK (kind IN ('python', 'trainable', 'compiled')),
    key_id    VARCHAR NOT NULL,
    signature VARCHAR NOT NULL,
    subject   VARCHAR NOT NULL,
    signed_at TIMESTAMPTZ NOT NULL
);
COMMENT ON TABLE {s}.code_signatures IS 'Code artifacts (Python programs, trainable factories, compiled libraries) trusted by a user''s key: nothing here runs unless a signature verifies with the key of the user running it (or the connection trusts code).';
COMMENT ON COLUMN {s}.code_signatures.digest IS 'SHA-256 of what is trusted: the program blob, the trainable''s factory reference and options, or the library blob.';
COMMENT ON COLUMN {s}.code_signatures.key_id IS 'The first 16 hex digits of SHA-256 of the signing key (which user''s key).';
COMMENT ON COLUMN {s}.code_signatures.signature IS 'HMAC-SHA256 of kind and digest with that key, hex.';
COMMENT ON COLUMN {s}.code_signatures.subject IS 'What was signed, for people: the model, version and code reference.';
"""
"""The code-signature table (schema 8), shared by :data:`DDL` and the migration to version 8."""

LIFECYCLE_DDL = """
CREATE SEQUENCE {s}.evaluation_numbers START 1;
CREATE TABLE {s}.evaluations (
    evaluation   BIGINT PRIMARY KEY,
    kind         VARCHAR NOT NULL CHECK (kind IN ('model', 'pipeline')),
    name         VARCHAR NOT NULL,
    version      INTEGER NOT NULL,
    task         VARCHAR NOT NULL CHECK (task IN ('classification', 'regression')),
    target       VARCHAR NOT NULL,
    input        VARCHAR NOT NULL,
    fingerprint  VARCHAR NOT NULL,
    rows         BIGINT NOT NULL,
    metrics      JSON NOT NULL,
    options      JSON NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL
);
COMMENT ON TABLE {s}.evaluations IS 'Every EVALUATE of a model or pipeline version: the metrics of its predictions against the TARGET over the rows of its input.';
COMMENT ON COLUMN {s}.evaluations.input IS 'The ON clause as written (TABLE t, or the query).';
COMMENT ON COLUMN {s}.evaluations.fingerprint IS 'The rows read, order-independent: their count and the sum of their hashes (hex).';
COMMENT ON COLUMN {s}.evaluations.metrics IS 'Metric name -> value (JSON): accuracy, precision, recall, f1_score, log_loss, roc_auc, labels, confusion_matrix; or mean_absolute_error, mean_squared_error, root_mean_squared_error, median_absolute_error, r2_score, explained_variance.';
COMMENT ON COLUMN {s}.evaluations.options IS 'The statement''s options after defaults (average, positive, threshold, features).';
CREATE TABLE {s}.model_aliases (
    name         VARCHAR NOT NULL,
    alias        VARCHAR NOT NULL,
    version      INTEGER NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, alias)
);
COMMENT ON TABLE {s}.model_aliases IS 'Named versions of a model (ALTER MODEL m SET ALIAS a = VERSION n), as MLflow''s registry aliases: PREDICT(MODEL m ALIAS a, ...) runs the version the alias names now.';
"""
"""The evaluations and model aliases (schema 10), shared by :data:`DDL` and the migration to version 10."""

LINEAGE_DDL = """
CREATE TABLE {s}.model_origins (
    name           VARCHAR NOT NULL,
    version        INTEGER NOT NULL,
    origin         VARCHAR NOT NULL CHECK (origin IN ('file', 'bytes', 'object', 'python', 'query', 'study',
                                                     'finetune', 'cost_model')),
    source         VARCHAR NOT NULL,
    digest         VARCHAR,
    study          VARCHAR,
    trial          INTEGER,
    parent_kind    VARCHAR CHECK (parent_kind IN ('model', 'pipeline')),
    parent_name    VARCHAR,
    parent_version INTEGER,
    created_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, version)
);
COMMENT ON TABLE {s}.model_origins IS 'Where each model version came from, recorded when it was made.';
COMMENT ON COLUMN {s}.model_origins.origin IS 'file (IMPORT MODEL of a file), bytes, object (a Python object: an estimator, a module, a ModelProto), python (FROM PYTHON), query (CREATE MODEL ... AS SELECT), study (FROM STUDY), finetune (FINETUNE PIPELINE), cost_model (the learned cost model).';
COMMENT ON COLUMN {s}.model_origins.source IS 'The file path, the object''s class, the Python reference, the training query, or the statement that made it.';
COMMENT ON COLUMN {s}.model_origins.digest IS 'sha256:<hex> of the file or bytes read; rows:<count>:<hash> of the rows a query trained on.';
CREATE TABLE {s}.model_tags (
    name        VARCHAR NOT NULL,
    version     INTEGER NOT NULL,
    tag         VARCHAR NOT NULL,
    value       VARCHAR NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, version, tag)
);
COMMENT ON TABLE {s}.model_tags IS 'Tags (ALTER MODEL m [VERSION n] SET TAG k = ''v''), as MLflow''s: version 0 tags the model, n its version n.';
CREATE VIEW {s}.lineage AS
SELECT 'model' AS kind, o.name, o.version, o.origin AS relation, o.source, o.digest, o.study, o.trial,
       o.parent_kind, o.parent_name, o.parent_version, o.created_at
FROM modelsql.model_origins AS o
UNION ALL
SELECT 'pipeline', s.name, s.version, 'step', s.step, NULL, NULL, NULL, 'model', s.model, s.model_version,
       p.created_at
FROM modelsql.pipeline_steps AS s JOIN modelsql.pipeline_versions AS p ON p.name = s.name AND p.version = s.version;
COMMENT ON VIEW {s}.lineage IS 'The lineage graph as edges: each model version from its origin (a file, a query, a study trial, the pipeline FINETUNE started from: parent_*), each pipeline version from the model versions of its steps.';
"""
"""The lineage and tags (schema 11), shared by :data:`DDL` and the migration to version 11."""

OWNERSHIP_DDL = """
CREATE TABLE {s}.version_marks (
    kind         VARCHAR NOT NULL CHECK (kind IN ('model', 'pipeline')),
    name         VARCHAR NOT NULL,
    last_version INTEGER NOT NULL,
    PRIMARY KEY (kind, name)
);
COMMENT ON TABLE {s}.version_marks IS 'The highest version number each model or pipeline name was ever given: the next version is one more, even after DROP of the latest versions or of the whole model, so a pinned VERSION n never means another model. Every new version updates its row, so two writers of one name conflict and one retries.';
ALTER TABLE {s}.studies ADD COLUMN owner_host VARCHAR;
ALTER TABLE {s}.studies ADD COLUMN owner_start VARCHAR;
ALTER TABLE {s}.studies ADD COLUMN heartbeat_at TIMESTAMPTZ;
COMMENT ON COLUMN {s}.studies.owner_pid IS 'Process id of the TUNE running the study (NULL when none runs it).';
COMMENT ON COLUMN {s}.studies.owner_host IS 'Host name of that process.';
COMMENT ON COLUMN {s}.studies.owner_start IS 'That process''s identity beside its pid (boot id and start time), so a reused pid is not taken for it.';
COMMENT ON COLUMN {s}.studies.heartbeat_at IS 'Last time the running TUNE said it is alive (every few seconds). A running study whose owner is dead is marked interrupted; one whose owner cannot be checked and sent no heartbeat for the grace period, failed.';
"""
"""Version marks and study owners (schema 9), shared by :data:`DDL` and the migration to version 9."""

PIPELINE_DDL = """
CREATE TABLE {s}.pipeline_versions (
    name       VARCHAR NOT NULL,
    version    INTEGER NOT NULL,
    digest     VARCHAR NOT NULL,
    source     VARCHAR NOT NULL,
    options    MAP(VARCHAR, VARCHAR) NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, version)
);
COMMENT ON TABLE {s}.pipeline_versions IS 'One row per version of each pipeline; CREATE OR REPLACE PIPELINE adds a version.';
COMMENT ON COLUMN {s}.pipeline_versions.digest IS 'SHA-256 of the step graph: each step''s content digest and what feeds each of its inputs. Equal digests compute the same thing.';
COMMENT ON COLUMN {s}.pipeline_versions.source IS 'How the pipeline was made: CREATE PIPELINE, or sklearn:<class> for import_pipeline.';
CREATE TABLE {s}.pipeline_steps (
    name          VARCHAR NOT NULL,
    version       INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    step          VARCHAR NOT NULL,
    model         VARCHAR NOT NULL,
    model_version INTEGER NOT NULL,
    PRIMARY KEY (name, version, position)
);
COMMENT ON TABLE {s}.pipeline_steps IS 'The steps of each pipeline version, in the order they run: each is one catalog model version.';
COMMENT ON COLUMN {s}.pipeline_steps.step IS 'The step name (the model name unless the pipeline names it).';
CREATE TABLE {s}.pipeline_feeds (
    name      VARCHAR NOT NULL,
    version   INTEGER NOT NULL,
    position  INTEGER NOT NULL,
    input     VARCHAR NOT NULL,
    from_step INTEGER,
    from_name VARCHAR NOT NULL,
    PRIMARY KEY (name, version, position, input)
);
COMMENT ON TABLE {s}.pipeline_feeds IS 'What feeds each input of each step: an output of an earlier step (from_step), or a pipeline input (from_step NULL).';
COMMENT ON COLUMN {s}.pipeline_feeds.position IS 'The step (pipeline_steps.position) whose input this is.';
COMMENT ON COLUMN {s}.pipeline_feeds.input IS 'The step model''s input name.';
COMMENT ON COLUMN {s}.pipeline_feeds.from_name IS 'The output name of step from_step, or the pipeline input''s name.';

CREATE VIEW {s}.pipelines AS
WITH latest AS (
    SELECT name, max(version) AS version, count(*) AS versions
    FROM modelsql.pipeline_versions
    GROUP BY name
),
steps AS (
    SELECT name, version, count(*) AS steps,
           string_agg(step || ' (' || model || ' v' || model_version || ')', ' -> ' ORDER BY position) AS step_list
    FROM modelsql.pipeline_steps
    GROUP BY name, version
)
SELECT p.name, p.version, l.versions, s.steps, s.step_list, p.digest, p.source, p.created_at
FROM modelsql.pipeline_versions AS p
JOIN latest AS l ON l.name = p.name AND l.version = p.version
JOIN steps AS s ON s.name = p.name AND s.version = p.version;
COMMENT ON VIEW {s}.pipelines IS 'One row per pipeline: its latest version, how many versions it has, and its steps in order.';
"""
"""The pipeline tables and view (schema 3), shared by :data:`DDL` and the migration to version 3."""


# ``{s}`` is replaced by the (database-qualified) schema name when the DDL runs.
# View bodies stay unqualified: DuckDB binds a view in its own database, so the
# views keep working when the file is ATTACHed under another name.
DDL = (
    """
CREATE SCHEMA {s};

CREATE TABLE {s}.meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR
);
COMMENT ON TABLE {s}.meta IS 'Facts about the modelsql catalog itself (schema_version).';

CREATE TABLE {s}.model_versions (
    name          VARCHAR NOT NULL,
    version       INTEGER NOT NULL,
    kind          VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,
    graph_digest  VARCHAR NOT NULL,
    graph_bytes   BIGINT NOT NULL,
    opset         INTEGER NOT NULL,
    param_count   BIGINT NOT NULL,
    logical_bytes BIGINT NOT NULL,
    features      VARCHAR[],
    options       MAP(VARCHAR, VARCHAR) NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    batch_dependence VARCHAR,
    check_rows       INTEGER,
    check_max_abs_diff DOUBLE,
    check_label_mismatches INTEGER,
    content_digest VARCHAR,
    fingerprint VARCHAR,
    flops DOUBLE,
    conv_flops DOUBLE,
    gemm_flops DOUBLE,
    nodes INTEGER,
    PRIMARY KEY (name, version)
);
COMMENT ON TABLE {s}.model_versions IS 'One row per version of each model; CREATE OR REPLACE MODEL adds a version.';
COMMENT ON COLUMN {s}.model_versions.name IS 'Model name, lower case (names are case-insensitive).';
COMMENT ON COLUMN {s}.model_versions.version IS 'Version number: 1, 2, ...';
COMMENT ON COLUMN {s}.model_versions.kind IS 'Where the model was authored: onnx, sklearn or torch.';
COMMENT ON COLUMN {s}.model_versions.source IS 'Where the model came from: a path, sklearn:<class>, torch:<class>.';
COMMENT ON COLUMN {s}.model_versions.graph_digest IS 'SHA-256 of the ONNX graph without initializer data (a blob).';
COMMENT ON COLUMN {s}.model_versions.graph_bytes IS 'Size of the graph blob in bytes.';
COMMENT ON COLUMN {s}.model_versions.opset IS 'Default-domain ONNX opset the model imports.';
COMMENT ON COLUMN {s}.model_versions.param_count IS 'Total number of elements over all initializers.';
COMMENT ON COLUMN {s}.model_versions.logical_bytes IS 'Bytes of the model on its own: graph plus every initializer (before dedup).';
COMMENT ON COLUMN {s}.model_versions.features IS 'Feature (column) names bound to a single 2-D input; NULL when unknown.';
COMMENT ON COLUMN {s}.model_versions.options IS 'The WITH (...) options given at import.';
COMMENT ON COLUMN {s}.model_versions.created_at IS 'When the version was created.';
""" + _V2_COMMENTS + _V3_CONTENT_COMMENT + _V4_FINGERPRINT_COMMENT + """
"""
    + _io_table("model_inputs", "input")
    + _io_table("model_outputs", "output")
    + """
CREATE TABLE {s}.model_tensors (
    name        VARCHAR NOT NULL,
    version     INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    tensor_name VARCHAR NOT NULL,
    digest      VARCHAR NOT NULL,
    elem_type   VARCHAR NOT NULL,
    dims        BIGINT[] NOT NULL,
    nbytes      BIGINT NOT NULL,
    PRIMARY KEY (name, version, position)
);
COMMENT ON TABLE {s}.model_tensors IS 'Initializers (weights) of each model version, each stored as one content-addressed blob.';
COMMENT ON COLUMN {s}.model_tensors.position IS 'Index of the initializer in the graph, from 0.';
COMMENT ON COLUMN {s}.model_tensors.tensor_name IS 'The initializer name in the graph.';
COMMENT ON COLUMN {s}.model_tensors.digest IS 'SHA-256 of the raw little-endian tensor bytes (the blob key).';
COMMENT ON COLUMN {s}.model_tensors.elem_type IS 'ONNX element type, upper case.';
COMMENT ON COLUMN {s}.model_tensors.dims IS 'Shape of the tensor.';
COMMENT ON COLUMN {s}.model_tensors.nbytes IS 'Size of the raw tensor data in bytes.';

CREATE TABLE {s}.blobs (
    digest VARCHAR PRIMARY KEY,
    nbytes BIGINT NOT NULL,
    kind   VARCHAR NOT NULL CHECK (kind IN ('graph', 'tensor'))
);
COMMENT ON TABLE {s}.blobs IS 'Blobs of the content-addressed store that the catalog references (each stored once).';
COMMENT ON COLUMN {s}.blobs.digest IS 'SHA-256 hex digest of the blob content.';
COMMENT ON COLUMN {s}.blobs.nbytes IS 'Blob size in bytes.';
COMMENT ON COLUMN {s}.blobs.kind IS 'graph or tensor.';

""" + _MODELS_VIEW_V4 + """
CREATE VIEW {s}.storage AS
WITH refs AS (
    SELECT graph_digest AS digest, graph_bytes AS nbytes FROM modelsql.model_versions
    UNION ALL
    SELECT digest, nbytes FROM modelsql.model_tensors
),
stored AS (
    SELECT coalesce(sum(nbytes), 0)::BIGINT AS stored_bytes
    FROM (SELECT digest, max(nbytes) AS nbytes FROM refs GROUP BY digest)
),
totals AS (
    SELECT count(DISTINCT name)::BIGINT AS models,
           count(*)::BIGINT AS model_versions,
           coalesce(sum(logical_bytes), 0)::BIGINT AS logical_bytes
    FROM modelsql.model_versions
)
SELECT t.models,
       t.model_versions,
       t.logical_bytes,
       s.stored_bytes,
       CASE WHEN s.stored_bytes > 0 THEN t.logical_bytes::DOUBLE / s.stored_bytes END AS dedup_ratio
FROM totals AS t, stored AS s;
COMMENT ON VIEW {s}.storage IS 'One row: models, versions, logical bytes (every version on its own) and stored bytes (each distinct blob once).';
COMMENT ON COLUMN {s}.storage.logical_bytes IS 'Sum of logical bytes over all model versions.';
COMMENT ON COLUMN {s}.storage.stored_bytes IS 'Sum of sizes of the distinct blobs the catalog references.';
COMMENT ON COLUMN {s}.storage.dedup_ratio IS 'logical_bytes / stored_bytes (NULL when nothing is stored).';
"""
    + PIPELINE_DDL
    + FAMILY_DDL
    + STUDY_DDL
    + TRACE_DDL
    + PERF_DDL
    + TRUST_DDL
    + OWNERSHIP_DDL
    + LIFECYCLE_DDL
    + LINEAGE_DDL
    + MODELS_VIEW
)


def create(con: duckdb.DuckDBPyConnection, qualified_schema: str, version: int = SCHEMA_VERSION) -> None:
    """Create the whole catalog (schema, tables, views, comments, meta row).

    Runs on ``con`` without beginning or committing: the caller holds the transaction.

    Args:
        con: the DuckDB connection.
        qualified_schema: the schema name as SQL, qualified with its database
            (``'"mydb".modelsql'``).
        version: the ``schema_version`` to record in ``modelsql.meta``.
    """
    con.execute(DDL.format(s=qualified_schema))
    con.execute(
        f"INSERT INTO {qualified_schema}.meta VALUES ('schema_version', ?)",
        [str(version)],
    )


_MODELS_VIEW_V2: str  # set below: the models view as schema 2 and 3 had it (no fingerprint)


def _migrate_1_to_2(con: duckdb.DuckDBPyConnection) -> None:
    """Version 2 adds each version's batch dependence and import-time conversion check
    (``model_versions.batch_dependence``, ``check_*``) and shows features in ``modelsql.models``.

    Versions imported before it were never analysed: they get :data:`NOT_ANALYSED` (so PREDICT runs
    them one row at a time, the safe choice) and no check; re-import one to analyse it.
    """
    q = f"{SCHEMA}.model_versions"
    for column, sql_type in (("batch_dependence", "VARCHAR"), ("check_rows", "INTEGER"),
                             ("check_max_abs_diff", "DOUBLE"), ("check_label_mismatches", "INTEGER")):
        con.execute(f"ALTER TABLE {q} ADD COLUMN {column} {sql_type}")
    con.execute(f"UPDATE {q} SET batch_dependence = ?", [NOT_ANALYSED])
    con.execute(f"DROP VIEW {SCHEMA}.models")
    con.execute((_MODELS_VIEW_V2 + _V2_COMMENTS).format(s=SCHEMA))


NOT_ANALYSED = "not analysed (imported before catalog schema 2): run one row at a time; re-import to analyse"
"""``batch_dependence`` of versions that the migration to schema 2 found in the catalog."""

MIGRATIONS[1] = _migrate_1_to_2
_MODELS_VIEW_V2 = "\n".join(line for line in _MODELS_VIEW_V4.split("\n") if "fingerprint" not in line).replace(
    "v.created_at,\nFROM", "v.created_at\nFROM")



def _migrate_2_to_3(con: duckdb.DuckDBPyConnection) -> None:
    """Version 3 adds pipelines (``pipeline_versions``, ``pipeline_steps``, ``pipeline_feeds``, the
    ``pipelines`` view) and each model version's ``content_digest``.

    Versions imported before it get no content digest (the catalog cannot read blobs): they are
    never recognised as identical to another version; re-import one to compute it.
    """
    con.execute(f"ALTER TABLE {SCHEMA}.model_versions ADD COLUMN content_digest VARCHAR")
    con.execute((_V3_CONTENT_COMMENT + PIPELINE_DDL).format(s=SCHEMA))


MIGRATIONS[2] = _migrate_2_to_3


def _migrate_3_to_4(con: duckdb.DuckDBPyConnection) -> None:
    """Version 4 adds each model version's architecture ``fingerprint`` (shown in ``models``) and static
    features (``flops`` per row, ``conv_flops``, ``gemm_flops``, ``nodes``), the
    ``families`` view and the ``merged_graphs`` cache of NetFuse-merged graphs.

    Versions imported before it get no fingerprint and no ``flops`` (the catalog cannot read blobs):
    they are in no family; re-import one to compute them.
    """
    con.execute(f"ALTER TABLE {SCHEMA}.model_versions ADD COLUMN fingerprint VARCHAR")
    for column, sql_type in (("flops", "DOUBLE"), ("conv_flops", "DOUBLE"), ("gemm_flops", "DOUBLE"),
                             ("nodes", "INTEGER")):
        con.execute(f"ALTER TABLE {SCHEMA}.model_versions ADD COLUMN {column} {sql_type}")
    con.execute(f"DROP VIEW {SCHEMA}.models")
    con.execute((_MODELS_VIEW_V4 + _V2_COMMENTS + _V4_FINGERPRINT_COMMENT).format(s=SCHEMA))
    con.execute(FAMILY_DDL.format(s=SCHEMA))


MIGRATIONS[3] = _migrate_3_to_4


def _migrate_4_to_5(con: duckdb.DuckDBPyConnection) -> None:
    """Version 5 adds hyper-parameter studies: ``trainable_versions`` (and the ``trainables`` view),
    ``studies``, ``trials`` and ``stages`` (the stage trees TUNE trains in)."""
    con.execute(STUDY_DDL.format(s=SCHEMA))


MIGRATIONS[4] = _migrate_4_to_5


def _migrate_5_to_6(con: duckdb.DuckDBPyConnection) -> None:
    """Version 6 adds ``traces``: the latency traces PROFILE records."""
    con.execute(TRACE_DDL.format(s=SCHEMA))


MIGRATIONS[5] = _migrate_5_to_6


def _migrate_6_to_7(con: duckdb.DuckDBPyConnection) -> None:
    """Version 7 adds each trace's ``features`` (NULL for older traces: computed when the cost model trains),
    ``trace_operators``, ``compiled`` (TVM artifacts and their checks) and ``cost_models``."""
    con.execute(PERF_DDL.format(s=SCHEMA))


MIGRATIONS[6] = _migrate_6_to_7


def _migrate_7_to_8(con: duckdb.DuckDBPyConnection) -> None:
    """Version 8 adds ``code_signatures`` (empty: code artifacts of older catalogs are untrusted until a user
    trusts them, ``TRUST MODEL m``)."""
    con.execute(TRUST_DDL.format(s=SCHEMA))


MIGRATIONS[7] = _migrate_7_to_8


def _migrate_8_to_9(con: duckdb.DuckDBPyConnection) -> None:
    """Version 9 adds ``version_marks`` (filled with each name's highest version, and the marks older
    catalogs kept in ``meta`` as ``last_version:<name>``) and each study's owner and heartbeat."""
    con.execute(OWNERSHIP_DDL.format(s=SCHEMA))
    con.execute(
        f"INSERT INTO {SCHEMA}.version_marks SELECT 'model', name, max(v) FROM ("
        f"SELECT name, version AS v FROM {SCHEMA}.model_versions UNION ALL "
        f"SELECT substr(key, 14), TRY_CAST(value AS INTEGER) FROM {SCHEMA}.meta WHERE key LIKE 'last\\_version:%' "
        "ESCAPE '\\') WHERE v IS NOT NULL GROUP BY name")
    con.execute(f"INSERT INTO {SCHEMA}.version_marks SELECT 'pipeline', name, max(version) "
                f"FROM {SCHEMA}.pipeline_versions GROUP BY name")
    con.execute(f"DELETE FROM {SCHEMA}.meta WHERE key LIKE 'last\\_version:%' ESCAPE '\\'")


MIGRATIONS[8] = _migrate_8_to_9


def _migrate_9_to_10(con: duckdb.DuckDBPyConnection) -> None:
    """Version 10 adds ``evaluations`` and ``model_aliases`` (empty: nothing was evaluated or named before)."""
    con.execute(LIFECYCLE_DDL.format(s=SCHEMA))


MIGRATIONS[9] = _migrate_9_to_10


def _migrate_10_to_11(con: duckdb.DuckDBPyConnection) -> None:
    """Version 11 adds ``model_origins``, ``model_tags`` and the ``lineage`` view; a version made before it has no
    origin row (its ``model_versions.source`` still says where it came from)."""
    con.execute(LINEAGE_DDL.format(s=SCHEMA))


MIGRATIONS[10] = _migrate_10_to_11


def _migrate_11_to_12(con: duckdb.DuckDBPyConnection) -> None:
    """Version 12 shows each model's aliases in ``modelsql.models`` (its ``aliases`` column, as SHOW MODELS), and
    keeps a trained version's ``hyperparameters`` option as a JSON object: those written before as a Python literal
    (``{'C': 0.5, 'hidden_layer_sizes': (16,)}``) are rewritten (a tuple as an array)."""
    con.execute(MODELS_VIEW.format(s=SCHEMA))
    rows = con.execute(f"SELECT name, version, map_keys(options), map_values(options) FROM {SCHEMA}.model_versions "
                       "WHERE list_contains(map_keys(options), 'hyperparameters')").fetchall()
    for name, version, keys, values in rows:
        options = dict(zip(keys, values))
        try:
            json.loads(options["hyperparameters"])
            continue
        except json.JSONDecodeError:
            options["hyperparameters"] = json.dumps(dict(sorted(ast.literal_eval(options["hyperparameters"]).items())),
                                                    default=str)
        con.execute(f"UPDATE {SCHEMA}.model_versions SET options = MAP(?::VARCHAR[], ?::VARCHAR[]) WHERE name = ? "
                    "AND version = ?", [list(options), list(options.values()), name, version])


MIGRATIONS[11] = _migrate_11_to_12
