"""The PEP 249 exception tree, with a stable ``.code`` on every error.

Hierarchy (PEP 249, "Exceptions")::

    Warning
    Error
      InterfaceError
      DatabaseError
        DataError
        OperationalError
        IntegrityError
        InternalError
        ProgrammingError
        NotSupportedError

Every exception carries ``code``: a short stable string that tests and callers
can match on (``"model_not_found"``, ``"parse_error"`` ...), independent of the
human message. Errors that point into a statement also carry ``line`` and
``column`` (1-based) and render a ``LINE n:`` excerpt with a caret under the
offending text, the way PostgreSQL and DuckDB print them.
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable, Optional


class Warning(Exception):  # noqa: A001 - PEP 249 requires this name
    """PEP 249 ``Warning``: important warnings such as data truncation."""

    code = "warning"


class Error(Exception):
    """PEP 249 ``Error``: base class of every error modelsql raises.

    Attributes:
        code: stable machine-readable identifier of the error kind.
        line, column: 1-based position in the statement text, when known.
        option: the statement option the error is about (``WITH (...)``, PREDICT's named arguments), when
            one is; the statement points at it in the text.
        hyperparameter: the SEARCH hyper-parameter of a TUNE the error is about, when one is.
    """

    code = "error"
    option: Optional[str] = None
    hyperparameter: Optional[str] = None

    def __init__(
        self,
        message: str = "",
        *,
        code: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return self.message

    def retold(self, message: str, *, line: Optional[int] = None, column: Optional[int] = None) -> "Error":
        """The same error (its class, code, and the option or hyper-parameter it is about) told as ``message``,
        at ``line``, ``column`` when given."""
        out = type(self)(message, code=self.code, line=line, column=column)
        out.option, out.hyperparameter = self.option, self.hyperparameter
        return out


class InterfaceError(Error):
    """PEP 249: errors of the database interface itself (e.g. using a closed cursor)."""

    code = "interface_error"


class DatabaseError(Error):
    """PEP 249: errors related to the database."""

    code = "database_error"


class DataError(DatabaseError):
    """PEP 249: problems with the processed data (NULLs, bad values, corrupt blobs)."""

    code = "data_error"


class OperationalError(DatabaseError):
    """PEP 249: errors of the database's operation (I/O, locks, killed work)."""

    code = "operational_error"


class IntegrityError(DatabaseError):
    """PEP 249: relational integrity is affected (duplicate names, dangling references)."""

    code = "integrity_error"


class InternalError(DatabaseError):
    """PEP 249: the database hit an internal error (a bug: please report it)."""

    code = "internal_error"


class ProgrammingError(DatabaseError):
    """PEP 249: programming errors (syntax, missing model/table/column, wrong arguments)."""

    code = "programming_error"


class NotSupportedError(DatabaseError):
    """PEP 249: a method or database API was used that is not supported."""

    code = "not_supported"


ALL_ERRORS = (
    Warning,
    Error,
    InterfaceError,
    DatabaseError,
    DataError,
    OperationalError,
    IntegrityError,
    InternalError,
    ProgrammingError,
    NotSupportedError,
)


_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Characters other than ``\n`` that Python's ``splitlines`` breaks at: lines are counted at ``\n`` alone, as
DuckDB counts them (:func:`position_of`), and these are shown as blanks (a caret stays under its character)."""


def text_lines(sql: str) -> list[str]:
    """``sql``'s lines as an excerpt shows and numbers them: split at ``\n`` only, other line breaks blanked."""
    return _BREAKS.sub(" ", sql).split("\n")


EXCERPT = re.compile(r"\n*LINE (\d+): (.*)\n( *)(\^+)[ \t]*$")
"""A message's closing excerpt (:func:`excerpt`, or DuckDB's): the line number, the line shown, the blanks before
the carets (``LINE n: `` included) and the carets."""


def without_excerpt(message: str) -> str:
    """``message`` without its ``LINE n:`` excerpt (one drawn over other SQL than the statement's)."""
    return message.split("\nLINE ")[0].rstrip()


def excerpt(sql: str, line: int, column: int, length: int = 1) -> str:
    """Return ``LINE n: <text>`` plus a caret line under ``column`` (both 1-based; lines as :func:`text_lines`)."""
    lines = text_lines(sql)
    line = max(1, min(line, len(lines)))
    text = lines[line - 1]
    prefix = f"LINE {line}: "
    caret = " " * (len(prefix) + max(column - 1, 0)) + "^" * max(1, length)
    return f"{prefix}{text}\n{caret}"


def position_of(sql: str, offset: int) -> tuple[int, int]:
    """Convert a 0-based character offset into 1-based (line, column)."""
    offset = max(0, min(offset, len(sql)))
    before = sql[:offset]
    line = before.count("\n") + 1
    column = offset - (before.rfind("\n") + 1) + 1
    return line, column


def offset_of(sql: str, line: int, column: int) -> int:
    """The 0-based character offset of the 1-based ``line``, ``column`` of ``sql`` (lines at ``\n``): what
    :func:`position_of` turns back into them."""
    return sum(len(text) + 1 for text in sql.split("\n")[: line - 1]) + column - 1


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """Return ``' Did you mean "x"?'`` for the closest candidate, or ``''``."""
    matches = difflib.get_close_matches(name.lower(), [c.lower() for c in candidates], n=1, cutoff=0.6)
    if not matches:
        return ""
    original = {c.lower(): c for c in candidates}[matches[0]]
    return f' Did you mean "{original}"?'


CODES: dict[str, str] = {
    # the PEP 249 classes' own codes (an error raised without one)
    "warning": "a PEP 249 Warning: something worth knowing, not an error",
    "error": "an Error without a more precise code",
    "interface_error": "the database interface itself was misused",
    "database_error": "an error of the database without a more precise code (DuckDB's, when untranslated)",
    "data_error": "a problem with the processed data",
    "operational_error": "an error in the database's operation (I/O, locks, killed work)",
    "integrity_error": "relational integrity would be broken",
    "internal_error": "a bug in modelsql or below it: please report it",
    "programming_error": "a programming error without a more precise code",
    "not_supported": "an operation or feature that is not supported",
    # DuckDB's errors, translated (modelsql/duckdb_errors.py)
    "parse_error": "the statement does not parse (DuckDB's parser or ours), or its clauses contradict each other",
    "catalog_error": "DuckDB: a table, view, function or schema the statement names does not exist",
    "binder_error": "DuckDB: a column or expression of the statement does not bind",
    "conversion_error": "DuckDB: a value cannot be converted to the type asked for",
    "out_of_range": "DuckDB: a value is out of its type's range",
    "constraint_violation": "DuckDB: a NOT NULL, UNIQUE, PRIMARY KEY, FOREIGN KEY or CHECK constraint failed",
    "transaction_error": "DuckDB: a transaction conflict or misuse",
    "cross_database_write": "a transaction that wrote to one attached database wrote to another (DuckDB allows one; the "
                            "catalog lives in the connection's database)",
    "transaction_aborted": "a statement failed in this transaction and DuckDB refuses every later one: ROLLBACK",
    "io_error": "reading or writing a file failed",
    "out_of_memory": "DuckDB ran out of memory",
    "invalid_input": "DuckDB: an invalid input value or argument",
    "permission_denied": "DuckDB: the operation is not permitted",
    "interrupted": "the statement was interrupted (Ctrl-C, Connection.interrupt)",
    "division_by_zero": "DuckDB: a division by zero",
    "catalog_object_missing": "the catalog's own SQL found a table or view missing: a damaged catalog",
    "catalog_binder_error": "the catalog's own SQL did not bind: a damaged catalog",
    # statements and their options
    "ambiguous_statement": "a text of ours that DuckDB reads as a statement on an existing table of that name",
    "duplicate_option": "an option is given twice",
    "unknown_option": "an option the statement (or the tuning algorithm) does not have",
    "missing_option": "an option the statement needs is not given (CREATE MODEL ... AS's model_type, target; EVALUATE(...)'s target)",
    "invalid_option": "an option's value (or an argument's) of the wrong type, out of range or not a choice",
    "parameter_not_supported": "a ? parameter where the statement takes only written values",
    "parameter_count": "the number of parameter values differs from the placeholders",
    "paramstyle": "parameters given as a mapping: modelsql's paramstyle is qmark (a sequence)",
    "mixed_placeholders": "? placeholders mixed with numbered ones ($1, ?1) in a text with a PREDICT",
    "invalid_argument": "a bad argument of a Python API call (PEP 249 methods, callbacks)",
    "explain_not_supported": "a statement EXPLAIN cannot explain",
    "invalid_name": "a name that is not a valid model, pipeline or study name",
    "invalid_version": "a version number that is not a positive integer",
    "read_only": "a write on a read-only connection or catalog",
    "python_disabled": "Python named in SQL on a connection opened with allow_python=False",
    "untrusted_code": "code stored in the database (a program, factory or library) no trusted key signed",
    "bad_key_file": "the modelsql signing key file is unreadable or malformed",
    "bad_environment": "an environment variable modelsql reads holds a bad value",
    "missing_dependency": "an optional package the command needs is not installed",
    "quickstart_conflict": "the quickstart would replace objects it did not make",
    # connections and cursors
    "cannot_open": "the database cannot be opened",
    "connection_closed": "the connection is closed",
    "cursor_closed": "the cursor is closed",
    "used_from_hook": "a progress hook ran a statement on the connection whose statement it reports on",
    "no_result": "a fetch without a result to fetch from",
    "register_failed": "Connection.register could not register the object",
    "udf_register": "PREDICT's function could not be registered with DuckDB",
    # models and the catalog
    "model_not_found": "no model (or trainable) of that name",
    "version_not_found": "the model or pipeline has no such version",
    "pipeline_not_found": "no pipeline of that name",
    "family_not_found": "no model family of that name or fingerprint",
    "study_not_found": "no study of that name",
    "trial_not_found": "the study (or tuning algorithm) has no such trial, or no finished one",
    "duplicate_model": "a model (or trainable) of that name exists",
    "duplicate_pipeline": "a pipeline of that name exists",
    "duplicate_step": "two steps of a pipeline have one name",
    "duplicate_served_name": "SERVE names one model or pipeline twice",
    "duplicate_column": "two columns of one name: an output clashing with input columns, or a training query's columns (names are case-insensitive)",
    "duplicate_feature": "a feature column is named twice",
    "duplicate_input_name": "an input name is given twice",
    "name_conflict": "a name clashes with a value inside the graph",
    "version_conflict": "another writer added that version first",
    "model_in_use": "the model is a step of a pipeline: drop the pipeline first",
    "model_not_trainable": "TUNE names an ONNX model, not a trainable",
    "model_without_fingerprint": "the model has no architecture fingerprint (imported before families)",
    "model_set_mismatch": "the models of a MODELS (...) set have different signatures",
    "invalid_shape": "a tensor shape dimension that is not a size or a name",
    "invalid_blob_kind": "a blob kind other than 'graph' or 'tensor'",
    "blob_size_mismatch": "a blob is referenced with two sizes",
    "blob_in_use": "a blob still referenced by a model version cannot be forgotten",
    "blob_missing": "a blob the catalog references is not in the store",
    "blob_corrupt": "a blob's bytes do not hash to its name, or have the wrong size",
    "invalid_digest": "a blob digest that is not 64 hexadecimal characters",
    "digest_mismatch": "a stored tensor's digest differs from the one computed",
    "catalog_corrupt": "the modelsql catalog is damaged or not one modelsql made",
    "catalog_migration_required": "the catalog needs migrating: open it once read-write",
    "catalog_migration_missing": "no migration exists from the catalog's schema version",
    "catalog_version_unsupported": "the catalog is newer than this modelsql",
    "catalog_version_mismatch": "IMPORT DATABASE of an export made by another catalog version",
    # files, export and import
    "file_not_found": "the file does not exist",
    "not_a_regular_file": "the path is not a regular file (a folder, a device, a pipe)",
    "file_too_large": "the file (or a tensor's external data) is larger than modelsql reads",
    "disk_full": "no space left on the device",
    "export_target_in_use": "EXPORT would overwrite a database, store or open file",
    "export_target_not_a_file": "EXPORT's target exists and is not a regular file",
    "export_database_other": "EXPORT DATABASE of a database whose catalog belongs to another connection",
    "export_without_store": "IMPORT DATABASE of an export made without modelsql's blobs",
    "import_target_not_empty": "IMPORT DATABASE into a database whose catalog is not empty",
    "bad_export": "the export folder is incomplete or damaged",
    # converting and checking models
    "unsupported_model": "an object import_model cannot convert",
    "conversion_failed": "converting the model to ONNX failed",
    "conversion_mismatch": "the converted model disagrees with the original on the sample",
    "invalid_onnx": "the ONNX model is invalid or has nothing to predict",
    "not_fitted": "a scikit-learn estimator (or a cost model) that is not fitted",
    "feature_mismatch": "the feature columns (or feature names) do not fit the model's input",
    "n_features_required": "the estimator's number of input features is unknown: pass n_features",
    "feature_names_required": "the estimator selects columns by name but has no feature_names_in_",
    "example_missing": "an example input is needed and none was given (or it has no rows)",
    "bad_sample": "the sample rows for checking a conversion are unusable",
    "bad_input": "an argument names something that is not a suitable input of the model",
    "label_type_not_supported": "class labels of a type that cannot be mapped",
    "opset_mismatch": "pipeline steps of different ONNX opsets could not be reconciled",
    "input_count_mismatch": "the example gives a different number of inputs than forward takes",
    "unsupported_input": "an example input of a type or shape no column carries",
    "unsupported_output": "a program output that is not a tensor with one row per input row",
    "not_a_module": "a Python reference that is not a torch.nn.Module or a function returning one",
    "program_failed": "the Python program raised on its example",
    "nondeterministic_program": "the program's outputs change from call to call",
    "whole_graph_refused": "execution = 'whole_graph' and a rule of the safety gate failed",
    "bad_program": "a stored Python program modelsql did not write",
    "source_changed": "a Python program's source changed since it was imported",
    "no_onnx_graph": "a program kept as Python has no ONNX graph to export, compile, profile, merge or serve",
    # PREDICT
    "column_not_found": "a column the statement names is not in the input",
    "wrong_column_type": "a column's type cannot feed the model input",
    "wrong_input_shape": "a column's rows have another number of values than the model input takes",
    "ragged_input": "a list column's rows differ in length where the input takes a fixed number",
    "null_input": "a NULL in a column fed to a model (on_null = 'error')",
    "model_without_inputs": "the model has no inputs to feed",
    "no_tensor_outputs": "the model has no outputs that can be returned as columns",
    "input_type_not_supported": "a model input of a type no column can feed",
    "output_type_not_supported": "a model output of a type no column can hold",
    "wrong_output_shape": "a model output without one row per input row",
    "batch_type_not_supported": "a column of a type Arrow does not carry, read with execution = 'batch'",
    "correlated_predict": "PREDICT's input refers to columns of an outer query",
    "predict_in_view": "PREDICT in a view, macro or function definition",
    "predict_in_command": "PREDICT in a PREPARE or another command DuckDB plans later",
    "predict_in_recursive_cte": "PREDICT's input reads a recursive CTE holding a PREDICT not computed yet",
    "predict_failed": "PREDICT failed inside the model run",
    "model_run_failed": "the backend failed running the model",
    "inference_failed": "the server's model run failed for a request",
    "route_column_fed": "the ROUTE BY column is also fed to the models",
    "route_unknown": "a row routes to a model not in the set",
    "backend_not_supported": "a backend that cannot run this kind of model (TVM on a pipeline or set)",
    # devices
    "device_not_available": "the device asked for is not on this machine (or is hidden)",
    "device_not_supported": "the device cannot run this (trees and Ray train on the CPU only)",
    "device_mismatch": "a checkpoint trained on one device continued on another",
    "device_not_used": "ONNX Runtime did not place the reference model on the device",
    "capture_declined": "CUDA graph capture is not possible for this model",
    # TVM
    "tvm_unavailable": "TVM (or a package it needs) is not installed",
    "tvm_not_compiled": "backend = 'tvm' without a checked artifact: COMPILE MODEL first",
    "tvm_declined": "the model's TVM artifact was declined (the reason says why)",
    "tvm_import_failed": "TVM cannot import or compile the model",
    "tvm_build_timeout": "TVM's build did not finish within its time limit",
    "tvm_tune_failed": "MetaSchedule tuning failed",
    "invalid_library": "a compiled TVM library cannot be loaded",
    "invalid_target": "a bad target for COMPILE or FINETUNE (or a TARGET column of the wrong kind)",
    # profiling and the cost model
    "fixed_batch": "an input with a fixed batch cannot be profiled at another batch size",
    "symbolic_dimension": "a symbolic dimension other than the batch prevents profiling",
    "profile_not_supported": "PROFILE ... ON of a pipeline",
    "merge_declined": "NetFuse cannot merge the models (a node without a counterpart)",
    "empty_training_set": "fitting the cost model on no traces",
    "invalid_cost_model": "a stored cost model of another format or feature list",
    "invalid_transform": "a TRANSFORM item misused: an ML function of the wrong column kind or arguments, or applied to the TARGET",
    "invalid_feature": "a bad feature value or feature choice (the cost model's, or training's)",
    "invalid_latency": "latencies that are not finite and positive",
    "invalid_weight": "sample weights that are not finite and non-negative",
    "target_not_trained": "the cost model was not trained for that backend or device",
    # TUNE, trainables and training
    "unknown_algorithm": "a tuning algorithm that does not exist",
    "invalid_search_space": "a malformed SEARCH space",
    "corrupt_search_space": "a stored search space that does not parse",
    "grid_needs_choices": "GRID search over a dimension that is not CHOICE",
    "missing_hyperparameter": "a configuration without a value for a searched hyper-parameter",
    "unknown_hyperparameter": "a training hyper-parameter modelsql does not know",
    "invalid_hyperparameter": "a hyper-parameter value training does not accept",
    "hyperparameter_not_schedulable": "a hyper-parameter that cannot change over epochs",
    "factory_not_found": "a Python factory reference that does not import",
    "invalid_factory": "the factory does not build a fitting torch.nn.Module",
    "invalid_factory_params": "the factory refused its arguments",
    "factory_changed": "the trainable's factory changed since the study trained it",
    "checkpoint_collected": "the trial's checkpoint was collected (pruned or failed trial)",
    "checkpoint_mismatch": "a stage's checkpoint does not fit the stage",
    "threads_mismatch": "a checkpoint trained with another thread count",
    "invalid_stage": "a malformed training stage",
    "invalid_training_data": "training data of the wrong shape or type",
    "invalid_tree": "a malformed table of trees",
    "invalid_value": "NaN, infinity or a value past float32 in training data",
    "null_value": "a NULL in training data",
    "null_target": "a NULL in the TARGET column of EVALUATE",
    "alias_not_found": "a model has no alias of that name",
    "tag_not_found": "a model or version has no tag of that name",
    "unknown_metric": "BEST BY a metric EVALUATE does not record",
    "no_evaluation": "BEST BY with no recorded evaluation of the model having that metric (on that input)",
    "not_a_number": "a NaN or infinite number where EVALUATE needs one (a target, a prediction, a probability)",
    "too_few_rows": "too few rows to train and validate",
    "unknown_model_type": "a model_type that is not a model type nor a scikit-learn estimator that predicts",
    "training_failed": "the estimator's fit raised on the training rows (its message says why)",
    "precision_loss": "a number float32 would round, compared with its column's spread (the type models read)",
    "one_class": "a classification TARGET with one class",
    "unknown_label": "a label that is not one of the pipeline's classes",
    "tune_input_predict": "a TUNE or FINETUNE input with PREDICT in it",
    "study_running": "the study is running now",
    "study_stopped": "the study stopped (Ctrl-C or its time budget); run it again to resume",
    "study_definition_changed": "a study of that name exists with another definition",
    "training_diverged": "the loss became NaN or infinite",
    "nondeterministic_operator": "an operator without a deterministic CUDA kernel",
    "trial_failed": ("every trial failed, the first with an error that is not modelsql's; or the trial CREATE MODEL "
                     "... FROM STUDY names failed (it made no model)"),
    "worker_died": "a training worker process died",
    "ray_not_installed": "executor = 'ray' without Ray installed",
    "unexpected_tell": "a tuning algorithm was told about a trial it did not ask for",
    "tell_out_of_order": "a tuning algorithm was told out of trial order",
    "round_not_answered": "a tuning round's trials have not all been told",
    "metrics_length": "told a different number of metrics than epochs asked for",
    # FINETUNE
    "translation_not_exact": "the pipeline's translation to torch differs from the pipeline",
    "export_mismatch": "the exported ONNX model disagrees with the fine-tuned program",
    # serving
    "server_not_found": "no server of this process runs there",
    "not_served": "SERVE REMOVE of a name the server does not serve",
    "port_in_use": "the port is in use",
    "listen_failed": "the server cannot listen on that address",
    "unauthenticated_host": "serving to other machines without a token",
    "unsupported_type": "a tensor type the Open Inference Protocol cannot carry",
    "type_mismatch": "pipeline steps joined by values of different types or shapes",
}
"""Every error code modelsql raises, with what it means (``tests/engine/test_error_codes.py`` checks the source raises
no other and that ``docs/errors.md`` is :func:`codes_markdown`)."""


def codes_markdown() -> str:
    """The text of ``docs/errors.md``: :data:`CODES` as a table (``python -m modelsql.engine.documents`` writes
    it with the option documents)."""
    rows = ["| code | meaning |", "|---|---|"] + [f"| `{c}` | {m} |" for c, m in sorted(CODES.items())]
    return ("# Error codes\n\nEvery modelsql error has a stable `code` (`exc.code`) that programs can match on, "
            "independent of the message. Generated from `modelsql.errors.CODES` by "
            "`python -m modelsql.engine.documents`; do not edit by hand. Options: [options.md](options.md).\n\n" + "\n".join(rows) + "\n")

