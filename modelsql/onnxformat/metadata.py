"""What modelsql knows of a model, written into and read back from its ONNX ``metadata_props``.

``EXPORT MODEL`` writes these keys (values are JSON) into the exported file's
``ModelProto.metadata_props`` (ONNX IR: free key/value strings), so that an
exported model imported again, here or elsewhere, binds the same columns:

``modelsql.features``
    The feature (column) names bound to the model's single input, in order
    (JSON list of strings); absent when unknown.
``modelsql.outputs``
    Per output, the column it is returned as and that column's DuckDB type
    (JSON object ``{output: {"column": ..., "type": ...}}``).
``modelsql.imputed``
    The inputs (columns) whose NULLs the model imputes, fed as NaN or the text U+2400 (JSON list of
    strings; a model trained in SQL with ``on_null = 'impute'`` or ``ML.IMPUTER``); absent when none.
``modelsql.description``
    The ``description`` given at import, when there is one.
``modelsql.version``
    The modelsql version that wrote the file.
``modelsql.source``
    Model name and version in the catalog it was exported from, and where that came from.

Import reads ``modelsql.features`` back when the caller names no features, and ``modelsql.imputed``.
"""

from __future__ import annotations

import json
from typing import Mapping, Optional, Sequence

from onnx import ModelProto

from modelsql.errors import DataError

PREFIX = "modelsql."
FEATURES = PREFIX + "features"
IMPUTED = PREFIX + "imputed"


def write_metadata(model: ModelProto, entries: Mapping[str, object]) -> None:
    """Set ``modelsql.<key>`` = JSON(value) in ``model.metadata_props`` for each entry (None: removed);
    keys of other writers are kept as they were."""
    wanted = {PREFIX + k: v for k, v in entries.items()}
    kept = [(p.key, p.value) for p in model.metadata_props if p.key not in wanted]
    del model.metadata_props[:]
    for key, value in kept:
        model.metadata_props.add(key=key, value=value)
    for key, value in wanted.items():
        if value is not None:
            model.metadata_props.add(key=key, value=json.dumps(value))


def metadata_features(model: ModelProto, what: str) -> Optional[tuple[str, ...]]:
    """The feature names an earlier EXPORT wrote (``modelsql.features``), or None.

    Raises:
        DataError: code ``"invalid_onnx"`` when the entry is not a JSON list of strings.
    """
    return _names(model, FEATURES, what)


def metadata_imputed(model: ModelProto, what: str) -> Optional[tuple[str, ...]]:
    """The inputs whose NULLs the model imputes, as an earlier EXPORT wrote them (``modelsql.imputed``), or
    None (checked against the graph by :func:`modelsql.converters.imputation_check.check_imputation`).

    Raises:
        DataError: code ``"invalid_onnx"`` when the entry is not a JSON list of names.
    """
    return _names(model, IMPUTED, what)


def _names(model: ModelProto, key: str, what: str) -> Optional[tuple[str, ...]]:
    """The entry ``key``: a JSON list of non-empty names, or None when absent."""
    for p in model.metadata_props:
        if p.key == key:
            try:
                names = json.loads(p.value)
            except ValueError:
                names = None
            if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
                raise DataError(
                    f"{what}: metadata entry {key} must be a JSON list of column names, not {p.value[:80]!r}.",
                    code="invalid_onnx",
                )
            return tuple(names)
    return None


def outputs_entry(outputs: Sequence) -> dict:
    """The ``modelsql.outputs`` value for bound output columns (``OutputCol``s)."""
    return {o.output_name: {"column": o.column, "type": o.duckdb_type} for o in outputs}
